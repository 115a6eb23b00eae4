// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// WorkerGroup: one attempt of a job. run() creates the job's namespace and lock, starts every
// rank, and supervises them from one EventLoop: each rank's pidfd (exit), its two output pipes,
// the signalfd, and the grace-period and monitor timers. The first rank to fail (non-zero exit
// or a signal) or a signal to shmrun makes it stop the others: SIGTERM, then SIGKILL after the
// grace period (at once on a second signal). run() returns only when every rank has been reaped
// and every /dev/shm entry of the namespace removed, also when it throws. Not thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "launcher/console_sink.h"
#include "launcher/failure_summary.h"
#include "launcher/launch_plan.h"
#include "launcher/orphan_reaper.h"
#include "launcher/signal_watcher.h"

namespace shmccl::launcher {

struct AttemptResult {
  std::optional<RankExit> root_cause;  // the first rank that failed on its own
  std::vector<RankExit> others;        // every other rank that did not succeed
  std::optional<int> signal;           // a signal shmrun received during the attempt
  int stopped = 0;                     // ranks still running when shmrun began stopping them

  bool succeeded() const { return !root_cause && !signal; }
};

// From construction to destruction, shmrun's own log lines go into its stderr's ConsoleSink (never
// a blocking write): its owner drains them (err_console().drain()) before the job's end; what an
// exception leaves gets a moment at most in the destructor.
class WorkerGroup {
 public:
  WorkerGroup(const LaunchPlan& plan, SignalWatcher& signals);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Runs attempt number `restart_count` (TORCHELASTIC_RESTART_COUNT) to its end.
  AttemptResult run(int restart_count);

  // shmrun's stderr (its stdout's sink under `2>&1`), for its own lines between attempts: they
  // follow whatever it still holds.
  ConsoleSink& err_console() {
    return separate_err_console_ ? *separate_err_console_ : out_console_;
  }

 private:
  const LaunchPlan& plan_;
  SignalWatcher& signals_;
  OrphanReaper reaper_;  // before any rank is forked
  ConsoleSink out_console_;
  std::optional<ConsoleSink> separate_err_console_;
};

}  // namespace shmccl::launcher
