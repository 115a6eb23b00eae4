// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Cross-process futex wait/wake on a 32-bit atomic word, typically in shared memory.
//
// The word is never used with FUTEX_PRIVATE_FLAG: the kernel keys a shared futex on the
// underlying page, so a waiter in one process is woken by a wake in another process that maps
// the same segment (at any address).
//
// Contract (as for any futex): futex_wait may return spuriously, so callers re-check their
// condition in a loop, and a waker changes the word *before* it calls futex_wake. Both functions
// are thread-safe and async-signal-safe apart from the exceptions thrown on misuse.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace shmccl::transport {

// The kernel reads and compares the word as a plain aligned 32-bit integer; that is only the
// same object as std::atomic<uint32_t> when the atomic is lock-free and has no extra state.
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && alignof(std::atomic<uint32_t>) == 4);

enum class FutexResult {
  kWoken,         // a futex_wake woke us (or a spurious wakeup: re-check the condition)
  kValueChanged,  // *word != expected when the kernel looked (EAGAIN): no sleep happened
  kTimedOut,      // the timeout elapsed
  kInterrupted,   // a signal handler ran (EINTR)
};

// Sleeps while *word == expected, for at most `timeout` (negative: no limit). The timeout is
// relative and measured on CLOCK_MONOTONIC (plain FUTEX_WAIT). Throws SystemError on EFAULT or
// EINVAL (a bad address), which is a bug in the caller.
FutexResult futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                       std::chrono::nanoseconds timeout);

// Sleeps while *word == expected, until `deadline` (an absolute CLOCK_MONOTONIC time, which is
// std::chrono::steady_clock on Linux; FUTEX_WAIT_BITSET). Loops that wait several times for one
// deadline use this form, so the deadline does not drift.
FutexResult futex_wait_until(std::atomic<uint32_t>* word, uint32_t expected,
                             std::chrono::steady_clock::time_point deadline);

// Wakes up to `count` waiters of `word`; returns how many were woken.
int futex_wake(std::atomic<uint32_t>* word, int count = INT_MAX);

}  // namespace shmccl::transport
