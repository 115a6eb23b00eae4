// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// AsyncWork: an asynchronous collective and its Work handle in one object: the plan, owning its
// references to the caller's tensors until it has run, and the Helper of its task on the group's
// communication stream. The task holds the AsyncWork (a 16-byte capture: queued without an
// allocation, see device/stream_task.h). A call allocates this object and a copy of each owned
// tensor's shape: about 2 allocations where it made 8 (callgrind, docs/performance.md).
// Thread-safe as Work is; run() is called once, by the stream's worker or a helping waiter.
#pragma once

#include <memory>

#include "collectives/op_plan.h"
#include "device/stream_impl.h"
#include "shmccl/work.hpp"

namespace shmccl::detail {
class GroupState;
}  // namespace shmccl::detail

namespace shmccl::collectives {

class AsyncWork final : public Work {
 public:
  // A copy of `plan` that owns its tensors, to run on `state`'s communication stream.
  // `device`: the NPU device whose current stream synchronize() orders (-1: the caller's current
  // device).
  AsyncWork(detail::GroupState& state, const OpPlan& plan, int device);

  // Queues the collective on `stream` (the group's communication stream) after what is queued
  // there. Call once, before the handle is handed out.
  static void enqueue_on(npu::detail::StreamImpl& stream, const std::shared_ptr<AsyncWork>& work);

  // The collective starts only once `recorded` (recorded on `caller`, the caller's current
  // stream, as it called) has completed: torch's stream order. Call before enqueue_on.
  void start_after(std::shared_ptr<npu::detail::EventState> recorded,
                   const npu::detail::StreamImpl& caller);

  // After wait(): returns once the stream has counted the collective as completed, so that the
  // caller's next synchronous call finds the stream idle and runs inline (see
  // StreamImpl::Helper::await_recorded).
  void await_stream_record() const { helper_.await_recorded(); }

 private:
  // Executes the collective, lets go of the tensors and completes the Work.
  void run() noexcept;
  void help(bool run_here) const override;
  // Waits for the caller's stream (start_after), at most the group's timeout.
  void wait_for_caller_stream();

  detail::GroupState& state_;
  OwnedTensors tensors_;  // what plan_ references, until the collective has run
  OpPlan plan_;
  std::shared_ptr<npu::detail::EventState> caller_stream_;  // null: nothing to wait for
  uint64_t caller_generation_ = 0;
  int caller_device_ = -1;
  uint64_t caller_stream_id_ = 0;
  // Set by enqueue_on before the handle is handed out, then only read.
  npu::detail::StreamImpl::Helper helper_;
};

}  // namespace shmccl::collectives
