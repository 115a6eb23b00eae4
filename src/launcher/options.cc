// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <string_view>

#include <csignal>
#include <cstring>

#include "core/config.h"

namespace shmccl::launcher {
namespace {

constexpr int kMaxRanks = 4096;
constexpr const char* kMultiNode =
    "multi-node is not supported yet: shmccl runs the ranks of one host (--nnodes=1)";

[[noreturn]] void invalid(const std::string& flag, std::string_view value, const char* expected) {
  throw UsageError("option " + flag + ": invalid value '" + std::string(value) + "' (expected " +
                   expected + ")");
}

// A whole-string decimal integer in [min, max].
std::optional<int64_t> to_int(std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

int int_value(const std::string& flag, std::string_view value, int64_t min, int64_t max,
              const char* expected) {
  auto parsed = to_int(value, min, max);
  if (!parsed) invalid(flag, value, expected);
  return static_cast<int>(*parsed);
}

double seconds_value(const std::string& flag, const std::string& value, bool allow_zero) {
  double seconds = 0;
  if (!config::parse_seconds(value, &seconds) || (!allow_zero && seconds <= 0)) {
    invalid(flag, value,
            allow_zero ? "seconds >= 0 and at most 1e9, e.g. 30, 1.5, 500ms"
                       : "seconds > 0 and at most 1e9, e.g. 30, 1.5, 500ms");
  }
  return seconds;
}

// Shortest text that reads back as the same double ("30", "0.5").
std::string format_seconds(double seconds) {
  char buffer[64];
  auto [ptr, error] = std::to_chars(buffer, buffer + sizeof(buffer), seconds);
  return error == std::errc() ? std::string(buffer, ptr) : std::to_string(seconds);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

StreamSelection stream_selection(const std::string& flag, std::string_view value) {
  constexpr const char* kExpected = "0-3, or local_rank:0-3 pairs such as 0:1,1:2";
  StreamSelection selection;
  selection.given = true;
  if (value.find(':') == std::string_view::npos) {
    selection.all = static_cast<unsigned>(int_value(flag, value, 0, 3, kExpected));
    return selection;
  }
  for (std::string_view pair : split(value, ',')) {
    const size_t colon = pair.find(':');
    if (colon == std::string_view::npos) invalid(flag, value, kExpected);
    auto rank = to_int(pair.substr(0, colon), 0, kMaxRanks - 1);
    auto mask = to_int(pair.substr(colon + 1), 0, 3);
    if (!rank || !mask) invalid(flag, value, kExpected);
    selection.by_rank.emplace_back(static_cast<int>(*rank), static_cast<unsigned>(*mask));
  }
  return selection;
}

void nnodes_value(const std::string& flag, std::string_view value) {
  // "N" or "MIN:MAX", as torchrun; only one node is supported.
  for (std::string_view part : split(value, ':')) {
    if (!to_int(part, 1, 1 << 20)) invalid(flag, value, "a node count such as 1 or 1:1");
  }
  for (std::string_view part : split(value, ':')) {
    if (part != "1") throw UsageError(kMultiNode);
  }
  if (split(value, ':').size() > 2) invalid(flag, value, "a node count such as 1 or 1:1");
}

// The signals --signals-to-handle may name: those whose default action ends a process, and that
// a process may catch. (Job control, SIGCHLD, SIGPIPE, which shmrun needs as they are, and the
// fault signals of a crash are not among them.)
constexpr int kHandleableSignals[] = {SIGTERM, SIGINT,  SIGHUP,    SIGQUIT, SIGUSR1, SIGUSR2,
                                      SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGXFSZ, SIGPWR};

// "SIGTERM,SIGUSR1" (torchrun's spelling; "TERM" and lower case are taken too).
std::vector<int> signal_list(const std::string& flag, std::string_view value) {
  std::string expected = "a comma-separated list of";
  for (int signal_number : kHandleableSignals)
    expected += std::string(" SIG") + sigabbrev_np(signal_number);
  std::vector<int> signals;
  for (std::string_view part : split(value, ',')) {
    std::string name(part);
    for (char& c : name)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) == 0) name.erase(0, 3);
    const int* found =
        std::find_if(std::begin(kHandleableSignals), std::end(kHandleableSignals),
                     [&](int signal_number) { return name == sigabbrev_np(signal_number); });
    if (found == std::end(kHandleableSignals)) invalid(flag, value, expected.c_str());
    if (std::find(signals.begin(), signals.end(), *found) == signals.end())
      signals.push_back(*found);
  }
  return signals;
}

// torchrun's comma_separated_list: "a,b" is two filters, ",," a literal comma. Empty entries are
// dropped: an empty filter would match every line.
std::vector<std::string> filter_list(std::string_view value) {
  std::vector<std::string> filters(1);
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != ',') {
      filters.back() += value[i];
    } else if (i + 1 < value.size() && value[i + 1] == ',') {
      filters.back() += ',';
      ++i;
    } else {
      filters.emplace_back();
    }
  }
  std::erase_if(filters, [](const std::string& filter) { return filter.empty(); });
  return filters;
}

