// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/config.h"

#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/check.h"
#include "core/logging.h"

namespace shmccl::config {
namespace {

// Every SHMCCL_* variable. Keep sorted by subsystem; the launcher prints it in this order.
constexpr std::array kSettings = {
    Setting{"SHMCCL_DEBUG", Kind::kString, "WARN", "log level: NONE, WARN, INFO or TRACE"},
    Setting{"SHMCCL_DEBUG_SUBSYS", Kind::kString, "ALL",
            "comma-separated subsystems to log: CORE, DEVICE, SHM, COLL, OPS, LAUNCH or ALL; "
            "a leading ^ excludes the listed ones"},
    Setting{"SHMCCL_NPU_DEVICE_COUNT", Kind::kInt, "8", "number of simulated NPU devices"},
    Setting{"SHMCCL_NPU_MEMORY", Kind::kBytes, "16G",
            "capacity of each simulated NPU's memory arena (reserved, committed on demand)"},
    Setting{"SHMCCL_NPU_HUGE_PAGES", Kind::kBool, "1",
            "make each committed segment of NPU memory 2 MiB pages where the kernel can "
            "(MADV_COLLAPSE, Linux 6.1): a rank's first touch of a peer's tensor then faults "
            "once per 2 MiB, not per 4 KiB (0: 4 KiB pages)"},
    Setting{"SHMCCL_HOST_HUGE_PAGES", Kind::kBool, "1",
            "put host tensors of 2 MiB and more in 2 MiB pages where the kernel can "
            "(MADV_HUGEPAGE): their first touch then faults once per 2 MiB, not per 4 KiB "
            "(0: 4 KiB pages)"},
    Setting{"SHMCCL_NPU_CACHING_ALLOCATOR", Kind::kBool, "1",
            "cache freed device blocks for reuse (0: return every block to the arena at once)"},
    Setting{"SHMCCL_KERNEL_ISA", Kind::kString, "auto",
            "vector ISA of the device kernels: auto, avx512, avx2 or generic"},
    Setting{"SHMCCL_TIMEOUT", Kind::kSeconds, "600",
            "default timeout of collectives and rendezvous (torch's default: 10 minutes)"},
    Setting{"SHMCCL_CHUNK_BYTES", Kind::kBytes, "256K",
            "bytes per chunk of a collective's work pool (larger: fewer claims; smaller: better "
            "balance between ranks); a group takes its first rank's value"},
    Setting{"SHMCCL_INLINE_BYTES", Kind::kBytes, "16K",
            "largest per-rank payload sent through the control block's slots instead of the "
            "zero-copy work pool (at most 16K)"},
    Setting{"SHMCCL_PULL_BROADCAST_RANKS", Kind::kInt, "3",
            "broadcasts too large to travel inline have each receiver copy from the root's "
            "tensor, in groups of at least this many ranks (smaller groups split the copies "
            "between all ranks; 0: never); every rank must use the same value"},
    Setting{"SHMCCL_HOST_WINDOW_BYTES", Kind::kBytes, "512K",
            "host tensors of collectives that do not travel inline are staged through 4 slots "
            "of this many bytes per rank and group, in pipelined windows (at least 4K)"},
    Setting{"SHMCCL_STREAMING_BYTES", Kind::kBytes, "32M",
            "collectives writing at least this many bytes (all ranks together) copy with "
            "non-temporal stores, which skip the cache the data would only flush"},
    Setting{"SHMCCL_OPS_CPU_SHARE", Kind::kInt, "0",
            "CPUs a rank's operators count as its own (0: its CPUs divided among the job's ranks "
            "that may run on them)"},
    Setting{"SHMCCL_OPS_THREADS", Kind::kInt, "0",
            "threads one rank's GEMMs use (0: the rank's share of the CPUs it may run on)"},
    Setting{"SHMCCL_OPS_WEIGHT_CACHE_BYTES", Kind::kBytes, "1G",
            "memory for GEMM weights kept reordered into oneDNN's preferred layout across calls "
            "(0: use weights in place, unreordered)"},
    Setting{"SHMCCL_SPIN_TIME", Kind::kSeconds, "1ms",
            "how long a rank spins before it sleeps while waiting for its peers, when every "
            "rank has a core (more ranks than cores: a few checks, then sleep)"},
    Setting{"SHMCCL_YIELD_TIME", Kind::kSeconds, "200us",
            "when ranks outnumber cores: how long a waiting rank yields its core to the others "
            "before it sleeps (it sleeps sooner when its yields run no one for 40 us)"},
    Setting{"SHMCCL_MATE_SPIN_TIME", Kind::kSeconds, "20us",
            "when ranks outnumber cores: how long a waiting rank spins instead of yielding while "
            "every rank on its core waits for the same collective (0: always yield)"},
    Setting{"SHMCCL_CORE_BALANCE", Kind::kBool, "1",
            "when ranks outnumber cores and may run on several: a waiting rank whose core holds "
            "two of the job's ranks more than another core it may use moves itself there (at "
            "most every 20 ms)"},
    Setting{"SHMCCL_WAKE_CHECK_TIME", Kind::kSeconds, "1s",
            "the longest a sleeping wait goes without a wake before it looks again: a safety "
            "net that a wake lost with a dying peer costs at most this (the test suite sets it "
            "long, so a lost wake fails a test instead of costing a second)"},
    Setting{"SHMCCL_HELPED_POLL_TIME", Kind::kSeconds, "1ms",
            "while Work::wait() runs the asynchronous collectives it waits for itself, the "
            "stream's idle thread is not woken for each new one but looks for work no one waits "
            "for this often (0: wake it for each)"},
    Setting{"SHMCCL_TRACE_BUFFER_SIZE", Kind::kInt, "2000",
            "flight recorder: collectives remembered per process group (0: off); written to the "
            "log and SHMCCL_TRACE_FILE on a timeout, a dead peer, a mismatch or SIGUSR1"},
    Setting{"SHMCCL_TRACE_FILE", Kind::kString, "",
            "flight recorder file prefix: rank r writes <prefix>.<r> (empty: log only)"},
    Setting{"SHMCCL_TRACE_WAIT", Kind::kSeconds, "1s",
            "shmrun: after a rank fails, how long it lets the other ranks write their flight "
            "recorder (SHMCCL_TRACE_FILE) before it stops them (each rank's file ends the wait "
            "early)"},
    Setting{"SHMCCL_TRACE_SIGNAL", Kind::kBool, "1",
            "dump the flight recorder on SIGUSR1 (installed only while SIGUSR1 has its default "
            "action, so a program's own handler wins)"},
    Setting{"SHMCCL_FAULT", Kind::kString, "",
            "fault injection (test builds): <point>:<rank>[:<action>][:<sequence>], e.g. "
            "mid_copy:1:kill:3; docs/reliability.md lists the points"},
    Setting{"SHMCCL_JOB_ID", Kind::kString, "", "job id shared by the ranks of one job"},
    Setting{"SHMCCL_NAMESPACE", Kind::kString, "",
            "prefix of the job's shared-memory segment names (set by shmrun)"},
    Setting{"SHMCCL_LOCK_FD", Kind::kString, "",
            "fd of shmrun's lock on the namespace (set by shmrun): shmrun, not the ranks, then "
            "removes the job's leftover segments"},
};

struct ParsedValues {
  std::mutex mutex;
  std::map<std::string, std::string> values;  // name -> text in force
};

ParsedValues& parsed() {
  static ParsedValues instance;
  return instance;
}

const Setting* find_setting(const char* name) {
  for (const Setting& setting : kSettings) {
    if (std::strcmp(setting.name, name) == 0) return &setting;
  }
  return nullptr;
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start])))
    ++start;
  return text.substr(start);
}

