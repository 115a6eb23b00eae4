// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// nccl-tests' report: a header naming the run and every rank (pid, host, device), the column
// heads, one row per size (size, count, type, redop, root, then time, algbw, busbw and #wrong
// out of place and in place) and the closing lines: "# Out of bounds values" (the number of
// results that had wrong elements, "OK" or "FAILED") and "# Avg bus bandwidth" (the mean busbw
// of every result). Every rank keeps the tallies (the results it is given are already agreed by
// all ranks); only a report constructed with a stream prints. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "options.h"
#include "size_plan.h"

namespace shmccl::perf {

// One measurement: the slowest rank's average seconds per op, and the wrong elements summed over
// ranks (-1: not checked).
struct Measurement {
  double seconds = 0;
  int64_t wrong = -1;
};

struct RankInfo {
  int rank = 0;
  pid_t pid = 0;
  int device = 0;           // the rank's device index
  int physical_device = 0;  // the host's index of it (ASCEND_RT_VISIBLE_DEVICES)
};

// "8.41", "123.4", "12345": nccl-tests' precision for a time in microseconds.
std::string format_time_us(double microseconds);

class Report {
 public:
  // `out` == nullptr: keep the tallies but print nothing (ranks other than 0).
  explicit Report(std::FILE* out) : out_(out) {}

  void header(const PerfOptions& options, int world, const std::string& host,
              const std::vector<RankInfo>& ranks);
  // Starts a row; `redop` is "none" and `root` -1 where they do not apply, as in nccl-tests.
  void begin_row(const SizePlan& plan, ScalarType dtype, const char* redop, int root);
  // Adds one column group (out-of-place, then in-place) to the current row.
  void add_result(const Measurement& measurement, int64_t bytes, double bus_factor);
  void end_row();
  void footer();

  // Results with at least one wrong element so far.
  int64_t failed_results() const { return failed_results_; }

 private:
  void print(const char* format, ...) __attribute__((format(printf, 2, 3)));

  std::FILE* out_;
  int64_t failed_results_ = 0;
  double busbw_sum_ = 0;
  int64_t results_ = 0;
};

}  // namespace shmccl::perf