constexpr NumaMode kNumaModes[] = {NumaMode::kNone,      NumaMode::kNode,        NumaMode::kSocket,
                                   NumaMode::kExclusive, NumaMode::kCoreComplex, NumaMode::kCore};

struct Flag {
  std::vector<std::string_view> names;  // normalized: no leading dashes, '-' not '_'
  bool takes_value;
  std::function<void(Options&, const std::string& flag, const std::string& value)> apply;
};

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {{"nproc-per-node"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         if (v == "auto" || v == "cpu") {
           o.nproc_per_node = Options::kAutoRanks;
         } else if (v == "npu") {
           o.nproc_per_node = Options::kNpuRanks;
         } else {
           o.nproc_per_node =
               int_value(f, v, 1, kMaxRanks, "a positive integer, 'auto', 'cpu' or 'npu'");
         }
       }},
      {{"nnodes"},
       true,
       [](Options&, const std::string& f, const std::string& v) { nnodes_value(f, v); }},
      {{"node-rank"},
       true,
       [](Options&, const std::string& f, const std::string& v) {
         if (int_value(f, v, 0, 1 << 20, "a non-negative integer") != 0) {
           throw UsageError(kMultiNode);
         }
       }},
      {{"master-addr"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         if (v.empty()) invalid(f, v, "a host name or address");
         o.master_addr = v;
       }},
      {{"master-port"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.master_port = int_value(f, v, 0, 65535, "a port number 0-65535");
       }},
      {{"rdzv-id", "run-id"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         if (v.empty()) invalid(f, v, "a non-empty job id");
         o.run_id = v;
       }},
      {{"rdzv-endpoint"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         // host[:port]; torchrun users pass it with the c10d backend on one node. As torchrun
         // parses it (parse_rendezvous_endpoint): an IPv6 address in brackets, "[::1]" or
         // "[::1]:29400", is the address without them.
         const bool bracketed_alone = v.size() >= 2 && v.front() == '[' && v.back() == ']';
         const size_t colon = bracketed_alone ? std::string::npos : v.rfind(':');
         std::string host = v.substr(0, colon);
         if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
           host = host.substr(1, host.size() - 2);
         if (host.empty()) invalid(f, v, "host[:port] (an IPv6 address in brackets: [::1]:29400)");
         std::optional<int> port;
         if (colon != std::string::npos) {
           port = int_value(f, std::string_view(v).substr(colon + 1), 0, 65535, "host[:port]");
         }
         o.rdzv_endpoint = Options::Endpoint{host, port, v};
       }},
      {{"rdzv-backend"},
       true,
       [](Options& o, const std::string&, const std::string& v) { o.rdzv_backend = v; }},
      {{"rdzv-conf"},
       true,
       [](Options&, const std::string&, const std::string&) {
         // Accepted for torchrun compatibility: one host needs no rendezvous configuration.
       }},
      {{"standalone"}, false, [](Options& o, auto&, auto&) { o.standalone = true; }},
      {{"max-restarts"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.max_restarts = int_value(f, v, 0, 1000000, "a non-negative integer");
       }},
      {{"monitor-interval"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.monitor_interval_s = seconds_value(f, v, false);
       }},
      {{"grace-period", "stop-timeout", "shutdown-timeout"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.grace_period_s = seconds_value(f, v, true);
         o.grace_period_given = true;
       }},
      {{"signals-to-handle"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         // The default four stay: shmrun never ends without stopping its ranks and removing
         // the job's shared memory.
         for (int signal_number : signal_list(f, v)) {
           if (std::find(o.signals_to_handle.begin(), o.signals_to_handle.end(), signal_number) ==
               o.signals_to_handle.end()) {
             o.signals_to_handle.push_back(signal_number);
           }
         }
       }},
      {{"role"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         if (v.empty()) invalid(f, v, "a role name");
         o.role = v;
       }},
      {{"start-method"},
       true,
       [](Options&, const std::string& f, const std::string& v) {
         // torchrun's choice of Python multiprocessing start method. Each rank here is a program
         // of its own, started with fork and exec: every choice starts it the same way.
         if (v != "spawn" && v != "fork" && v != "forkserver") {
           invalid(f, v, "spawn, fork or forkserver");
         }
       }},
      {{"local-addr"},
       true,
       [](Options&, const std::string& f, const std::string& v) {
         // The address torchrun's rendezvous advertises for this node; on one host the ranks
         // meet in shared memory and no address is used.
         if (v.empty()) invalid(f, v, "a host name or address");
       }},
      {{"timeout"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.timeout = format_seconds(seconds_value(f, v, false));
       }},
      {{"redirects", "r"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.redirects = stream_selection(f, v);
       }},
      {{"tee", "t"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         o.tee = stream_selection(f, v);
       }},
      {{"log-dir"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         if (v.empty()) invalid(f, v, "a directory");
         o.log_dir = v;
       }},
      {{"local-ranks-filter"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         std::vector<int> ranks;
         for (std::string_view part : split(v, ',')) {
           ranks.push_back(int_value(f, part, 0, kMaxRanks - 1, "local ranks such as 0,3"));
         }
         o.local_ranks_filter = std::move(ranks);
       }},
      {{"no-prefix"}, false, [](Options& o, auto&, auto&) { o.prefix = false; }},
      {{"duplicate-stdout-filters"},
       true,
       [](Options& o, auto&, const std::string& v) {
         o.duplicate_stdout_filters = filter_list(v);
       }},
      {{"duplicate-stderr-filters"},
       true,
       [](Options& o, auto&, const std::string& v) {
         o.duplicate_stderr_filters = filter_list(v);
       }},
      {{"virtual-local-rank"},
       false,
       [](Options& o, auto&, auto&) { o.virtual_local_rank = true; }},
      {{"reap-orphans"}, false, [](Options& o, auto&, auto&) { o.reap_orphans = true; }},
      {{"numa-binding"},
       true,
       [](Options& o, const std::string& f, const std::string& v) {
         for (NumaMode mode : kNumaModes) {
           if (v == numa_mode_name(mode)) {
             o.numa = mode;
             return;
           }
         }
         invalid(f, v, "none, node, socket, exclusive, core-complex or core");
       }},
      {{"no-python"},
       false,
       [](Options&, auto&, auto&) {
         // Accepted for torchrun compatibility: shmrun always executes the program directly.
       }},
      {{"module", "m"},
       false,
       [](Options&, auto&, auto&) {
         throw UsageError("shmrun runs executables, not Python modules: drop -m/--module");
       }},
      {{"run-path"},
       false,
       [](Options&, auto&, auto&) {
         throw UsageError(
             "shmrun runs executables, not Python scripts in its own interpreter: drop "
             "--run-path");
       }},
      {{"verbose", "v"}, false, [](Options& o, auto&, auto&) { o.verbose = true; }},
      {{"help", "h"}, false, [](Options& o, auto&, auto&) { o.mode = Mode::kHelp; }},
      {{"version"}, false, [](Options& o, auto&, auto&) { o.mode = Mode::kVersion; }},
      {{"dump-config"}, false, [](Options& o, auto&, auto&) { o.mode = Mode::kDumpConfig; }},
      {{"cleanup"}, false, [](Options& o, auto&, auto&) { o.mode = Mode::kCleanup; }},
  };
  return table;
}

