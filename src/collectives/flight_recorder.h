// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The flight recorder: every rank remembers its last SHMCCL_TRACE_BUFFER_SIZE collectives (group,
// sequence number, op, dtype, sizes, split sizes, state, timestamps), like PyTorch's
// TORCH_NCCL_TRACE_BUFFER_SIZE, and writes them out when something goes wrong (a timeout, a dead
// peer, a mismatch, an abort seen by a peer) or on SIGUSR1, so a user can see which rank stopped
// where. docs/reliability.md describes the output.
//
// TraceRing: the ring of one process group, owned jointly by the group (GroupState) and the
// FlightRecorder registry (so a dump can read it while the group is being destroyed). Entry
// `sequence % capacity` holds collective `sequence`. Writers: the threads that call collectives
// (scheduled) and the group's executing thread (started, finished); collectives of one group are
// scheduled with distinct sequence numbers, and a collective's own updates are ordered by the
// stream that runs it, so no two threads ever write one entry at once. Readers (dumps) may run on
// any thread at any time: each entry is a seqlock whose version is its sequence field (0 while
// being rewritten), and every field is accessed through relaxed std::atomic_ref, so a reader
// either sees a consistent entry or skips it. On x86 all of this compiles to plain moves: a new
// call's entry costs one or two cache lines of stores (prefetched by the previous call) and, one
// time in kSampleEvery, a read of the coarse clock; a repeated one costs less (runs, below).
//
// Runs: a training loop repeats the same small call, so a small synchronous collective that
// repeats the call before it (CallCache's compare, which the mismatch check makes anyway) gets no
// entry and costs the recorder a sampling test and one store as it completes
// (run_member_completed()): it belongs to the run of the last
// collective whose call differed from the one before (the run's head, start_run()). A run is
// "every collective after its head, up to the next head": those up to completed_through_ have
// completed, one more may be in flight (it is not shown until it sleeps, fails or completes).
// Collectives inside a run that have an entry of their own (asynchronous and work-pool calls, one
// that slept or failed) are shown from it. A dump expands a run into one line per collective,
// those among the ring's worth of newest collectives (see expand_runs). The
// open run lives in TraceRing's own fields; a closed one in `runs_`, at its head's index. This
// relies on every sequence number of a group running (the executor takes a synchronous call's
// number only as it starts it).
//
// FlightRecorder: the process-wide registry of rings and the dump logic (flight_recorder.cc); the
// dump thread and the SIGUSR1 handler live in trace_dumper.cc. Thread-safe.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/op_plan.h"
#include "core/memory_order.h"

