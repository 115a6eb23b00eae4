// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// LogLayout: where one run of a job keeps its logs, in torchrun's layout (its DefaultLogsSpecs):
//   <run dir>/attempt_<n>/<local rank>/stdout.log   a rank's stdout, when it goes to a file
//   <run dir>/attempt_<n>/<local rank>/stderr.log   its stderr, likewise
//   <run dir>/attempt_<n>/<local rank>/error.json   its TORCHELASTIC_ERROR_FILE
//   <run dir>/attempt_<n>/filtered_stdout.log       --duplicate-stdout-filters (and stderr)
// The run directory is new for every shmrun (make_launch_plan makes it), and attempt <n> is
// restart <n> (TORCHELASTIC_RESTART_COUNT), so no run or attempt overwrites another's logs and no
// file of an earlier one can be taken for this one's. Paths only, besides make_attempt_dirs.
#pragma once

#include <string>

#include "launcher/options.h"

namespace shmccl::launcher {

struct LogLayout {
  std::string run_dir;  // empty: no log directory

  bool empty() const { return run_dir.empty(); }
  std::string attempt_dir(int attempt) const;
  std::string rank_dir(int attempt, int local_rank) const;
  // kStdout: stdout.log; kStderr: stderr.log.
  std::string stream_file(int attempt, int local_rank, StreamMask stream) const;
  std::string error_file(int attempt, int local_rank) const;
  std::string filtered_file(int attempt, StreamMask stream) const;

  // Creates attempt_<n>/ and one directory per local rank in it. Throws SystemError.
  void make_attempt_dirs(int attempt, int local_ranks) const;
};

}  // namespace shmccl::launcher
