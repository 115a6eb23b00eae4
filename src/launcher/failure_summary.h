// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The report shmrun prints when a job fails, laid out like torchrun's ("Root Cause (first
// observed failure)" then the other ranks that did not succeed), so people who know one can
// read the other: rank, local rank, pid, exit code or signal, time, what the rank recorded in
// its error file (TORCHELASTIC_ERROR_FILE), the log file (--log-dir), and the expected
// flight-recorder file when SHMCCL_TRACE_FILE is set.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/child_process.h"
#include "launcher/error_files.h"

namespace shmccl::launcher {

// How and when one rank ended.
struct RankExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  ExitStatus status;
  std::chrono::system_clock::time_point time;
  bool stopped = false;  // it ended after shmrun began stopping the group (not necessarily by it)
  bool signaled_by_shmrun = false;        // it died of a signal shmrun had sent it
  std::optional<RecordedError> recorded;  // what it wrote to its error file
  std::string error_file;                 // that file, when it is kept (the log directory)
};

struct SummaryContext {
  std::string program;
  std::string host;
  std::vector<std::string> log_files;  // by rank; empty: no log file
  std::string trace_file;              // SHMCCL_TRACE_FILE; rank r writes "<value>.<r>"
  std::vector<bool> trace_written;     // by rank: its flight recorder file exists
};

// Whether the rank recorded that it failed because another rank did (a shmccl::RemoteError: a peer
// died, aborted or called another collective). Of ranks seen to end together, one that failed on
// its own is the root cause.
bool failed_because_of_a_peer(const RankExit& exit);

// `root_cause` first, then `others` (ranks that did not succeed), in that order.
std::string format_failure_summary(const SummaryContext& context, const RankExit& root_cause,
                                   const std::vector<RankExit>& others);

// "2026-01-31_12:00:00", local time, as torchrun prints it.
std::string format_time(std::chrono::system_clock::time_point time);

}  // namespace shmccl::launcher