namespace shmccl::collectives {

enum class TraceState : uint8_t { kNone = 0, kScheduled, kStarted, kCompleted, kFailed };

// Timestamps of the recorder, CLOCK_MONOTONIC nanoseconds (steady_clock's). A small synchronous
// collective is stamped with the coarse clock (the kernel's last tick, at most 4 ms old here: a
// vDSO read of ~5 ns, where a precise read costs 20-40 ns in this VM and the TSC ~10 ns, both
// measurable against a 0.3 us collective); everything else (asynchronous calls, work-pool
// collectives, failures) gets precise times.
namespace trace_clock {
inline uint64_t coarse() noexcept {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}
inline uint64_t precise() noexcept {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}
}  // namespace trace_clock

// One recorded collective: one cache line (2000 of them fit in L2). Plain data, accessed only
// through std::atomic_ref (see above). `packed` carries the small fields and the state:
//   bits 0-7 kind, 8-15 dtype, 16-23 reduce op, 24 async, 25-27 state, 28 started_at valid,
//   29 finished_at valid, 32-39 number of splits, 40-47 broadcast source, 48-63 how many
//   collectives back the split sizes were recorded (see TraceSplits).
struct alignas(64) TraceEntry {
  uint64_t sequence;  // 0: empty or being rewritten
  const char* name;   // the API's name of the call (a string literal)
  uint64_t packed;
  int64_t input_numel;    // elements
  int64_t output_numel;   // elements
  uint64_t scheduled_at;  // 0 (not sampled), coarse, or precise for an asynchronous call
  uint64_t started_at;    // precise; valid for asynchronous and work-pool collectives
  uint64_t finished_at;   // precise; valid when finished with a timestamp (see finished())
};
static_assert(sizeof(TraceEntry) == 64);

// Split sizes, recorded only when they differ from the previous collective's (a training loop
// repeats the same ones): an entry points `delta` collectives back, to the record of collective
// `sequence - delta`, which sits at index id % (2 * capacity) and is kept until every entry
// that can point to it is gone (delta < capacity / 2). `id` tells a reader whether it is still
// there.
struct TraceSplits {
  uint64_t id;                           // the collective that wrote it
  int64_t row_elements;                  // elements per dim-0 row
  int64_t splits[transport::kMaxRanks];  // rows per rank, [0, num_splits)
};

// A closed run: collectives (head, last] repeated collective `head`'s call (see the top).
struct TraceRun {
  uint64_t head;     // 0: empty or being rewritten
  uint64_t last;     // the run's last collective
  uint64_t sampled;  // a collective of the run with a coarse time (0: none), and that time
  uint64_t sampled_at;
};

// A consistent copy of an entry, for dumps.
struct TraceRecord {
  uint64_t sequence = 0;
  const char* name = "";
  transport::OpKind kind = transport::OpKind::kNone;
  uint8_t dtype = 0;
  uint8_t reduce_op = 0;
  bool async_op = false;
  int num_splits = 0;
  int64_t root = 0;
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  int64_t row_elements = 0;
  TraceState state = TraceState::kNone;
  uint64_t scheduled_at = 0;  // CLOCK_MONOTONIC ns
  bool scheduled_precise = false;
  uint64_t started_at = 0;  // 0: not started, or no precise start time
  uint64_t finished_at = 0;
  std::vector<int64_t> splits;
};

class TraceRing {
 public:
  // `capacity` entries, a power of two, zero-filled on demand (untouched entries cost no memory).
  TraceRing(std::string group, int rank, int size, uint32_t capacity);
  ~TraceRing();
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  const std::string& group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // The collective `plan` got its sequence number. A synchronous call starts at once; an
  // asynchronous one is started by started(). Timestamps: see trace_clock and kSampleEvery.
  void scheduled(const OpPlan& plan, bool async_op) noexcept {
    TraceEntry& e = entry(plan.sequence);
    uint64_t now = 0;
    if (async_op) {
      now = trace_clock::precise();
    } else if (plan.sequence % kSampleEvery == 0) {
      now = trace_clock::coarse();
    }
    const uint64_t splits_delta = plan.num_splits > 0 ? record_splits(plan) : 0;
    store(e.sequence, uint64_t{0});
    detail::fence(std::memory_order_release);  // the 0 is visible before new fields
    store(e.name, plan.name);
    store(e.packed, pack(plan, async_op, async_op ? TraceState::kScheduled : TraceState::kStarted) |
                        splits_delta << 48);
    store(e.input_numel, plan.input().defined() ? plan.input().numel() : int64_t{0});
    store(e.output_numel, plan.output().defined() ? plan.output().numel() : int64_t{0});
    store(e.scheduled_at, now);
    std::atomic_ref<uint64_t>(e.sequence).store(plan.sequence, std::memory_order_release);
    // The next collective's entry is the next line of the ring (128 KiB at the default size, more
    // than L1): fetch it for writing now, so that its stores do not wait for the line then.
    __builtin_prefetch(&entry(plan.sequence + 1), 1, 3);
  }

  // Collective `head`, recorded by scheduled(), makes a call that differs from the one before it
  // (CallCache::remember() returned false): the collectives that repeat it form its run, which
  // ends the run before. Called by the thread that executes the group's collectives.
  void start_run(uint64_t head) noexcept;
  // Collective `sequence`, a small synchronous one that repeated the call before it, completed:
  // a member of the open run (recorded only now: it had nothing to write before), with a coarse
  // time every kRunSampleEvery-th collective.
  void run_member_completed(uint64_t sequence) noexcept {
    if ((sequence & (kRunSampleEvery - 1)) == 0) [[unlikely]]
      sample_run(sequence);
    completed_through_.store(sequence, std::memory_order_release);
  }