const Flag* find_flag(std::string_view name) {
  for (const Flag& flag : flags()) {
    if (std::find(flag.names.begin(), flag.names.end(), name) != flag.names.end()) return &flag;
  }
  return nullptr;
}

}  // namespace

std::vector<int> default_signals_to_handle() {
  return {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
}

unsigned StreamSelection::mask_for(int local_rank) const {
  if (all) return *all;
  for (const auto& [rank, mask] : by_rank) {
    if (rank == local_rank) return mask;
  }
  return kNoStream;
}

Options parse_options(const std::vector<std::string>& args) {
  Options options;
  size_t index = 0;
  while (index < args.size()) {
    const std::string& arg = args[index];
    if (arg == "--") {
      ++index;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program: options end here

    // "--name=value", "--name value", "-v", "-r 3", "-r3"; '_' and '-' alike in names.
    const bool long_form = arg[1] == '-';
    std::string name = long_form ? arg.substr(2) : arg.substr(1, 1);
    std::optional<std::string> inline_value;
    if (long_form) {
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
      }
      std::replace(name.begin(), name.end(), '_', '-');
    } else if (arg.size() > 2) {
      inline_value = arg.substr(arg[2] == '=' ? 3 : 2);
    }
    const Flag* flag = find_flag(name);
    if (flag == nullptr || (long_form && name.size() == 1) || (!long_form && name.size() != 1)) {
      throw UsageError("unrecognized option '" + arg + "'");
    }
    const std::string shown = (long_form ? "--" : "-") + name;
    std::string value;
    if (flag->takes_value) {
      if (inline_value) {
        value = *inline_value;
      } else if (index + 1 < args.size()) {
        value = args[++index];
      } else {
        throw UsageError("option " + shown + " needs a value");
      }
    } else if (inline_value) {
      throw UsageError("option " + shown + " takes no value");
    }
    flag->apply(options, shown, value);
    ++index;
  }
  options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(index), args.end());
  if (options.mode == Mode::kRun && options.command.empty()) {
    throw UsageError("missing the program to run");
  }
  return options;
}

