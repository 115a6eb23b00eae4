// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// An asymmetric fence for the Dekker pair of an arrival with a sleeper. An arriving rank
// publishes its arrival, then reads the sleeper count; a sleeper counts itself, then re-checks
// the arrivals. Both sides need a full fence between their store and their load, and on the
// arrival's side that fence waits for the arrival line's ownership request: a line transfer on
// every call, which ranks that run ahead (a broadcast's root) pay as their whole cost. With
// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) the sleeper, which is about to make a system call
// anyway, makes every running thread of the registered processes pass a full barrier, and the
// arrival needs only a compiler barrier (the scheme of liburcu and folly's asymmetric fences).
//
// Where the kernel lacks the command or refuses it (seccomp), both sides keep their full fences.
#pragma once

#include <atomic>

#include "core/memory_order.h"

namespace shmccl::transport {

// This process registered for the sleepers' barriers (set by enable_asymmetric_fences; cleared in
// a forked child, a new process that registers itself when it makes a group).
inline std::atomic<bool> g_asymmetric_fences{false};

// Registers this process for the sleepers' barriers, once per process (and again in a forked
// child). Cheap after the first call.
void enable_asymmetric_fences();

// This process is registered: its arrivals may use a compiler barrier instead of a full fence,
// in groups whose sleepers call sleeper_fence(). Never under ThreadSanitizer (it has no model of
// membarrier).
inline bool asymmetric_fences_enabled() {
  return !::shmccl::detail::kThreadSanitizer && g_asymmetric_fences.load(std::memory_order_relaxed);
}

// Between a sleeper's count of itself and its re-check of what it waits for: makes every running
// thread of the registered processes pass a full barrier (nothing where the kernel lacks the
// command, and then no process registers).
void sleeper_fence();

}  // namespace shmccl::transport