  // Whether collective `sequence` has its record (it may have been scheduled()).
  bool has(uint64_t sequence) const noexcept {
    return std::atomic_ref<uint64_t>(entry(sequence).sequence).load(std::memory_order_relaxed) ==
           sequence;
  }

  // A small synchronous collective reads the clock only every kSampleEvery-th time: a clock read
  // costs about as much as the rest of the recording. A collective that has to sleep while it
  // waits is stamped then (waiting()), so a hang always has a precise start.
  static constexpr uint64_t kSampleEvery = 8;

  // The collective began waiting for its peers in earnest (it sleeps) at `now` (CLOCK_MONOTONIC
  // ns): stamp it.
  void waiting(uint64_t sequence, uint64_t now) noexcept {
    if (sequence == 0) return;
    if (in_open_run(sequence) && !has(sequence)) give_member_an_entry(sequence);
    TraceEntry& e = entry(sequence);
    std::atomic_ref<uint64_t> version(e.sequence);
    if (version.load(std::memory_order_relaxed) != sequence) return;
    const uint64_t packed = std::atomic_ref<uint64_t>(e.packed).load(std::memory_order_relaxed);
    if ((packed & kStartedValid) != 0) return;
    update(sequence, static_cast<TraceState>((packed >> kStateShift) & 7), true, true, now);
  }

  // The collective began executing on the group's stream (asynchronous), or entered the work pool:
  // from here on its times are precise.
  void started(uint64_t sequence) noexcept { update(sequence, TraceState::kStarted, true, true); }
  // The collective ended. `timed`: record the state and when (always for a failure). A small
  // synchronous collective that succeeded costs one store to a line that stays in L1 instead:
  // collectives of a group complete in order, so "every collective up to `sequence` that is
  // still marked started has completed" says it all.
  void finished(uint64_t sequence, bool success, bool timed) noexcept {
    if (success && !timed) [[likely]] {
      completed_through_.store(sequence, std::memory_order_release);
      return;
    }
    update(sequence, success ? TraceState::kCompleted : TraceState::kFailed, true, false);
    if (success) completed_through_.store(sequence, std::memory_order_release);
  }

  // Collectives run unrecorded from here on (GroupState::set_trace_active, for benchmarks): ends
  // the open run, which would otherwise claim them. Call between collectives; the next recorded
  // collective must start a run (GroupState makes its call cache forget the last call).
  void suspend() noexcept { end_run(completed_through_.load(std::memory_order_relaxed) + 1); }

  // Consistent copies of every entry in use, runs expanded (in no particular order).
  std::vector<TraceRecord> snapshot() const;

  // The memory of a ring of `capacity` entries.
  static size_t ring_bytes(uint32_t capacity) {
    return (sizeof(TraceEntry) + 2 * sizeof(TraceSplits) + sizeof(TraceRun)) * capacity;
  }

 private:
  template <typename T>
  static void store(T& field, T value) noexcept {
    std::atomic_ref<T>(field).store(value, detail::kSeqlockStore);
  }
  // A run's collectives get a coarse time every kRunSampleEvery-th (a clock read per call would
  // cost more than the rest of the run's recording).
  static constexpr uint64_t kRunSampleEvery = 64;
  // Runs (see the top). Written by the thread that executes the group's collectives (and by
  // suspend(), between collectives); read by dumps.
  // Closes the open run before collective `next_sequence`.
  void end_run(uint64_t next_sequence) noexcept;
  void sample_run(uint64_t sequence) noexcept;
  bool in_open_run(uint64_t sequence) const noexcept {
    const uint64_t head = run_head_.load(std::memory_order_relaxed);
    return head != 0 && sequence > head;
  }
  // Gives collective `sequence` of the open run an entry of its own (a copy of the head's); the
  // run goes on around it.
  void give_member_an_entry(uint64_t sequence) noexcept;
  TraceRun& run_record(uint64_t head) const noexcept { return runs_[head & mask_]; }
  // Adds a record for every collective of the runs that start at `records`' collectives.
  void expand_runs(std::vector<TraceRecord>& records, uint64_t completed) const;