std::vector<std::string> environment_options(const std::function<const char*(const char*)>& get) {
  // torchrun's options with `action=env` (value) and `action=check_env` (a switch: "1" sets it).
  static constexpr const char* kValued[] = {"nproc-per-node",
                                            "nnodes",
                                            "node-rank",
                                            "master-addr",
                                            "master-port",
                                            "rdzv-backend",
                                            "rdzv-endpoint",
                                            "rdzv-id",
                                            "rdzv-conf",
                                            "max-restarts",
                                            "monitor-interval",
                                            "start-method",
                                            "role",
                                            "log-dir",
                                            "redirects",
                                            "tee",
                                            "local-ranks-filter",
                                            "duplicate-stdout-filters",
                                            "duplicate-stderr-filters",
                                            "local-addr",
                                            "signals-to-handle",
                                            "shutdown-timeout"};
  static constexpr const char* kSwitches[] = {"standalone", "no-python", "module", "run-path",
                                              "virtual-local-rank"};
  auto variable_of = [](std::string_view flag) {
    std::string name = "PET_";
    for (char c : flag)
      name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return name;
  };
  std::vector<std::string> args;
  for (const char* flag : kValued) {
    const std::string variable = variable_of(flag);
    const char* value = get(variable.c_str());
    if (value == nullptr) continue;
    std::string arg = std::string("--") + flag + "=" + value;
    try {
      parse_options({arg, "program"});
    } catch (const UsageError& error) {
      throw UsageError(variable + "='" + value + "': " + error.what());
    }
    args.push_back(std::move(arg));
  }
  for (const char* flag : kSwitches) {
    const std::string variable = variable_of(flag);
    const char* value = get(variable.c_str());
    if (value == nullptr || std::string_view(value) == "0" || *value == '\0') continue;
    if (std::string_view(value) != "1") {
      throw UsageError(variable + "='" + value + "': expected 1 (set) or 0 (not set)");
    }
    try {
      parse_options({std::string("--") + flag, "program"});
    } catch (const UsageError& error) {
      throw UsageError(variable + "=1: " + error.what());
    }
    args.push_back(std::string("--") + flag);
  }
  return args;
}

const char* usage_line() {
  return "usage: shmrun [--nproc-per-node N|auto] [options] [--] program [args...]\n"
         "       shmrun --cleanup [namespace...] | --dump-config | --version | --help";
}

