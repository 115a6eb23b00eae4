// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/flight_recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>

#include "collectives/trace_dumper.h"
#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"
#include "shmccl/dtype.hpp"

namespace shmccl::collectives {

namespace trace_clock {

bool g_use_tsc = false;

uint64_t steady_ns() noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

namespace {

// The TSC is a usable clock when it ticks at a constant rate in every power state.
bool invariant_tsc() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    return line.find(" constant_tsc") != std::string::npos &&
           line.find(" nonstop_tsc") != std::string::npos;
  }
  return false;
}

}  // namespace
}  // namespace trace_clock

namespace {

using transport::OpKind;

// A dump's log output is cut to the most recent entries (SHMCCL_DEBUG=INFO logs them all).
constexpr size_t kLoggedEntries = 32;
// Rings of destroyed groups kept for dumps.
constexpr size_t kRetiredRings = 4;

const char* state_name(TraceState state) {
  switch (state) {
    case TraceState::kScheduled:
      return "scheduled";
    case TraceState::kStarted:
      return "started";
    case TraceState::kCompleted:
      return "completed";
    case TraceState::kFailed:
      return "failed";
    case TraceState::kNone:
      break;
  }
  return "none";
}

bool has_splits(OpKind kind) {
  return kind == OpKind::kAllGather || kind == OpKind::kAllGatherList ||
         kind == OpKind::kReduceScatter;
}

bool reduces(OpKind kind) {
  return kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce;
}

// Converts trace_clock readings to wall-clock nanoseconds, calibrated between the recorder's
// creation and now.
struct ClockMapping {
  uint64_t origin_ticks = 0;
  uint64_t origin_steady = 0;
  double ns_per_tick = 1.0;
  int64_t wall_minus_steady = 0;  // system_clock ns - steady_clock ns, now