  // Masks, not `%`: a 64-bit division costs more than the rest of the recording.
  TraceEntry& entry(uint64_t sequence) const noexcept { return entries_[sequence & mask_]; }
  TraceSplits& splits_record(uint64_t sequence) const noexcept {
    return splits_[sequence & splits_mask_];
  }
  // Bits of `packed` (see TraceEntry): the state at 25-27, "started_at / finished_at is valid"
  // at 28 / 29 (so that scheduled() need not clear the times of the entry's previous use).
  static constexpr uint64_t kAsyncBit = uint64_t{1} << 24;
  static constexpr uint64_t kStateShift = 25;
  static constexpr uint64_t kStartedValid = uint64_t{1} << 28;
  static constexpr uint64_t kFinishedValid = uint64_t{1} << 29;

  static uint64_t pack(const OpPlan& plan, bool async_op, TraceState state) noexcept {
    return static_cast<uint64_t>(plan.kind) |
           (static_cast<uint64_t>(static_cast<uint8_t>(plan.dtype)) << 8) |
           (static_cast<uint64_t>(static_cast<uint8_t>(plan.reduce_op)) << 16) |
           (async_op ? kAsyncBit : 0) | (static_cast<uint64_t>(state) << kStateShift) |
           (static_cast<uint64_t>(static_cast<uint8_t>(plan.num_splits)) << 32) |
           (static_cast<uint64_t>(static_cast<uint8_t>(plan.root)) << 40);
  }
  // Records plan's split sizes unless they equal the last ones recorded; returns how many
  // collectives back they were recorded (0: by this one). The comparison reads only last_splits_,
  // one hot line with no dependent loads. Two threads scheduling on one group at once may race
  // on it and show wrong split sizes in a dump (never anything worse).
  uint64_t record_splits(const OpPlan& plan) noexcept {
    const uint64_t sequence = plan.sequence;
    const int count = plan.num_splits;
    if (count <= kCachedSplits) {
      bool same = load(last_splits_.count) == static_cast<uint64_t>(count) &&
                  load(last_splits_.row_elements) == plan.row_elements;
      for (int r = 0; r < count; ++r)
        same = same && load(last_splits_.splits[r]) == plan.splits[static_cast<size_t>(r)];
      const uint64_t delta = sequence - load(last_splits_.id);
      if (same && delta < max_splits_delta_) return delta;
    }
    TraceSplits& record = splits_record(sequence);
    store(record.id, uint64_t{0});
    detail::fence(std::memory_order_release);
    store(record.row_elements, plan.row_elements);
    for (int r = 0; r < count; ++r)
      store(record.splits[r], plan.splits[static_cast<size_t>(r)]);
    std::atomic_ref<uint64_t>(record.id).store(sequence, std::memory_order_release);
    if (count <= kCachedSplits) {
      store(last_splits_.id, sequence);
      store(last_splits_.count, static_cast<uint64_t>(count));
      store(last_splits_.row_elements, plan.row_elements);
      for (int r = 0; r < count; ++r)
        store(last_splits_.splits[r], plan.splits[static_cast<size_t>(r)]);
    }
    return 0;
  }
  template <typename T>
  static T load(const T& field) noexcept {
    return std::atomic_ref<T>(const_cast<T&>(field)).load(detail::kSeqlockLoad);
  }

  // A state change, with the time it happened when `timed` (into started_at when `start`, else
  // finished_at; `now`, or the clock when 0), as a seqlock write of its own; skipped when the entry
  // was already reused (more than `capacity` collectives scheduled ahead of this one).
  void update(uint64_t sequence, TraceState state, bool timed, bool start,
              uint64_t now = 0) noexcept {
    TraceEntry& e = entry(sequence);
    std::atomic_ref<uint64_t> version(e.sequence);
    if (version.load(std::memory_order_relaxed) != sequence) [[unlikely]]
      return;
    if (timed && now == 0) now = trace_clock::precise();
    uint64_t packed = std::atomic_ref<uint64_t>(e.packed).load(std::memory_order_relaxed);
    packed =
        (packed & ~(uint64_t{7} << kStateShift)) | (static_cast<uint64_t>(state) << kStateShift);
    if (timed) packed |= start ? kStartedValid : kFinishedValid;
    version.store(0, std::memory_order_relaxed);
    detail::fence(std::memory_order_release);
    store(e.packed, packed);
    if (timed) store(start ? e.started_at : e.finished_at, now);
    version.store(sequence, std::memory_order_release);
  }

