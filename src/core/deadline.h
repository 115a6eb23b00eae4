// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Deadlines from timeouts a caller may make huge: milliseconds::max() is a common "forever", and
// now + timeout would overflow steady_clock's nanoseconds into the past (a wait that fails at
// once). These saturate at time_point::max() instead.
#pragma once

#include <chrono>

namespace shmccl::detail {

// `now` + `timeout`, or time_point::max() when that does not fit; `now` when timeout <= 0.
template <typename Rep, typename Period>
std::chrono::steady_clock::time_point deadline_after(
    std::chrono::duration<Rep, Period> timeout,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  using Clock = std::chrono::steady_clock;
  using Timeout = std::chrono::duration<Rep, Period>;
  if (timeout <= Timeout::zero()) return now;
  // Compared in the timeout's own unit, which is at least as coarse as the clock's: no overflow.
  if (timeout >= std::chrono::duration_cast<Timeout>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

// `timeout` * `factor`, saturating at the type's maximum instead of overflowing.
template <typename Rep, typename Period>
std::chrono::duration<Rep, Period> saturating_multiply(std::chrono::duration<Rep, Period> timeout,
                                                       Rep factor) {
  using Timeout = std::chrono::duration<Rep, Period>;
  if (timeout.count() > Timeout::max().count() / factor) return Timeout::max();
  return timeout * factor;
}

}  // namespace shmccl::detail
