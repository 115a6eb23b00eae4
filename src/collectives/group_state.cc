// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/group_state.h"

#include <chrono>
#include <thread>

#include "collectives/host_staging.h"
#include "core/check.h"
#include "core/deadline.h"
#include "device/device_context.h"
#include "shmccl/npu.hpp"

namespace shmccl::detail {

GroupState::GroupState(std::unique_ptr<transport::GroupTransport> transport,
                       std::vector<int> global_ranks, std::string comm_name,
                       std::chrono::milliseconds timeout)
    : transport_(std::move(transport)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      global_ranks_(std::move(global_ranks)),
      comm_name_(std::move(comm_name)),
      timeout_ms_(timeout.count()),
      trace_(collectives::FlightRecorder::instance().new_ring(comm_name_, rank(), size())) {
  active_trace_ = trace_.get();
  if (trace_) {
    // A collective that has to sleep while it waits gets a precise time in the recorder.
    transport_->set_sleep_listener(
        [](void* context, uint64_t now) {
          auto* self = static_cast<GroupState*>(context);
          if (self->active_trace_ != nullptr)
            self->active_trace_->waiting(self->executing_sequence_, now);
        },
        this);
    // Every survivor of a peer's death writes its flight recorder, also when it is not in a
    // collective (the callback runs on the peer monitor's thread: hand the dump to the dumper).
    transport_->set_peer_death_listener([name = comm_name_](const std::string& what) {
      collectives::FlightRecorder::instance().request_dump("group " + name + ": " + what);
    });
  }
}

Work* completed_work_object() {
  auto* work = new Work("completed synchronous collective");
  work->finish();
  return work;
}

// Collectives still queued reference this state; ProcessGroup's destructor drains the stream
// before destroying it, so there is nothing to wait for here (and a destructor must not rethrow a
// stream error).
GroupState::~GroupState() {
  shut_down();
}

void GroupState::shut_down() {
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    failed_.store(true, std::memory_order_release);  // check_not_failed() reads shut_down_
  }
  transport_.reset();  // departs; no peer-death callback from here on
  active_trace_ = nullptr;
  collectives::FlightRecorder::instance().retire(trace_);
}

bool GroupState::is_shut_down() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return shut_down_;
}

collectives::HostStaging& GroupState::host_staging() {
  if (!host_staging_) host_staging_ = std::make_unique<collectives::HostStaging>();
  return *host_staging_;
}

npu::detail::StreamImpl& GroupState::comm_stream() {
  if (npu::detail::StreamImpl* ready = comm_stream_ready_.load(std::memory_order_acquire)) {
    return *ready;
  }
  std::call_once(comm_stream_once_, [&] {
    comm_stream_ = device::new_shared_stream(npu::current_device());
    comm_stream_ready_.store(comm_stream_.get(), std::memory_order_release);
  });
  return *comm_stream_;
}

void GroupState::wait_for_turn_slowly(uint64_t sequence) {
  // Another thread's call is before this one; it may wait for peers up to its own timeout. Yield
  // at first (it is usually short), then sleep a little at a time.
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = deadline_after(saturating_multiply(timeout(), int64_t{2}), started);
  for (int round = 0; turn_.load(std::memory_order_acquire) + 1 != sequence; ++round) {
    check_not_failed();  // a call before this one failed the group: no turn will come
    if (round < 100) {
      std::this_thread::yield();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      const std::string message = concat(
          "collective (sequence ", sequence, ") on group ", comm_name_, " waited ",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count(),
          " ms for its turn: this rank's collective ", turn_.load(std::memory_order_acquire) + 1,
          ", called by another thread, has not been run or queued");
      // This rank never arrives at this call: its peers must not wait for it.
      fail_before_arrival(sequence, message, transport::FailureKind::kTimeout);
      throw TimeoutError(message);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 10 : 200));
  }
}

void GroupState::fail_before_arrival(uint64_t sequence, const std::string& message,
                                     transport::FailureKind kind) {
  // All under the lock leave_unrun_call takes: a call queued before this one that sees the group
  // failed must find this departure there, to move it down (else it stays here, and the peers
  // waiting in that earlier call sit out their timeout). The lock also keeps shut_down() from
  // taking the transport away in between.
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (!mark_failed_locked(message)) return;
  transport_->give_up(sequence, message, kind);
  transport_->depart(sequence);
}

void GroupState::leave_unrun_call(uint64_t sequence) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (shut_down_ || !transport_) return;  // shutting down departed at the first call not run
  // Only an earlier departure moves (a group aborted by this rank, say, has none: its peers
  // learn of the abort itself).
  const transport::RankSlot& mine = transport_->slot(transport_->rank());
  if (mine.departed_at.load(std::memory_order_acquire) != 0 &&
      !transport::arrived_at(mine, sequence)) {
    transport_->depart(sequence);
  }
}

bool GroupState::mark_failed(const std::string& message) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return mark_failed_locked(message);
}

bool GroupState::mark_failed_locked(const std::string& message) {
  if (failed_.load(std::memory_order_relaxed) || shut_down_) return false;
  failure_ = message;
  failed_.store(true, std::memory_order_release);
  return true;
}

void GroupState::check_not_failed() const {
  if (failed_.load(std::memory_order_acquire)) [[unlikely]] {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (shut_down_) {
      throw InvalidArgument(concat("the process group ", comm_name_,
                                   " was shut down (ProcessGroup::shutdown or "
                                   "destroy_process_group) and runs no more collectives"));
    }
    throw RemoteError(concat("the process group ", comm_name_,
                             " failed earlier and cannot run collectives: ", failure_));
  }
}

}  // namespace shmccl::detail
