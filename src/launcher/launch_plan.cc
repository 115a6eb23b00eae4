// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/launch_plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "core/config.h"
#include "core/file_descriptor.h"
#include "device/visible_devices.h"
#include "launcher/child_process.h"
#include "launcher/job_namespace.h"
#include "transport/control_block.h"

extern char** environ;

namespace shmccl::launcher {
namespace {

constexpr int kDefaultMasterPort = 29500;
// torchrun's c10d rendezvous port (c10d_rendezvous_backend.DEFAULT_PORT), for an --rdzv-endpoint
// without one: --master-port's default applies to --master-port only.
constexpr int kDefaultRendezvousPort = 29400;

// Every variable shmrun sets; inherited values of these are replaced, never duplicated.
const std::set<std::string>& owned_variables() {
  static const std::set<std::string> names = {"RANK",
                                              "LOCAL_RANK",
                                              "WORLD_SIZE",
                                              "LOCAL_WORLD_SIZE",
                                              "GROUP_RANK",
                                              "GROUP_WORLD_SIZE",
                                              "ROLE_RANK",
                                              "ROLE_WORLD_SIZE",
                                              "ROLE_NAME",
                                              "MASTER_ADDR",
                                              "MASTER_PORT",
                                              "TORCHELASTIC_RESTART_COUNT",
                                              "TORCHELASTIC_MAX_RESTARTS",
                                              "TORCHELASTIC_RUN_ID",
                                              "SHMCCL_JOB_ID",
                                              "SHMCCL_NAMESPACE",
                                              "SHMCCL_LAUNCHER_PID",
                                              "SHMCCL_LOCK_FD",
                                              "TORCHELASTIC_ERROR_FILE"};
  return names;
}

// A port nobody listens on right now (torchrun --standalone does the same).
int free_port() {
  FileDescriptor socket_fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (!socket_fd || bind(socket_fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      getsockname(socket_fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw LaunchError(std::string("cannot find a free port: ") + std::strerror(errno), 1);
  }
  return ntohs(address.sin_port);
}

void make_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw LaunchError("cannot create log directory " + prefix + ": " + std::strerror(errno), 1);
    }
    if (slash == std::string::npos) return;
  }
}

// This run's log directory, made new as torchrun makes it: <--log-dir>/<run id>_XXXXXX, or for
// --redirects/--tee without --log-dir /tmp/shmrun-<run id>-XXXXXX. Earlier runs' logs stay.
std::string make_run_directory(const std::optional<std::string>& log_dir,
                               const std::string& run_id) {
  std::string path = "/tmp/shmrun-" + sanitize_run_id(run_id) + "-XXXXXX";
  if (log_dir) {
    std::string base = *log_dir;
    while (base.size() > 1 && base.back() == '/')
      base.pop_back();
    make_directories(base);
    path = base + "/" + sanitize_run_id(run_id) + "_XXXXXX";
  }
  if (mkdtemp(path.data()) == nullptr) {
    throw LaunchError("cannot create log directory " + path + ": " + std::strerror(errno), 1);
  }
  return path;
}

// The host's simulated NPUs that shmrun sees, as its ranks' device layer will: the inherited
// ASCEND_RT_VISIBLE_DEVICES, else all of them. A malformed list is a LaunchError naming `option`.
std::vector<int> visible_devices(const char* option) {
  try {
    return device::visible_devices_from_environment();
  } catch (const std::exception& error) {
    throw LaunchError(std::string(option) + ": " + error.what(), 2);
  }
}

// --virtual-local-rank: the physical NPU of each local rank, as torchrun maps CUDA devices: the
// rank's entry of the inherited list, else its local rank (here modulo the host's simulated
// devices, so that more ranks than devices share them, as `rank % device_count()` does).
std::vector<std::string> virtual_devices(int world_size) {
  const std::vector<int> visible = visible_devices("--virtual-local-rank");
  const char* inherited = std::getenv(device::kVisibleDevicesVariable);
  if (inherited != nullptr && static_cast<int>(visible.size()) < world_size) {
    throw LaunchError("--virtual-local-rank: local rank " + std::to_string(visible.size()) +
                          " has no device: " + device::kVisibleDevicesVariable + "=" + inherited +
                          " lists " + std::to_string(visible.size()) + " for " +
                          std::to_string(world_size) + " ranks",
                      2);
  }
  std::vector<std::string> devices;
  for (int rank = 0; rank < world_size; ++rank)
    devices.push_back(std::to_string(visible[static_cast<size_t>(rank) % visible.size()]));
  return devices;
}

// torchrun's default: ranks whose OpenMP runtimes each start a thread per CPU would overload the
// host. (shmccl's own GEMMs set their thread count themselves: SHMCCL_OPS_THREADS.)
void default_omp_threads(LaunchPlan& plan, std::vector<std::string>* warnings) {
  if (plan.world_size <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return;
  plan.base_env.emplace_back("OMP_NUM_THREADS=1");
  if (warnings != nullptr) {
    warnings->push_back("OMP_NUM_THREADS is not set: each of the " +
                        std::to_string(plan.world_size) +
                        " ranks gets OMP_NUM_THREADS=1, as torchrun sets it, so that their "
                        "OpenMP threads do not overload the host; set it to tune");
  }
}

// The job id, master address and port, as torchrun resolves them: --standalone picks a random id
// and a free port and ignores the --rdzv-* options; --rdzv-endpoint wins over --master-addr and
// --master-port; port 0 asks for a free port.
void plan_rendezvous(const Options& options, LaunchPlan& plan, std::vector<std::string>* warnings) {
  plan.run_id = options.run_id.value_or("none");
  plan.master_addr = options.master_addr;
  plan.master_port = options.master_port.value_or(kDefaultMasterPort);
  if (options.standalone) {
    std::string ignored;
    const auto ignore = [&ignored](const std::string& option) {
      ignored += (ignored.empty() ? "" : ", ") + option;
    };
    if (options.rdzv_backend) ignore("--rdzv-backend=" + *options.rdzv_backend);
    if (options.rdzv_endpoint) ignore("--rdzv-endpoint=" + options.rdzv_endpoint->given);
    if (options.run_id) ignore("--rdzv-id=" + *options.run_id);
    if (!ignored.empty() && warnings != nullptr) {
      warnings->push_back("--standalone ignores " + ignored +
                          ": it picks a random job id and a free port, as torchrun does");
    }
    plan.run_id = random_hex(16);
    if (!options.master_port) plan.master_port = free_port();
  } else if (options.rdzv_endpoint) {
    plan.master_addr = options.rdzv_endpoint->host;
    const int port = options.rdzv_endpoint->port.value_or(kDefaultRendezvousPort);
    plan.master_port = port == 0 ? free_port() : port;
  }
}

// A --local-ranks-filter rank the job does not have hides nothing and shows nothing: most likely
// a mistake, which silently hides every rank's output when no named rank exists.
void check_ranks_filter(const Options& options, int world_size,
                        std::vector<std::string>* warnings) {
  if (!options.local_ranks_filter || warnings == nullptr) return;
  std::string missing;
  bool any_shown = false;
  for (int rank : *options.local_ranks_filter) {
    if (rank < world_size) {
      any_shown = true;
    } else {
      missing += (missing.empty() ? "" : ",") + std::to_string(rank);
    }
  }
  if (missing.empty()) return;
  warnings->push_back("--local-ranks-filter names local rank(s) " + missing + ", but the " +
                      std::to_string(world_size) + " ranks are 0-" +
                      std::to_string(world_size - 1) +
                      (any_shown ? "" : ": no rank's output is shown on the console"));
}

}  // namespace

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

LaunchPlan make_launch_plan(const Options& options, std::vector<std::string>* warnings) {
  LaunchPlan plan;
  plan.program = options.command.front();
  auto resolved = resolve_program(plan.program);
  if (!resolved) throw LaunchError(unusable_program_reason(plan.program), 127);
  plan.program_path = *resolved;
  plan.argv = options.command;
  for (char** entry = environ; *entry != nullptr; ++entry)
    plan.base_env.emplace_back(*entry);

  switch (options.nproc_per_node) {
    case Options::kAutoRanks:
      plan.world_size = usable_cpu_count();
      if (plan.world_size > transport::kMaxRanks && warnings != nullptr) {
        warnings->push_back("--nproc-per-node auto starts " + std::to_string(transport::kMaxRanks) +
                            " ranks, not one per usable CPU (" + std::to_string(plan.world_size) +
                            "): a shmccl group has at most " +
                            std::to_string(transport::kMaxRanks) + " ranks");
      }
      plan.world_size = std::min(plan.world_size, transport::kMaxRanks);
      break;
    case Options::kNpuRanks:
      plan.world_size = static_cast<int>(visible_devices("--nproc-per-node npu").size());
      break;
    default:
      plan.world_size = options.nproc_per_node;
  }
  if (plan.world_size > transport::kMaxRanks && warnings != nullptr) {
    // Not refused: the program may not use shmccl at all.
    warnings->push_back(std::to_string(plan.world_size) + " ranks: a shmccl group has at most " +
                        std::to_string(transport::kMaxRanks) +
                        " ranks, so init_process_group will fail on every rank of this job");
  }
  default_omp_threads(plan, warnings);
  check_ranks_filter(options, plan.world_size, warnings);
  plan_rendezvous(options, plan, warnings);
  plan.max_restarts = options.max_restarts;
  plan.timeout = options.timeout;
  plan.grace_period_s = options.grace_period_s;
  if (const char* shutdown = std::getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
      shutdown != nullptr && !options.grace_period_given) {
    // torchrun's default for --shutdown-timeout.
    double seconds = 0;
    if (!config::parse_seconds(shutdown, &seconds)) {
      throw LaunchError("TORCH_ELASTIC_SHUTDOWN_TIMEOUT='" + std::string(shutdown) +
                            "' is not a duration (seconds >= 0, e.g. 30, 1.5, 500ms)",
                        2);
    }
    plan.grace_period_s = seconds;
  }
  plan.role = options.role;
  plan.stop_signals = options.signals_to_handle;
  plan.monitor_interval_s = options.monitor_interval_s;
  plan.prefix = options.prefix;
  plan.verbose = options.verbose;
  plan.reap_orphans = options.reap_orphans;
  if (const char* trace = std::getenv("SHMCCL_TRACE_FILE"); trace != nullptr) {
    plan.trace_file = trace;
    plan.trace_wait_s = config::get_seconds("SHMCCL_TRACE_WAIT");
  }

  std::string warning;
  // Reading the topology costs sysfs reads: only when a binding was asked for.
  const std::vector<Binding> bindings =
      options.numa == NumaMode::kNone
          ? std::vector<Binding>(static_cast<size_t>(plan.world_size))
          : plan_bindings(options.numa,
                          CpuTopology::detect(options.numa == NumaMode::kSocket ||
                                              options.numa == NumaMode::kCoreComplex),
                          plan.world_size, &warning);
  if (!warning.empty() && warnings != nullptr) warnings->push_back(warning);

  std::vector<std::string> devices;
  if (options.virtual_local_rank) devices = virtual_devices(plan.world_size);

  unsigned logged = kNoStream;      // streams of any rank written to a log file
  unsigned duplicated = kNoStream;  // streams of any rank the filters see
  for (int rank = 0; rank < plan.world_size; ++rank) {
    RankPlan rank_plan;
    rank_plan.rank = rank;
    rank_plan.routing = route_output(options, rank);
    rank_plan.binding = bindings[static_cast<size_t>(rank)];
    if (!devices.empty()) rank_plan.visible_device = devices[static_cast<size_t>(rank)];
    // torchrun duplicates the lines of teed streams: those written to the log and shown.
    rank_plan.duplicated = rank_plan.routing.file & rank_plan.routing.console &
                           ((options.duplicate_stdout_filters.empty() ? 0u : kStdout) |
                            (options.duplicate_stderr_filters.empty() ? 0u : kStderr));
    logged |= rank_plan.routing.file;
    duplicated |= rank_plan.duplicated;
    plan.ranks.push_back(std::move(rank_plan));
  }
  // torchrun's behaviour: --redirects/--tee without --log-dir log to a temporary directory.
  if (options.log_dir || logged != kNoStream) {
    plan.logs.run_dir = make_run_directory(options.log_dir, plan.run_id);
  }
  const auto plan_duplicate = [&](const std::vector<std::string>& filters, StreamMask stream,
                                  const char* name, std::vector<std::string>& out) {
    if (filters.empty()) return;
    const std::string flag =
        stream == kStdout ? "--duplicate-stdout-filters" : "--duplicate-stderr-filters";
    if (!(duplicated & stream)) {
      if (warnings != nullptr) {
        warnings->push_back(flag + " copies nothing: no rank's " + name +
                            " is teed (--tee, or --log-dir alone)");
      }
      return;
    }
    out = filters;
  };
  plan_duplicate(options.duplicate_stdout_filters, kStdout, "stdout",
                 plan.duplicate_stdout_filters);
  plan_duplicate(options.duplicate_stderr_filters, kStderr, "stderr",
                 plan.duplicate_stderr_filters);
  return plan;
}

std::vector<std::string> LaunchPlan::rank_env(int rank, int restart_count,
                                              const std::string& job_namespace, int lock_fd) const {
  std::vector<std::string> env;
  env.reserve(base_env.size() + 24);
  const std::set<std::string>& owned = owned_variables();
  const size_t index = static_cast<size_t>(rank);
  const std::optional<std::string> device =
      index < ranks.size() ? ranks[index].visible_device : std::nullopt;
  for (const std::string& entry : base_env) {
    const std::string name = entry.substr(0, entry.find('='));
    if (owned.count(name) == 0 && !(timeout && name == "SHMCCL_TIMEOUT") &&
        !(device && name == device::kVisibleDevicesVariable)) {
      env.push_back(entry);
    }
  }
  auto set = [&env](const char* name, const std::string& value) {
    env.push_back(std::string(name) + "=" + value);
  };
  const std::string world = std::to_string(world_size);
  set("RANK", std::to_string(rank));
  // One node: local rank == rank, except that a rank with a virtual local rank is always 0.
  set("LOCAL_RANK", device ? "0" : std::to_string(rank));
  set("WORLD_SIZE", world);
  set("LOCAL_WORLD_SIZE", world);
  set("GROUP_RANK", "0");
  set("GROUP_WORLD_SIZE", "1");
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", world);
  set("ROLE_NAME", role);
  set("MASTER_ADDR", master_addr);
  set("MASTER_PORT", std::to_string(master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(max_restarts));
  set("TORCHELASTIC_RUN_ID", run_id);
  set("SHMCCL_JOB_ID", run_id);
  set("SHMCCL_NAMESPACE", job_namespace);
  set("SHMCCL_LAUNCHER_PID", std::to_string(getpid()));
  set("SHMCCL_LOCK_FD", std::to_string(lock_fd));
  if (timeout) set("SHMCCL_TIMEOUT", *timeout);
  if (device) set(device::kVisibleDevicesVariable, *device);
  set("TORCHELASTIC_ERROR_FILE", error_file(rank, restart_count, job_namespace));
  return env;
}

std::string LaunchPlan::error_file(int rank, int restart_count,
                                   const std::string& job_namespace) const {
  if (!logs.empty()) return logs.error_file(restart_count, rank);
  return std::string(kShmDir) + "/" + kShmPrefix + job_namespace + ".rank" + std::to_string(rank) +
         ".error.json";
}

std::vector<std::string> LaunchPlan::log_files(int rank, int restart_count) const {
  std::vector<std::string> files;
  const size_t index = static_cast<size_t>(rank);
  if (logs.empty() || index >= ranks.size()) return files;
  for (StreamMask stream : {kStdout, kStderr}) {
    if (ranks[index].routing.file & stream) {
      files.push_back(logs.stream_file(restart_count, rank, stream));
    }
  }
  return files;
}

}  // namespace shmccl::launcher
