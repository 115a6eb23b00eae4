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
// either sees a consistent entry or skips it. On x86 all of this compiles to plain moves: the hot
// path costs a few stores and two reads of the TSC per collective.
//
// FlightRecorder: the process-wide registry of rings and the dump logic (flight_recorder.cc); the
// dump thread and the SIGUSR1 handler live in trace_dumper.cc. Thread-safe.
#pragma once

#include <x86intrin.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/op_plan.h"

namespace shmccl::collectives {

enum class TraceState : uint8_t { kNone = 0, kScheduled, kStarted, kCompleted, kFailed };

// Timestamps of the recorder: TSC ticks when the TSC is invariant (constant_tsc and nonstop_tsc),
// else steady_clock nanoseconds; a dump converts them to wall-clock time.
namespace trace_clock {
extern bool g_use_tsc;  // decided once, before the first ring exists
uint64_t steady_ns() noexcept;
inline uint64_t now() noexcept {
  return g_use_tsc ? __rdtsc() : steady_ns();
}
}  // namespace trace_clock

// One recorded collective. Plain data, accessed only through std::atomic_ref (see above).
struct alignas(64) TraceEntry {
  uint64_t sequence;      // 0: empty or being rewritten
  const char* name;       // the API's name of the call (a string literal)
  uint64_t packed;        // kind | dtype << 8 | reduce_op << 16 | async << 24 | num_splits << 32
  int64_t root;           // broadcast source (group rank)
  int64_t input_numel;    // elements
  int64_t output_numel;   // elements
  int64_t row_elements;   // elements per dim-0 row
  uint64_t state;         // TraceState
  uint64_t scheduled_at;  // trace_clock ticks
  uint64_t started_at;
  uint64_t finished_at;
  int64_t splits[transport::kMaxRanks];  // rows per rank, [0, num_splits)
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
  uint64_t scheduled_at = 0;
  uint64_t started_at = 0;
  uint64_t finished_at = 0;
  std::vector<int64_t> splits;
};

class TraceRing {
 public:
  // `capacity` > 0 entries, zero-filled on demand (untouched entries cost no memory).
  TraceRing(std::string group, int rank, int size, uint32_t capacity);
  ~TraceRing();
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  const std::string& group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // The collective `plan` got its sequence number. A synchronous call starts at once (same
  // timestamp); an asynchronous one is started by started().
  void scheduled(const OpPlan& plan, bool async_op) noexcept {
    TraceEntry& e = entry(plan.sequence);
    const uint64_t now = trace_clock::now();
    store(e.sequence, uint64_t{0});
    std::atomic_thread_fence(std::memory_order_release);  // the 0 is visible before new fields
    store(e.name, plan.name);
    store(e.packed, static_cast<uint64_t>(plan.kind) |
                        (static_cast<uint64_t>(static_cast<uint8_t>(plan.dtype)) << 8) |
                        (static_cast<uint64_t>(static_cast<uint8_t>(plan.reduce_op)) << 16) |
                        (static_cast<uint64_t>(async_op) << 24) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(plan.num_splits)) << 32));
    store(e.root, static_cast<int64_t>(plan.root));
    store(e.input_numel, plan.input().defined() ? plan.input().numel() : int64_t{0});
    store(e.output_numel, plan.output().defined() ? plan.output().numel() : int64_t{0});
    store(e.row_elements, plan.row_elements);
    for (int r = 0; r < plan.num_splits; ++r)
      store(e.splits[r], plan.splits[static_cast<size_t>(r)]);
    store(e.state, static_cast<uint64_t>(async_op ? TraceState::kScheduled : TraceState::kStarted));
    store(e.scheduled_at, now);
    store(e.started_at, async_op ? uint64_t{0} : now);
    store(e.finished_at, uint64_t{0});
    std::atomic_ref<uint64_t>(e.sequence).store(plan.sequence, std::memory_order_release);
  }

  // An asynchronous collective began executing on the group's stream.
  void started(uint64_t sequence) noexcept { update(sequence, TraceState::kStarted); }
  void finished(uint64_t sequence, bool success) noexcept {
    update(sequence, success ? TraceState::kCompleted : TraceState::kFailed);
  }

  // Consistent copies of every entry in use (in no particular order).
  std::vector<TraceRecord> snapshot() const;

 private:
  template <typename T>
  static void store(T& field, T value) noexcept {
    std::atomic_ref<T>(field).store(value, std::memory_order_relaxed);
  }
  TraceEntry& entry(uint64_t sequence) const noexcept { return entries_[sequence % capacity_]; }
  // A state change, as a seqlock write of its own; skipped when the entry was already reused
  // (more than `capacity` collectives scheduled ahead of this one).
  void update(uint64_t sequence, TraceState state) noexcept {
    TraceEntry& e = entry(sequence);
    std::atomic_ref<uint64_t> version(e.sequence);
    if (version.load(std::memory_order_relaxed) != sequence) [[unlikely]]
      return;
    const uint64_t now = trace_clock::now();
    version.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    store(e.state, static_cast<uint64_t>(state));
    store(state == TraceState::kStarted ? e.started_at : e.finished_at, now);
    version.store(sequence, std::memory_order_release);
  }

  const std::string group_;
  const int rank_;
  const int size_;
  const uint32_t capacity_;
  TraceEntry* entries_;  // calloc'd: zero pages until used
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

  // SHMCCL_TRACE_BUFFER_SIZE (0: the recorder is off and new_ring returns nullptr).
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
};

}  // namespace shmccl::collectives
