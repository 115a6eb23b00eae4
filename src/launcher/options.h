// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmrun's command line, in torchrun's spelling: `--flag=value` and `--flag value`, `-` and `_`
// alike in names, and `--` or the first argument that is not an option ends shmrun's options
// (everything after it is the program and its arguments). parse_options() is pure: it reads no
// environment and touches no file, so it is unit-tested directly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shmccl::launcher {

// A malformed command line. main() prints it with the usage line and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NumaMode { kNone, kNode, kExclusive, kCore, kSocket, kCoreComplex };

// Which of a rank's streams a --redirects / --tee value selects: bit 0 stdout, bit 1 stderr.
enum StreamMask : unsigned { kNoStream = 0, kStdout = 1, kStderr = 2, kBothStreams = 3 };

// "3" (every local rank) or "0:1,1:2" (per local rank), as torchrun spells it.
struct StreamSelection {
  std::optional<unsigned> all;                    // set by the plain form
  std::vector<std::pair<int, unsigned>> by_rank;  // (local rank, mask) from the mapped form
  bool given = false;
  unsigned mask_for(int local_rank) const;
};

enum class Mode { kRun, kHelp, kVersion, kDumpConfig, kCleanup };

// SIGTERM, SIGINT, SIGHUP, SIGQUIT: torchrun's --signals-to-handle default.
std::vector<int> default_signals_to_handle();

struct Options {
  Mode mode = Mode::kRun;

  // Topology. nproc_per_node == kAutoRanks: one rank per usable core; kNpuRanks: one per
  // simulated NPU this shmrun sees.
  static constexpr int kAutoRanks = 0;
  static constexpr int kNpuRanks = -1;
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // unset: 29500, or a free port with --standalone
  // --rdzv-endpoint host[:port], which wins over --master-addr and --master-port as in torchrun.
  struct Endpoint {
    std::string host;
    std::optional<int> port;  // unset: 29400 (torchrun's c10d rendezvous); 0: a free port
    std::string given;        // as on the command line
  };
  std::optional<Endpoint> rdzv_endpoint;
  std::optional<std::string> rdzv_backend;  // accepted; one host needs no rendezvous backend
  std::optional<std::string> run_id;        // --rdzv-id / --run-id
  bool standalone = false;       // picks the job id and port itself: the three above are ignored
  std::string role = "default";  // --role: ROLE_NAME of the ranks

  // Supervision.
  int max_restarts = 0;
  double monitor_interval_s = 5.0;
  // The signals that stop the job, each forwarded to the ranks: torchrun's default four, and
  // those --signals-to-handle adds. SIGUSR1, unless listed, asks the ranks for a flight recorder
  // dump instead.
  std::vector<int> signals_to_handle = default_signals_to_handle();
  double grace_period_s = 5.0;
  bool grace_period_given = false;  // else TORCH_ELASTIC_SHUTDOWN_TIMEOUT may set it (launch plan)
  std::optional<std::string> timeout;  // --timeout, normalized to seconds, for SHMCCL_TIMEOUT

  // Output.
  StreamSelection redirects;
  StreamSelection tee;
  std::optional<std::string> log_dir;
  std::optional<std::vector<int>> local_ranks_filter;
  bool prefix = true;
  // Teed lines that contain any of these go to <log dir>/filtered_stdout.log (and
  // filtered_stderr.log), all ranks together.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // Each rank sees only its own NPU, as device 0, with LOCAL_RANK=0 (ASCEND_RT_VISIBLE_DEVICES).
  bool virtual_local_rank = false;

  NumaMode numa = NumaMode::kNone;
  bool verbose = false;
  // shmrun becomes a child subreaper and reaps the processes the ranks leave behind (always so
  // when it runs as PID 1: OrphanReaper).
  bool reap_orphans = false;

  // The program and its arguments (kRun), or the namespaces to consider (kCleanup; empty: all).
  std::vector<std::string> command;
};

// Throws UsageError on anything malformed; `args` excludes argv[0].
Options parse_options(const std::vector<std::string>& args);

// torchrun takes each of its options from a PET_<NAME> variable too (PET_NPROC_PER_NODE=4), which
// is how Kubeflow's PyTorchJob configures it: the options those variables give, as arguments to
// put before the command line's own (which then win). `get` reads a variable (std::getenv).
// Throws UsageError naming the variable when its value is malformed.
std::vector<std::string> environment_options(const std::function<const char*(const char*)>& get);

// The one-line synopsis and the full --help text.
const char* usage_line();
std::string help_text();

const char* numa_mode_name(NumaMode mode);

}  // namespace shmccl::launcher
