// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

#include "core/logging.h"

namespace shmccl::transport {
namespace {

long membarrier(int command) {
  return syscall(__NR_membarrier, command, 0, 0);
}

// Whether the kernel offers both halves of the global expedited command (same answer in every
// process of the machine).
bool global_expedited_supported() {
  static const bool supported = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    return commands > 0 && (commands & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
           (commands & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0;
  }();
  return supported;
}

std::once_flag g_atfork_once;

}  // namespace

void enable_asymmetric_fences() {
  if (g_asymmetric_fences.load(std::memory_order_acquire)) return;
  if (::shmccl::detail::kThreadSanitizer || !global_expedited_supported()) return;
  std::call_once(g_atfork_once, [] {
    // A forked child is a new process: it arrives with full fences until it registers itself.
    pthread_atfork(nullptr, nullptr,
                   [] { g_asymmetric_fences.store(false, std::memory_order_relaxed); });
  });
  // Registering twice (two threads making groups at once) is harmless: no lock, which a fork
  // could leave held in the child.
  if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0) {
    SHMCCL_INFO(kShm, "membarrier registration refused: arrivals keep their full fence");
    return;
  }
  g_asymmetric_fences.store(true, std::memory_order_release);
}

void sleeper_fence() {
  // Also when this process is not registered: its peers may be, and skip their fences.
  if (global_expedited_supported()) membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED);
}

}  // namespace shmccl::transport