  uint64_t wall_ns(uint64_t ticks) const {
    const double since =
        (static_cast<double>(ticks) - static_cast<double>(origin_ticks)) * ns_per_tick;
    return static_cast<uint64_t>(static_cast<double>(origin_steady) + since +
                                 static_cast<double>(wall_minus_steady));
  }
  double elapsed_us(uint64_t from, uint64_t to) const {
    return (static_cast<double>(to) - static_cast<double>(from)) * ns_per_tick / 1e3;
  }
};

uint64_t g_origin_ticks = 0;
uint64_t g_origin_steady = 0;

ClockMapping clock_mapping() {
  ClockMapping mapping;
  mapping.origin_ticks = g_origin_ticks;
  mapping.origin_steady = g_origin_steady;
  if (trace_clock::g_use_tsc) {
    // Calibrate over at least 5 ms (a dump right after start-up waits that long, once).
    uint64_t steady = trace_clock::steady_ns();
    while (steady - g_origin_steady < 5'000'000)
      steady = trace_clock::steady_ns();
    const uint64_t ticks = __rdtsc();
    mapping.ns_per_tick =
        static_cast<double>(steady - g_origin_steady) / static_cast<double>(ticks - g_origin_ticks);
  }
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  mapping.wall_minus_steady = wall - static_cast<int64_t>(trace_clock::steady_ns());
  return mapping;
}

// "2026-11-22T12:00:00.123456" (local time).
std::string format_wall(uint64_t wall_ns) {
  const std::time_t seconds = static_cast<std::time_t>(wall_ns / 1'000'000'000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[48];
  const size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &local);
  std::snprintf(text + n, sizeof(text) - n, ".%06llu",
                static_cast<unsigned long long>(wall_ns % 1'000'000'000 / 1000));
  return text;
}

std::string format_us(double us) {
  char text[32];
  if (us < 1000) {
    std::snprintf(text, sizeof(text), "%.1fus", us);
  } else if (us < 1e6) {
    std::snprintf(text, sizeof(text), "%.3fms", us / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3fs", us / 1e6);
  }
  return text;
}

struct Line {
  uint64_t scheduled_at;
  TraceState state;
  std::string text;
};

std::string format_record(const TraceRing& ring, const TraceRecord& r, const ClockMapping& clock,
                          uint64_t now) {
  const auto dtype = static_cast<ScalarType>(r.dtype);
  std::string out = detail::concat("group=", ring.group(), " rank=", ring.rank(), "/", ring.size(),
                                   " seq=", r.sequence, " op=", r.name,
                                   " state=", state_name(r.state), r.async_op ? " async" : "");
  if (r.kind != OpKind::kBarrier) {
    out += detail::concat(" dtype=", is_valid(dtype) ? dtype_name(dtype) : "invalid");
    if (reduces(r.kind))
      out += detail::concat(" reduce=", reduce_op_name(static_cast<ReduceOp>(r.reduce_op)));
    if (r.kind == OpKind::kBroadcast) out += detail::concat(" src=", r.root);
    out += detail::concat(" in=", r.input_numel, " out=", r.output_numel);
  }
  if (has_splits(r.kind) && !r.splits.empty()) {
    out += " splits=[";
    for (size_t i = 0; i < r.splits.size(); ++i)
      out += (i ? "," : "") + std::to_string(r.splits[i]);
    out += detail::concat("] row=", r.row_elements);
  }
  out += " scheduled=" + format_wall(clock.wall_ns(r.scheduled_at));
  if (r.started_at != 0) {
    if (r.async_op) out += " start=+" + format_us(clock.elapsed_us(r.scheduled_at, r.started_at));
    if (r.finished_at != 0) {
      out += " time=" + format_us(clock.elapsed_us(r.started_at, r.finished_at));
    } else {
      out += " running=" + format_us(clock.elapsed_us(r.started_at, now));
    }
  } else {
    out += " waiting=" + format_us(clock.elapsed_us(r.scheduled_at, now));
  }
  return out;
}

bool write_all(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

// Replaces `path` atomically, so a reader sees the previous dump or the new one, never a partial
// file. The new text is written into an unnamed file (O_TMPFILE), which gets a name only for the
// instant between linkat and rename: a process that exits in the middle of a dump leaves nothing.
bool write_file(const std::string& path, const std::string& text) {
  std::string directory = path.substr(0, path.find_last_of('/') + 1);
  if (directory.empty()) directory = ".";
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  const bool unnamed = fd >= 0;
  if (!unnamed) fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_all(fd, text);
  if (ok && unnamed) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    ::unlink(temporary.c_str());
    ok = ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temporary.c_str(), AT_SYMLINK_FOLLOW) == 0;
  }
  ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(temporary.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(temporary.c_str());
  return ok;
}

}  // namespace

TraceRing::TraceRing(std::string group, int rank, int size, uint32_t capacity)
    : group_(std::move(group)), rank_(rank), size_(size), capacity_(capacity) {
  SHMCCL_CHECK(capacity_ > 0, "a trace ring needs a capacity");
  // Anonymous memory is zero pages until written: a large buffer costs only what is used.
  void* memory = ::mmap(nullptr, sizeof(TraceEntry) * capacity_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    detail::throw_system_error(
        detail::concat("mmap of the flight recorder (", capacity_, " entries)"), errno);
  }
  entries_ = static_cast<TraceEntry*>(memory);
}

TraceRing::~TraceRing() {
  ::munmap(entries_, sizeof(TraceEntry) * capacity_);
}

std::vector<TraceRecord> TraceRing::snapshot() const {
  std::vector<TraceRecord> records;
  for (uint32_t i = 0; i < capacity_; ++i) {
    TraceEntry& e = entries_[i];
    auto load = [](auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      return std::atomic_ref<T>(field).load(std::memory_order_relaxed);
    };
    const uint64_t before = std::atomic_ref<uint64_t>(e.sequence).load(std::memory_order_acquire);
    if (before == 0) continue;
    TraceRecord r;
    r.sequence = before;
    r.name = load(e.name);
    const uint64_t packed = load(e.packed);
    r.kind = static_cast<OpKind>(packed & 0xff);
    r.dtype = static_cast<uint8_t>(packed >> 8);
    r.reduce_op = static_cast<uint8_t>(packed >> 16);
    r.async_op = ((packed >> 24) & 1) != 0;
    r.num_splits = std::min(static_cast<int>(packed >> 32), transport::kMaxRanks);
    r.root = load(e.root);
    r.input_numel = load(e.input_numel);
    r.output_numel = load(e.output_numel);
    r.row_elements = load(e.row_elements);
    r.state = static_cast<TraceState>(load(e.state));
    r.scheduled_at = load(e.scheduled_at);
    r.started_at = load(e.started_at);
    r.finished_at = load(e.finished_at);
    r.splits.resize(static_cast<size_t>(r.num_splits));
    for (int s = 0; s < r.num_splits; ++s)
      r.splits[static_cast<size_t>(s)] = load(e.splits[s]);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (std::atomic_ref<uint64_t>(e.sequence).load(std::memory_order_relaxed) != before) continue;
    if (r.name == nullptr) r.name = "?";
    records.push_back(std::move(r));
  }
  return records;
}

FlightRecorder::FlightRecorder()
    : capacity_(static_cast<uint32_t>(
          std::clamp<int64_t>(config::get_int("SHMCCL_TRACE_BUFFER_SIZE"), 0, 1 << 20))) {
  trace_clock::g_use_tsc = trace_clock::invariant_tsc();
  g_origin_steady = trace_clock::steady_ns();
  g_origin_ticks = trace_clock::now();
  trace_file_prefix_ = config::get_string("SHMCCL_TRACE_FILE");
}

FlightRecorder& FlightRecorder::instance() {
  static auto* recorder = new FlightRecorder();  // never destroyed: dumps may run during exit
  return *recorder;
}

std::shared_ptr<TraceRing> FlightRecorder::new_ring(const std::string& group, int rank, int size) {
  if (capacity_ == 0) return nullptr;
  auto ring = std::make_shared<TraceRing>(group, rank, size, capacity_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rings_.push_back(ring);
  }
  TraceDumper::ensure_started();
  return ring;
}

void FlightRecorder::retire(const std::shared_ptr<TraceRing>& ring) {
  if (!ring) return;
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase(rings_, ring);
  retired_.push_back(ring);
  if (retired_.size() > kRetiredRings) retired_.erase(retired_.begin());
}

std::string FlightRecorder::trace_file_path() const {
  if (trace_file_prefix_.empty()) return "";
  const int rank = log::rank();
  return trace_file_prefix_ + "." +
         (rank >= 0 ? std::to_string(rank) : "pid" + std::to_string(getpid()));
}

std::vector<std::string> FlightRecorder::format_lines(const std::string& reason,
                                                      std::vector<bool>* completed) const {
  std::vector<std::shared_ptr<TraceRing>> rings;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rings = retired_;
    rings.insert(rings.end(), rings_.begin(), rings_.end());
  }
  const ClockMapping clock = clock_mapping();
  const uint64_t now = trace_clock::now();
  std::vector<Line> lines;
  for (const auto& ring : rings) {
    for (const TraceRecord& record : ring->snapshot()) {
      lines.push_back(
          {record.scheduled_at, record.state, format_record(*ring, record, clock, now)});
    }
  }
  std::sort(lines.begin(), lines.end(),
            [](const Line& a, const Line& b) { return a.scheduled_at < b.scheduled_at; });
  if (lines.size() > capacity_) lines.erase(lines.begin(), lines.end() - capacity_);
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  std::vector<std::string> out;
  out.push_back(detail::concat(
      "shmccl flight recorder: rank ", log::rank(), ", pid ", getpid(), ", host ", host, ", ",
      format_wall(clock.wall_ns(now)), ": ", reason, "; ", lines.size(),
      " collectives, oldest first (SHMCCL_TRACE_BUFFER_SIZE=", capacity_, " per group)"));
  if (completed != nullptr) completed->assign(1, false);
  for (Line& line : lines) {
    out.push_back(std::move(line.text));
    if (completed != nullptr) completed->push_back(line.state == TraceState::kCompleted);
  }
  return out;
}

std::string FlightRecorder::format(const std::string& reason) const {
  std::string text;
  for (const std::string& line : format_lines(reason, nullptr))
    text += line + "\n";
  return text;
}

void FlightRecorder::dump(const std::string& reason, DumpTrigger trigger) {
  if (capacity_ == 0) return;
  try {
    std::lock_guard<std::mutex> lock(dump_mutex_);
    std::vector<bool> completed;
    const std::vector<std::string> lines = format_lines(reason, &completed);
    const std::string path = trace_file_path();
    bool written = false;
    if (!path.empty()) {
      std::string text;
      for (const std::string& line : lines)
        text += line + "\n";
      written = write_file(path, text);
      if (!written) {
        SHMCCL_WARN(kColl, "could not write the flight recorder to ", path, ": ",
                    std::strerror(errno));
      }
    }
    if (!log::enabled(log::Level::kWarn, log::kColl)) return;
    // The log gets the most recent entries (all of them at INFO); after the first failure dump,
    // only what is not completed, so one incident seen by several groups is not logged twice.
    const bool everything = log::enabled(log::Level::kInfo, log::kColl);
    const bool brief = trigger == DumpTrigger::kFailure && logged_failure_ && !everything;
    if (trigger == DumpTrigger::kFailure) logged_failure_ = true;
    const size_t first = everything || brief || lines.size() <= kLoggedEntries + 1
                             ? 1
                             : lines.size() - kLoggedEntries;
    std::string header = lines[0];
    if (written) header += "; all of them in " + path;
    if (first > 1 && !brief) header += detail::concat("; the last ", kLoggedEntries, " follow");
    if (brief) header += "; the collectives not completed follow";
    SHMCCL_WARN(kColl, header);
    for (size_t i = first; i < lines.size(); ++i) {
      if (brief && completed[i]) continue;
      SHMCCL_WARN(kColl, "  ", lines[i]);
    }
  } catch (const std::exception& error) {
    SHMCCL_WARN(kColl, "flight recorder dump failed: ", error.what());
  }
}

void FlightRecorder::request_dump(const std::string& reason) {
  if (capacity_ == 0) return;
  TraceDumper::request(reason);
}

}  // namespace shmccl::collectives