bool parse_bool(const std::string& raw, bool* out) {
  const std::string text = trim(raw);  // as sizes and durations are read
  std::string lower;
  for (char c : text)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") {
    *out = true;
    return true;
  }
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") {
    *out = false;
    return true;
  }
  return false;
}

bool parse_int(const std::string& raw, int64_t* out) {
  const std::string text = trim(raw);
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = value;
  return true;
}

bool is_valid_value(const Setting& setting, const std::string& text) {
  switch (setting.kind) {
    case Kind::kBool: {
      bool value;
      return parse_bool(text, &value);
    }
    case Kind::kInt: {
      int64_t value;
      return parse_int(text, &value);
    }
    case Kind::kBytes: {
      uint64_t value;
      return parse_bytes(text, &value);
    }
    case Kind::kSeconds: {
      double value;
      return parse_seconds(text, &value);
    }
    case Kind::kString:
      return true;
  }
  return false;
}

const Setting& require_setting(const char* name) {
  const Setting* setting = find_setting(name);
  SHMCCL_CHECK(setting != nullptr, "unknown configuration variable ", name);
  return *setting;
}

}  // namespace

std::span<const Setting> all_settings() noexcept {
  return kSettings;
}

const char* kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kBytes:
      return "bytes";
    case Kind::kSeconds:
      return "seconds";
    case Kind::kString:
      return "string";
  }
  return "?";
}

