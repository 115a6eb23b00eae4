// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/flight_recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <tuple>

#include "collectives/trace_dumper.h"
#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"
#include "shmccl/dtype.hpp"

namespace shmccl::collectives {

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

// Converts CLOCK_MONOTONIC readings to wall-clock time.
struct ClockMapping {
  int64_t wall_minus_monotonic = 0;  // system_clock ns - steady_clock ns, now

  uint64_t wall_ns(uint64_t monotonic) const {
    return static_cast<uint64_t>(static_cast<int64_t>(monotonic) + wall_minus_monotonic);
  }
  static double elapsed_us(uint64_t from, uint64_t to) {
    return (static_cast<double>(to) - static_cast<double>(from)) / 1e3;
  }
};

ClockMapping clock_mapping() {
  ClockMapping mapping;
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  mapping.wall_minus_monotonic = wall - static_cast<int64_t>(trace_clock::precise());
  return mapping;
}

// "2026-11-22T12:00:00.123456" (local time); `digits` 6 (us) or 3 (ms, for coarse times).
std::string format_wall(uint64_t wall_ns, int digits = 6) {
  const std::time_t seconds = static_cast<std::time_t>(wall_ns / 1'000'000'000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[48];
  const size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &local);
  if (digits == 3) {
    std::snprintf(text + n, sizeof(text) - n, ".%03llu",
                  static_cast<unsigned long long>(wall_ns % 1'000'000'000 / 1'000'000));
  } else {
    std::snprintf(text + n, sizeof(text) - n, ".%06llu",
                  static_cast<unsigned long long>(wall_ns % 1'000'000'000 / 1000));
  }
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
  uint64_t order;  // scheduled time, made monotonic within a group (coarse times may be older)
  size_t ring;
  uint64_t sequence;
  TraceState state;
  std::string text;
};

// `after` / `before`: the nearest times recorded in the same group before / after this
// collective (0: none), bounds for a collective without a time of its own.
std::string format_record(const TraceRing& ring, const TraceRecord& r, const ClockMapping& clock,
                          uint64_t now, uint64_t after, uint64_t before) {
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
  if (has_splits(r.kind) && r.num_splits > 0) {
    if (r.splits.empty()) {
      out += " splits=(overwritten)";
    } else {
      out += " splits=[";
      for (size_t i = 0; i < r.splits.size(); ++i)
        out += (i ? "," : "") + std::to_string(r.splits[i]);
      out += detail::concat("] row=", r.row_elements);
    }
  }
  // Times: precise ones to the microsecond, coarse ones (sampled small synchronous calls) to the
  // millisecond, and unsampled ones as the interval between their neighbours' times.
  if (r.scheduled_at != 0) {
    out += " scheduled=" + format_wall(clock.wall_ns(r.scheduled_at), r.scheduled_precise ? 6 : 3);
  } else if (after != 0 && before != 0) {
    out += " scheduled=" + format_wall(clock.wall_ns(after), 3) + ".." +
           format_wall(clock.wall_ns(before), 3);
  } else if (after != 0) {
    out += " scheduled=after:" + format_wall(clock.wall_ns(after), 3);
  } else if (before != 0) {
    out += " scheduled=before:" + format_wall(clock.wall_ns(before), 3);
  }
  const uint64_t scheduled = r.scheduled_at != 0 ? r.scheduled_at : after;
  const uint64_t since = r.started_at != 0 ? r.started_at : scheduled;
  const bool exact = r.started_at != 0 || r.scheduled_precise;
  if (r.async_op && r.started_at != 0) {
    out += " start=+" + format_us(clock.elapsed_us(r.scheduled_at, r.started_at));
  }
  switch (r.state) {
    case TraceState::kScheduled:
      out += " waiting=" + format_us(clock.elapsed_us(r.scheduled_at, now));
      break;
    case TraceState::kStarted:
      if (since != 0) {
        out += std::string(" running") + (exact ? "=" : "<=") +
               format_us(clock.elapsed_us(since, now));
      }
      break;
    case TraceState::kCompleted:
    case TraceState::kFailed:
      if (r.finished_at != 0 && since != 0) {
        out += std::string(" time") + (exact ? "=" : "<=") +
               format_us(clock.elapsed_us(since, r.finished_at));
      }
      break;
    case TraceState::kNone:
      break;
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
  SHMCCL_CHECK(capacity_ > 0 && (capacity_ & (capacity_ - 1)) == 0,
               "a trace ring's capacity must be a power of two, not ", capacity_);
  // Anonymous memory is zero pages until written: a large buffer costs only what is used.
  const size_t bytes = ring_bytes(capacity_);
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    detail::throw_system_error(
        detail::concat("mmap of the flight recorder (", capacity_, " entries)"), errno);
  }
  entries_ = static_cast<TraceEntry*>(memory);
  splits_ = reinterpret_cast<TraceSplits*>(entries_ + capacity_);
  runs_ = reinterpret_cast<TraceRun*>(splits_ + 2 * size_t{capacity_});
}

TraceRing::~TraceRing() {
  ::munmap(entries_, ring_bytes(capacity_));
}

void TraceRing::start_run(uint64_t head) noexcept {
  end_run(head);
  run_head_.store(0, std::memory_order_relaxed);
  detail::fence(std::memory_order_release);  // a dump sees the 0 before the new sample
  run_sampled_.store(0, detail::kSeqlockStore);
  run_head_.store(head, std::memory_order_release);
}

void TraceRing::sample_run(uint64_t sequence) noexcept {
  run_sampled_.store(0, std::memory_order_relaxed);
  run_sampled_at_.store(trace_clock::coarse(), detail::kSeqlockStore);
  run_sampled_.store(sequence, std::memory_order_release);
}

void TraceRing::end_run(uint64_t next_sequence) noexcept {
  const uint64_t head = run_head_.load(std::memory_order_relaxed);
  if (head == 0) return;
  // The run's collectives before `next_sequence` have completed (a group's complete in order).
  const uint64_t last =
      std::min(next_sequence - 1, completed_through_.load(std::memory_order_relaxed));
  if (last > head) {
    TraceRun& run = run_record(head);
    const uint64_t sampled = run_sampled_.load(std::memory_order_relaxed);
    store(run.head, uint64_t{0});
    detail::fence(std::memory_order_release);
    store(run.last, last);
    store(run.sampled, sampled > head && sampled <= last ? sampled : uint64_t{0});
    store(run.sampled_at, run_sampled_at_.load(std::memory_order_relaxed));
    std::atomic_ref<uint64_t>(run.head).store(head, std::memory_order_release);
  }
  run_head_.store(0, std::memory_order_release);
}

void TraceRing::give_member_an_entry(uint64_t sequence) noexcept {
  const uint64_t head = run_head_.load(std::memory_order_relaxed);
  const TraceEntry& from = entry(head);
  if (load(from.sequence) != head) return;  // the head's entry was reused: nothing to copy
  TraceEntry& to = entry(sequence);
  // The split sizes stay where the head found them, further back now. (The head may be an
  // asynchronous call: its members are synchronous.)
  uint64_t packed = load(from.packed);
  const uint64_t splits_delta = (packed >> 48) + (sequence - head);
  packed &= ~(uint64_t{0xffff} << 48 | uint64_t{7} << kStateShift | kStartedValid | kFinishedValid |
              kAsyncBit);
  packed |= static_cast<uint64_t>(TraceState::kStarted) << kStateShift;
  packed |= std::min<uint64_t>(splits_delta, 0xffff) << 48;
  store(to.sequence, uint64_t{0});
  detail::fence(std::memory_order_release);
  store(to.name, load(from.name));
  store(to.packed, packed);
  store(to.input_numel, load(from.input_numel));
  store(to.output_numel, load(from.output_numel));
  store(to.scheduled_at, uint64_t{0});
  std::atomic_ref<uint64_t>(to.sequence).store(sequence, std::memory_order_release);
}

std::vector<TraceRecord> TraceRing::snapshot() const {
  std::vector<TraceRecord> records;
  // Read first: an entry's own state can only be newer than this.
  const uint64_t completed = completed_through_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < capacity_; ++i) {
    TraceEntry& e = entries_[i];
    auto load = [](auto& field) {
      using T = std::remove_reference_t<decltype(field)>;
      return std::atomic_ref<T>(field).load(detail::kSeqlockLoad);
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
    r.state = static_cast<TraceState>((packed >> 25) & 7);
    const bool started_valid = (packed >> 28) & 1;
    const bool finished_valid = (packed >> 29) & 1;
    r.num_splits = std::min(static_cast<int>((packed >> 32) & 0xff), transport::kMaxRanks);
    r.root = static_cast<int64_t>((packed >> 40) & 0xff);
    const uint64_t splits_from = before - (packed >> 48);
    r.input_numel = load(e.input_numel);
    r.output_numel = load(e.output_numel);
    r.scheduled_at = load(e.scheduled_at);
    r.scheduled_precise = r.async_op;
    r.finished_at = finished_valid ? load(e.finished_at) : 0;
    r.started_at = started_valid ? load(e.started_at) : 0;
    detail::fence(std::memory_order_acquire);
    if (std::atomic_ref<uint64_t>(e.sequence).load(std::memory_order_relaxed) != before) continue;
    // The split sizes, from their own record (a seqlock keyed by its id).
    r.row_elements = 1;
    if (r.num_splits > 0) {
      TraceSplits& splits = splits_record(splits_from);
      const uint64_t id = std::atomic_ref<uint64_t>(splits.id).load(std::memory_order_acquire);
      std::vector<int64_t> values(static_cast<size_t>(r.num_splits));
      const int64_t row = load(splits.row_elements);
      for (int s = 0; s < r.num_splits; ++s)
        values[static_cast<size_t>(s)] = load(splits.splits[s]);
      detail::fence(std::memory_order_acquire);
      if (id == splits_from &&
          std::atomic_ref<uint64_t>(splits.id).load(std::memory_order_relaxed) == id) {
        r.splits = std::move(values);
        r.row_elements = row;
      }
    }
    if (r.name == nullptr) r.name = "?";
    // Collectives of a group complete in order (see finished()).
    if (r.state == TraceState::kStarted && r.sequence <= completed)
      r.state = TraceState::kCompleted;
    records.push_back(std::move(r));
  }
  expand_runs(records, completed);
  return records;
}

void TraceRing::expand_runs(std::vector<TraceRecord>& records, uint64_t completed) const {
  // The open run, read as start_run() writes it: the same head before and after.
  const uint64_t open_head = run_head_.load(std::memory_order_acquire);
  const uint64_t open_last = completed_through_.load(std::memory_order_acquire);
  const uint64_t open_sampled = run_sampled_.load(std::memory_order_acquire);
  const uint64_t open_sampled_at = run_sampled_at_.load(detail::kSeqlockLoad);
  detail::fence(std::memory_order_acquire);
  const bool open_valid = open_head != 0 && run_head_.load(std::memory_order_relaxed) == open_head;
  std::vector<uint64_t> explicit_sequences;
  for (const TraceRecord& r : records)
    explicit_sequences.push_back(r.sequence);
  std::sort(explicit_sequences.begin(), explicit_sequences.end());
  // The dump shows a ring's worth of the newest collectives. Older members could be confused
  // with an asynchronous call whose entry a newer one overwrote (queued further ahead than the
  // ring holds): from here on every collective that had an entry still has it.
  uint64_t newest = open_valid ? open_last : 0;
  if (!explicit_sequences.empty()) newest = std::max(newest, explicit_sequences.back());
  const uint64_t oldest_member = newest >= capacity_ ? newest - capacity_ + 1 : 0;
  const size_t heads = records.size();
  for (size_t i = 0; i < heads; ++i) {
    const uint64_t head = records[i].sequence;
    uint64_t last = 0, sampled = 0, sampled_at = 0;
    const TraceRun& run = run_record(head);
    if (std::atomic_ref<uint64_t>(const_cast<uint64_t&>(run.head))
            .load(std::memory_order_acquire) == head) {
      last = load(run.last);
      sampled = load(run.sampled);
      sampled_at = load(run.sampled_at);
      detail::fence(std::memory_order_acquire);
      if (load(run.head) != head) last = 0;
    }
    uint64_t done = completed;
    if (open_valid && head == open_head && open_last > last) {
      last = open_last;  // completed, all of them
      done = std::max(done, open_last);
      sampled = open_sampled;
      sampled_at = open_sampled_at;
    }
    if (last <= head) continue;
    const uint64_t first = std::max(head + 1, oldest_member);
    for (uint64_t sequence = first; sequence <= last; ++sequence) {
      if (std::binary_search(explicit_sequences.begin(), explicit_sequences.end(), sequence))
        continue;
      TraceRecord copy = records[i];
      copy.sequence = sequence;
      copy.async_op = false;  // (the head may be asynchronous; members never are)
      copy.scheduled_at = sequence == sampled ? sampled_at : 0;
      copy.scheduled_precise = false;
      copy.started_at = 0;
      copy.finished_at = 0;
      copy.state = sequence <= done ? TraceState::kCompleted : TraceState::kStarted;
      records.push_back(std::move(copy));
    }
  }
}

FlightRecorder::FlightRecorder()
    : capacity_([] {
        const int64_t size =
            std::clamp<int64_t>(config::get_int("SHMCCL_TRACE_BUFFER_SIZE"), 0, int64_t{1} << 20);
        return size == 0 ? 0u : std::bit_ceil(static_cast<uint32_t>(size));
      }()) {
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
  const uint64_t now = trace_clock::precise();
  std::vector<Line> lines;
  for (size_t i = 0; i < rings.size(); ++i) {
    std::vector<TraceRecord> records = rings[i]->snapshot();
    std::sort(records.begin(), records.end(),
              [](const TraceRecord& a, const TraceRecord& b) { return a.sequence < b.sequence; });
    // The latest time known at or before each collective, and the earliest at or after it.
    auto first_time = [](const TraceRecord& r) {
      return r.scheduled_at != 0 ? r.scheduled_at
             : r.started_at != 0 ? r.started_at
                                 : r.finished_at;
    };
    auto last_time = [](const TraceRecord& r) {
      return std::max({r.scheduled_at, r.started_at, r.finished_at});
    };
    std::vector<uint64_t> before(records.size(), 0);
    for (size_t k = records.size(), next = 0; k-- > 0;) {
      before[k] = next;
      if (first_time(records[k]) != 0) next = first_time(records[k]);
    }
    uint64_t after = 0;
    for (size_t k = 0; k < records.size(); ++k) {
      const TraceRecord& record = records[k];
      lines.push_back({std::max(after, record.scheduled_at), i, record.sequence, record.state,
                       format_record(*rings[i], record, clock, now, after, before[k])});
      after = std::max(after, last_time(record));
    }
  }
  std::sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    return std::tie(a.order, a.ring, a.sequence) < std::tie(b.order, b.ring, b.sequence);
  });
  if (lines.size() > capacity_) lines.erase(lines.begin(), lines.end() - capacity_);
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  std::vector<std::string> out;
  out.push_back(
      detail::concat("shmccl flight recorder: rank ", log::rank(), ", pid ", getpid(), ", host ",
                     host, ", ", format_wall(clock.wall_ns(now)), ": ", reason, "; ", lines.size(),
                     " collectives, oldest first (the last ", capacity_,
                     " of each group: SHMCCL_TRACE_BUFFER_SIZE, rounded up to a power of two)"));
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
    // Every later dump (a peer exiting after the failure, SIGUSR1...) still names the first one,
    // which is what a user looking at the file wants to know.
    std::string full_reason = reason;
    if (!first_failure_.empty() && first_failure_ != reason) {
      full_reason += "; first failure: " + first_failure_;
    }
    if (trigger == DumpTrigger::kFailure && first_failure_.empty()) first_failure_ = reason;
    std::vector<bool> completed;
    const std::vector<std::string> lines = format_lines(full_reason, &completed);
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
