// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// This process's id without a system call. glibc stopped caching getpid() in 2.25, and a system
// call costs about 1 us in some VMs (this project's PVM guests: 0.05-0.1 us on bare metal), where
// a work-pool collective asked for it once per buffer it resolved: 6 calls per 2-rank all-gather,
// 18 at 8 ranks. The cache is refreshed in a child made by fork() (pthread_atfork); a child made
// by a raw clone() without exec must not call into shmccl (it cannot use a parent's groups or
// streams anyway).
#pragma once

#include <sys/types.h>

#include <atomic>

namespace shmccl::detail {

namespace process_id_detail {
extern std::atomic<pid_t> g_cached_pid;  // 0 until the first call, and in a fresh fork child
pid_t refresh_pid();
}  // namespace process_id_detail

inline pid_t current_pid() {
  const pid_t pid = process_id_detail::g_cached_pid.load(std::memory_order_relaxed);
  return pid != 0 ? pid : process_id_detail::refresh_pid();
}

}  // namespace shmccl::detail
