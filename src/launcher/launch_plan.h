// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// LaunchPlan: everything decided once, before the first rank starts, from the command line and
// the machine: the resolved program, world size, job id, master address and port, the run's log
// directory, each rank's output routing and CPU binding. rank_env() builds the environment a rank
// sees; it is the launcher's half of the contract with init_process_group() (docs/launcher.md).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/log_layout.h"
#include "launcher/numa_binding.h"
#include "launcher/options.h"
#include "launcher/output_mux.h"

namespace shmccl::launcher {

struct RankPlan {
  int rank = 0;
  OutputRouting routing;  // routing.file: the streams written to the rank's log files
  Binding binding;
  // Teed streams (kStdout, kStderr bits) whose lines the duplicate filters see.
  unsigned duplicated = kNoStream;
  // --virtual-local-rank: the one physical NPU the rank sees (ASCEND_RT_VISIBLE_DEVICES).
  std::optional<std::string> visible_device;
};

struct LaunchPlan {
  std::string program;       // as given on the command line
  std::string program_path;  // resolved executable
  std::vector<std::string> argv;
  std::vector<std::string> base_env;  // shmrun's environment at start-up

  int world_size = 1;
  std::string run_id = "none";
  std::string role = "default";  // ROLE_NAME
  std::string master_addr;
  int master_port = 29500;
  int max_restarts = 0;
  std::optional<std::string> timeout;
  double grace_period_s = 5;
  std::vector<int> stop_signals;  // --signals-to-handle
  double monitor_interval_s = 5;
  bool prefix = true;
  bool verbose = false;
  bool reap_orphans = false;  // Options::reap_orphans
  std::string trace_file;     // SHMCCL_TRACE_FILE, for the failure summary
  double trace_wait_s = 1;    // SHMCCL_TRACE_WAIT: the ranks' time to dump after a failure
  // --log-dir, or a temporary directory for --redirects/--tee without it: this run's directory.
  LogLayout logs;
  // --duplicate-stdout-filters and --duplicate-stderr-filters (empty: none), whose lines go to
  // logs.filtered_file(): one file for every rank's lines.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::vector<RankPlan> ranks;

  // The rank's TORCHELASTIC_ERROR_FILE in attempt `restart_count`, whose namespace is
  // `job_namespace`: error.json in its log directory, kept after the job, or without one
  // /dev/shm/shmccl.<namespace>.rank<N>.error.json, which goes with the attempt's other objects
  // (and with them after a SIGKILLed shmrun, see stale_cleanup.h).
  std::string error_file(int rank, int restart_count, const std::string& job_namespace) const;
  // The rank's log files in attempt `restart_count`: stdout.log and stderr.log, those of them its
  // routing writes.
  std::vector<std::string> log_files(int rank, int restart_count) const;
  // The whole environment of `rank` in one attempt.
  std::vector<std::string> rank_env(int rank, int restart_count, const std::string& job_namespace,
                                    int lock_fd) const;
};

// Thrown when the plan cannot be made (program not found, log directory not writable...).
class LaunchError : public std::runtime_error {
 public:
  LaunchError(const std::string& what, int exit_code)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// `warnings` receives things worth telling the user (ranks sharing cores, a temporary log dir).
LaunchPlan make_launch_plan(const Options& options, std::vector<std::string>* warnings);

// Usable cores: shmrun's CPU affinity, else the online CPUs.
int usable_cpu_count();

}  // namespace shmccl::launcher
