// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/process_id.h"

#include <pthread.h>
#include <unistd.h>

namespace shmccl::detail::process_id_detail {

std::atomic<pid_t> g_cached_pid{0};

namespace {

void forget_in_child() {
  g_cached_pid.store(0, std::memory_order_relaxed);
}

}  // namespace

pid_t refresh_pid() {
  // Registered before the first id is cached, so no fork can copy a cached id unnoticed.
  static const bool registered = pthread_atfork(nullptr, nullptr, forget_in_child) == 0;
  const pid_t pid = ::getpid();
  if (registered) g_cached_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

}  // namespace shmccl::detail::process_id_detail
