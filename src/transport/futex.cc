// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "core/check.h"

namespace shmccl::transport {
namespace {

static_assert(std::chrono::steady_clock::is_steady);

long futex_syscall(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout,
                   uint32_t value3) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr,
                   value3);
}

timespec to_timespec(std::chrono::nanoseconds duration) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(duration);
  timespec result{};
  result.tv_sec = static_cast<time_t>(seconds.count());
  result.tv_nsec = static_cast<long>((duration - seconds).count());
  return result;
}

FutexResult interpret(long result, const char* operation) {
  if (result == 0) return FutexResult::kWoken;
  switch (errno) {
    case EAGAIN:
      return FutexResult::kValueChanged;
    case ETIMEDOUT:
      return FutexResult::kTimedOut;
    case EINTR:
      return FutexResult::kInterrupted;
    default:
      detail::throw_system_error(operation, errno);
  }
}

}  // namespace

FutexResult futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                       std::chrono::nanoseconds timeout) {
  if (timeout < std::chrono::nanoseconds::zero()) {
    return interpret(futex_syscall(word, FUTEX_WAIT, expected, nullptr, 0), "futex(FUTEX_WAIT)");
  }
  const timespec relative = to_timespec(timeout);
  return interpret(futex_syscall(word, FUTEX_WAIT, expected, &relative, 0), "futex(FUTEX_WAIT)");
}

FutexResult futex_wait_until(std::atomic<uint32_t>* word, uint32_t expected,
                             std::chrono::steady_clock::time_point deadline) {
  // FUTEX_WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC (no FUTEX_CLOCK_REALTIME), the
  // clock behind steady_clock. A deadline before the epoch cannot be a timespec: it has passed.
  const auto since_epoch = deadline.time_since_epoch();
  if (since_epoch < std::chrono::nanoseconds::zero()) return FutexResult::kTimedOut;
  const timespec absolute = to_timespec(since_epoch);
  return interpret(
      futex_syscall(word, FUTEX_WAIT_BITSET, expected, &absolute, FUTEX_BITSET_MATCH_ANY),
      "futex(FUTEX_WAIT_BITSET)");
}

int futex_wake(std::atomic<uint32_t>* word, int count) {
  const long woken = futex_syscall(word, FUTEX_WAKE, static_cast<uint32_t>(count), nullptr, 0);
  if (woken == -1) detail::throw_system_error("futex(FUTEX_WAKE)", errno);
  return static_cast<int>(woken);
}

}  // namespace shmccl::transport