  const std::string group_;
  const int rank_;
  const int size_;
  const uint32_t capacity_;  // a power of two
  const uint64_t mask_ = capacity_ - 1;
  const uint64_t splits_mask_ = 2 * uint64_t{capacity_} - 1;
  const uint64_t max_splits_delta_ = std::min<uint64_t>(capacity_ / 2, 0xffff);
  TraceEntry* entries_;  // capacity_ of each, zero pages until used (anonymous mmap)
  TraceSplits* splits_;  // 2 * capacity_
  TraceRun* runs_;       // capacity_
  // The open run: its head (0: none) and a sampled member. A dump reads head,
  // completed_through_, head again: a run that was open at both reads holds every collective
  // after its head that had completed then (heads only grow, so no ABA).
  alignas(64) std::atomic<uint64_t> run_head_{0};
  std::atomic<uint64_t> run_sampled_{0};
  std::atomic<uint64_t> run_sampled_at_{0};
  // The last collective that completed (see finished()); its own cache line.
  alignas(64) std::atomic<uint64_t> completed_through_{0};
  // The last split sizes recorded (see record_splits()); two lines.
  static constexpr int kCachedSplits = 12;
  struct alignas(64) LastSplits {
    uint64_t id = 0;
    uint64_t count = 0;
    int64_t row_elements = 0;
    int64_t splits[kCachedSplits] = {};
  } last_splits_;
};

// Why a dump happens; decides how much of it goes to the log (the file always gets everything).
enum class DumpTrigger {
  kFailure,  // a collective failed or a peer died: the first one logs the last entries, later
             // ones only the entries that are not completed
  kSignal,   // SIGUSR1: logs the last entries
};

class FlightRecorder {
 public:
  static FlightRecorder& instance();

  // SHMCCL_TRACE_BUFFER_SIZE rounded up to a power of two (0: the recorder is off and new_ring
  // returns nullptr).
  uint32_t capacity() const { return capacity_; }
  // A ring for a new group, registered for dumps; nullptr when the recorder is off. Starts the
  // dump thread and the SIGUSR1 handler on first use.
  std::shared_ptr<TraceRing> new_ring(const std::string& group, int rank, int size);
  // The group of `ring` is gone: keep its ring for dumps, among the few most recent ones.
  void retire(const std::shared_ptr<TraceRing>& ring);

  // Writes the recorder to the log and to SHMCCL_TRACE_FILE's file now (on the calling thread).
  void dump(const std::string& reason, DumpTrigger trigger);
  // Asks the dump thread to dump soon; cheap, never blocks on a dump (for the peer monitor's
  // callbacks). Requests that arrive together are written as one dump.
  void request_dump(const std::string& reason);

  // The text of a dump (header line + one line per entry, oldest first), and the file it goes
  // to: "<SHMCCL_TRACE_FILE>.<rank>" (empty when the variable is not set).
  std::string format(const std::string& reason) const;
  std::string trace_file_path() const;

 private:
  FlightRecorder();
  // The dump's lines; `completed` (optional) gets, per line, whether it is a completed entry.
  std::vector<std::string> format_lines(const std::string& reason,
                                        std::vector<bool>* completed) const;

  const uint32_t capacity_;
  std::string trace_file_prefix_;  // SHMCCL_TRACE_FILE, read once
  mutable std::mutex mutex_;       // guards rings_ and retired_
  std::vector<std::shared_ptr<TraceRing>> rings_;
  std::vector<std::shared_ptr<TraceRing>> retired_;  // most recent last
  std::mutex dump_mutex_;                            // one dump at a time (file rename, log)
  bool logged_failure_ = false;                      // guarded by dump_mutex_
  std::string first_failure_;                        // guarded by dump_mutex_
};

}  // namespace shmccl::collectives
