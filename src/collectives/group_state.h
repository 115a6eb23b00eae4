// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// GroupState: everything one process keeps for one process group. Split by owner: the transport
// (control block, waits, liveness), the communication stream that runs the group's collectives
// in order, and the bookkeeping of the collective sequence (sequence numbers, the work-pool
// base). Collectives of one group execute one at a time on its stream, so the sequence fields
// are touched by one thread at a time; next_sequence_ is assigned by callers and is atomic.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/call_cache.h"
#include "collectives/early_finish.h"
#include "collectives/flight_recorder.h"
#include "device/stream_impl.h"
#include "shmccl/work.hpp"
#include "transport/group_transport.h"

namespace shmccl::collectives {
class HostStaging;
}

namespace shmccl::detail {

class GroupState {
 public:
  GroupState(std::unique_ptr<transport::GroupTransport> transport, std::vector<int> global_ranks,
             std::string comm_name, std::chrono::milliseconds timeout);
  ~GroupState();

  // Only while the group is live: every entry point checks check_not_failed() first.
  transport::GroupTransport& transport() { return *transport_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& comm_name() const { return comm_name_; }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  void set_timeout(std::chrono::milliseconds timeout) {
    timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  }

  // Sequence numbers start at 1 and follow the order of calls on this rank.
  uint64_t next_sequence() { return next_sequence_.fetch_add(1, std::memory_order_relaxed) + 1; }

  // Calls take turns in the order of their sequence numbers, which are the tickets: call
  // `sequence` waits until every earlier one has been handed on (run, when synchronous; queued on
  // the group's stream, when asynchronous), then hands itself on with end_turn(). One thread's
  // calls never wait here, their numbers come in order: a load and a store per call. Calls from
  // several threads at once take turns instead of running the executor's state side by side.
  // Waits at most twice the group's timeout (the call before may itself take one), then fails
  // the group, as a collective that timed out does.
  void wait_for_turn(uint64_t sequence) {
    if (turn_.load(std::memory_order_acquire) + 1 != sequence) [[unlikely]]
      wait_for_turn_slowly(sequence);
  }
  void end_turn(uint64_t sequence) { turn_.store(sequence, std::memory_order_release); }

  // Where the next work pool starts (see control_block.h), advanced per collective: `done`'s
  // count of finished chunks, and each stripe's count of taken ones (collectives/work_stripes.h).
  uint64_t take_pool(uint64_t chunks) {
    const uint64_t base = pool_base_;
    pool_base_ += chunks;
    return base;
  }
  uint64_t take_stripe(int stripe, uint64_t chunks) {
    uint64_t& next = stripe_bases_[static_cast<size_t>(stripe)];
    const uint64_t base = next;
    next += chunks;
    return base;
  }

  // How this group stages host tensors (collectives/host_staging.h), created on first use. Used by
  // the executing thread only.
  collectives::HostStaging& host_staging();

  // The stream that runs this group's collectives, created on first use.
  npu::detail::StreamImpl& comm_stream();
  bool has_comm_stream() const {
    return comm_stream_ready_.load(std::memory_order_acquire) != nullptr;
  }

  // A failed group stays failed (its ranks may disagree on where the work pool stands): every
  // later collective throws the first failure. True when this was the first failure.
  bool mark_failed(const std::string& message);
  // Call `sequence` failed on this rank before it arrived (after it took its number): the group
  // fails, and this rank departs at that call, so its peers' waits for it fail at once, naming
  // `message`. Calls queued before it depart earlier as they find the group failed
  // (leave_unrun_call).
  void fail_before_arrival(uint64_t sequence, const std::string& message,
                           transport::FailureKind kind);
  // Call `sequence` will not run here: the group failed before it did. Every earlier call of this
  // rank is done (calls run in order), so a departure at a later call moves down to it.
  void leave_unrun_call(uint64_t sequence);
  void check_not_failed() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Leaves the group for good (ProcessGroup::shutdown): the transport goes, so the peers' waits
  // for this rank fail at once, naming it; later collectives throw. Only once no collective of
  // this group runs (its stream drained). Once; later calls do nothing.
  void shut_down();
  bool is_shut_down() const;

  // This group's flight recorder ring; nullptr when the recorder is off
  // (SHMCCL_TRACE_BUFFER_SIZE=0).
  collectives::TraceRing* trace() const { return active_trace_; }
  // Suspends or resumes recording, to measure the recorder's cost in one process
  // (bench/collectives_bench.cc). Only between collectives; not thread-safe.
  void set_trace_active(bool active) {
    if (!active && active_trace_ != nullptr) active_trace_->suspend();
    if (active && active_trace_ == nullptr) calls_.forget();  // the next call starts a run
    active_trace_ = active ? trace_.get() : nullptr;
  }
  // The collective this group is executing (set by the executor; read by the sleep listener on
  // the same thread).
  void set_executing(uint64_t sequence) {
    executing_sequence_ = sequence;
    transport_->set_current_sequence(sequence);  // what its waits compare departures with
  }
  uint64_t executing() const { return executing_sequence_; }  // the last one, between calls
  // The collectives this rank finished before every peer arrived, and what it still owes for them
  // (early_finish.h). Used by the executing thread only.
  collectives::EarlyFinishes& early() { return early_; }
  // The last call executed and what this rank's slot holds of it (executing thread only).
  collectives::CallCache& calls() { return calls_; }
  // Suspends or resumes the mismatch check's work (descriptor, fingerprint), to measure its cost
  // in one process (bench/recorder_overhead_bench.cc): suspended, every rank sends the same
  // fingerprint. Only between collectives, on every rank alike; never in a real program.
  void set_mismatch_check_active(bool active) { mismatch_check_ = active; }
  bool mismatch_check_active() const { return mismatch_check_; }
  // The least CPU share of the group's ranks, once the fused grouped matmul agreed on it (0:
  // not yet; ops/grouped_matmul_all_reduce.cc).
  int agreed_cpu_share() const { return agreed_cpu_share_.load(std::memory_order_relaxed); }
  void set_agreed_cpu_share(int share) {
    agreed_cpu_share_.store(share, std::memory_order_relaxed);
  }

 private:
  bool mark_failed_locked(const std::string& message);  // holding failure_mutex_

  [[gnu::noinline]] void wait_for_turn_slowly(uint64_t sequence);

  std::unique_ptr<transport::GroupTransport> transport_;
  const int rank_;
  const int size_;
  const std::vector<int> global_ranks_;
  const std::string comm_name_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<uint64_t> next_sequence_{0};
  std::atomic<uint64_t> turn_{0};  // the last call handed on (wait_for_turn)
  uint64_t pool_base_ = 0;
  std::array<uint64_t, transport::kMaxRanks> stripe_bases_{};
  std::unique_ptr<collectives::HostStaging> host_staging_;
  std::once_flag comm_stream_once_;
  std::shared_ptr<npu::detail::StreamImpl> comm_stream_;
  // comm_stream_.get() once it exists: the check of every synchronous collective, without
  // std::call_once (whose fast path still sets thread-local state).
  std::atomic<npu::detail::StreamImpl*> comm_stream_ready_{nullptr};
  std::atomic<bool> failed_{false};
  std::atomic<int> agreed_cpu_share_{0};
  mutable std::mutex failure_mutex_;
  std::string failure_;
  bool shut_down_ = false;  // guarded by failure_mutex_
  std::shared_ptr<collectives::TraceRing> trace_;
  collectives::TraceRing* active_trace_ = nullptr;  // trace_, or nullptr while suspended
  uint64_t executing_sequence_ = 0;
  collectives::EarlyFinishes early_;
  collectives::CallCache calls_;
  bool mismatch_check_ = true;
};

// The immortal completed Work behind completed_work() (a handle may outlive every group, and
// static destruction).
Work* completed_work_object();

// What synchronous collectives return: an already completed Work, shared by every call and group
// (no allocation, no reference count per call: its use_count() is 0). Inline: it is most of what
// a call does after its collective.
inline std::shared_ptr<Work> completed_work() {
  static Work* const completed = completed_work_object();
  // Aliasing an empty owner: a handle that counts no references, so returning one per
  // synchronous call costs no atomic increment and decrement.
  return std::shared_ptr<Work>(std::shared_ptr<Work>(), completed);
}

}  // namespace shmccl::detail