bool parse_bytes(const std::string& raw, uint64_t* out) noexcept {
  const std::string text = trim(raw);
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || number < 0) return false;
  std::string suffix(end);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  double scale = 1;
  if (suffix.empty()) {
    scale = 1;
  } else if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        scale = 1024.0;
        break;
      case 'M':
        scale = 1024.0 * 1024;
        break;
      case 'G':
        scale = 1024.0 * 1024 * 1024;
        break;
      case 'T':
        scale = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        return false;
    }
  } else {
    return false;
  }
  // Below 2^64, rounded without llround, whose long long stops at 2^63.
  const double bytes = std::nearbyint(number * scale);
  if (!std::isfinite(bytes) || bytes >= 0x1p64) return false;
  *out = static_cast<uint64_t>(bytes);
  return true;
}

bool parse_seconds(const std::string& raw, double* out) noexcept {
  const std::string text = trim(raw);
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || number < 0 || !std::isfinite(number)) return false;
  const std::string suffix(end);
  double scale = 1;
  if (suffix.empty() || suffix == "s") {
    scale = 1;
  } else if (suffix == "ms") {
    scale = 1e-3;
  } else if (suffix == "us") {
    scale = 1e-6;
  } else if (suffix == "m" || suffix == "min") {
    scale = 60;
  } else if (suffix == "h") {
    scale = 3600;
  } else {
    return false;
  }
  // Beyond this a deadline in nanoseconds (int64) overflows; 31 years is forever enough.
  constexpr double kMaxSeconds = 1e9;
  if (number * scale > kMaxSeconds) return false;
  *out = number * scale;
  return true;
}

std::string get_string(const char* name) {
  const Setting& setting = require_setting(name);
  ParsedValues& state = parsed();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.values.find(name);
  if (found != state.values.end()) return found->second;
  std::string value = setting.default_value;
  if (const char* raw = std::getenv(name); raw != nullptr) {
    if (is_valid_value(setting, raw)) {
      value = raw;
    } else {
      SHMCCL_WARN(kCore, "ignoring ", name, "=", raw, ": not a valid ", kind_name(setting.kind),
                  "; using the default ", setting.default_value);
    }
  }
  state.values.emplace(name, value);
  return value;
}

bool get_bool(const char* name) {
  bool value = false;
  parse_bool(get_string(name), &value);
  return value;
}

int64_t get_int(const char* name) {
  int64_t value = 0;
  parse_int(get_string(name), &value);
  return value;
}

uint64_t get_bytes(const char* name) {
  uint64_t value = 0;
  parse_bytes(get_string(name), &value);
  return value;
}

double get_seconds(const char* name) {
  double value = 0;
  parse_seconds(get_string(name), &value);
  return value;
}

namespace {
std::atomic<uint64_t> g_generation{1};
}  // namespace

void reload() noexcept {
  ParsedValues& state = parsed();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.values.clear();
  g_generation.fetch_add(1, std::memory_order_release);
}

uint64_t generation() noexcept {
  return g_generation.load(std::memory_order_acquire);
}

}  // namespace shmccl::config