std::string help_text() {
  std::string text = usage_line();
  text += R"(

Starts N ranks of a shmccl program on this host, the way torchrun does, and supervises them.
Options use torchrun's spelling: --flag=value or --flag value, '-' or '_' in names; options end
at `--` or at the program.

Ranks:
  --nproc-per-node N|auto|npu
                            ranks to start (auto, cpu: one per usable CPU, at most 64;
                            npu: one per simulated NPU, ASCEND_RT_VISIBLE_DEVICES or
                            SHMCCL_NPU_DEVICE_COUNT) [1]
  --nnodes 1, --node-rank 0 only one node is supported
  --master-addr ADDR        MASTER_ADDR given to the ranks [127.0.0.1]
  --master-port PORT        MASTER_PORT given to the ranks [29500]
  --rdzv-id, --run-id ID    job id (TORCHELASTIC_RUN_ID, SHMCCL_JOB_ID) [none]
  --standalone              random job id and a free master port; --rdzv-id, --rdzv-endpoint
                            and --rdzv-backend are then ignored, as torchrun ignores them
  --rdzv-endpoint HOST[:PORT]
                            master address and port, over --master-addr and --master-port
                            [port 29400, as torchrun's c10d rendezvous; 0: a free port]
  --role NAME               ROLE_NAME given to the ranks [default]
  --timeout SECONDS         collective timeout given to the ranks (SHMCCL_TIMEOUT)

Supervision:
  --max-restarts K          restart the whole group up to K times after a failure [0]
  --signals-to-handle SIG,...
                            more signals that stop the job besides SIGTERM, SIGINT,
                            SIGHUP and SIGQUIT; each is forwarded to the ranks. SIGUSR1
                            unlisted asks the ranks for a flight recorder dump
  --grace-period, --stop-timeout, --shutdown-timeout SECONDS
                            time between SIGTERM and SIGKILL when stopping ranks
                            [$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 5]
  --monitor-interval SECONDS
                            interval of the status line logged with -v [5]

Output:
  --no-prefix               print rank output without the "[rankN]:" prefix
  --log-dir DIR             also write each rank's output to files in a new directory per
                            run, as torchrun: DIR/<run id>_XXXXXX/attempt_<restart>/
                            <local rank>/stdout.log and stderr.log
  -r, --redirects 0-3|LR:0-3,...
                            send stdout (1), stderr (2) or both (3) to the log file only
  -t, --tee 0-3|LR:0-3,...  send those streams to the log file and the console
  --local-ranks-filter 0,3  show only these ranks' output on the console
  --duplicate-stdout-filters TEXT,...
                            also copy teed stdout lines that contain any TEXT (",," is a
                            comma) to filtered_stdout.log in the attempt's log directory,
                            every rank's in one file
  --duplicate-stderr-filters TEXT,...
                            the same for stderr, to filtered_stderr.log

  -v, --verbose             log what shmrun does (ranks, pids, bindings)
  --reap-orphans            become a child subreaper: processes the ranks leave behind
                            (daemons, a crashed rank's workers) come to shmrun, which reaps
                            them; always so when shmrun runs as PID 1 (a container's entry)

Placement:
  --numa-binding none|node|socket|exclusive|core-complex|core
                            bind each rank to a NUMA node, a socket, an exclusive set of
                            cores of its node, the cores sharing one L3 cache, or one
                            core [none]
  --virtual-local-rank      each rank sees only its own NPU, as device 0: LOCAL_RANK=0 and
                            ASCEND_RT_VISIBLE_DEVICES=<its entry of the inherited list, else
                            its local rank>

torchrun options accepted and ignored (nothing for them to do here):
  --no-python               shmrun always runs the program itself
  --rdzv-backend NAME, --rdzv-conf KEY=VALUE,...
                            the ranks of one host need no rendezvous backend
  --start-method spawn|fork|forkserver
                            each rank is a program of its own, started with fork and exec
  --local-addr ADDR         the ranks of one host meet in shared memory, at no address

torchrun options refused (exit 2):
  -m, --module, --run-path  they run Python code; shmrun runs programs
  --event-log-handler, --logs-specs
                            they name Python plug-ins

Other modes:
  --cleanup [NAMESPACE...]  remove shared-memory segments of jobs whose launcher is gone
  --dump-config             print every SHMCCL_* setting with its value, default and help
  --version, -h/--help

Exit status: 0 when every rank succeeds; otherwise the first failing rank's exit code (128+N
when it was killed by signal N); 130 after SIGINT, 143 after SIGTERM; 2 for a bad command line.
)";
  return text;
}

const char* numa_mode_name(NumaMode mode) {
  switch (mode) {
    case NumaMode::kNone:
      return "none";
    case NumaMode::kNode:
      return "node";
    case NumaMode::kExclusive:
      return "exclusive";
    case NumaMode::kCore:
      return "core";
    case NumaMode::kSocket:
      return "socket";
    case NumaMode::kCoreComplex:
      return "core-complex";
  }
  return "?";
}

}  // namespace shmccl::launcher
