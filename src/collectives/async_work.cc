// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/async_work.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "collectives/executor.h"
#include "collectives/flight_recorder.h"
#include "collectives/group_state.h"
#include "core/check.h"
#include "core/deadline.h"

namespace shmccl::collectives {
namespace {

// How often a wait for the caller's stream looks whether the group failed meanwhile.
constexpr auto kFailurePoll = std::chrono::milliseconds(10);

}  // namespace

AsyncWork::AsyncWork(detail::GroupState& state, const OpPlan& plan, int device)
    : Work(plan.name, plan.sequence, /*runs_on_stream=*/true, device), state_(state) {
  plan_.copy_owning(plan, tensors_);
}

void AsyncWork::enqueue_on(npu::detail::StreamImpl& stream,
                           const std::shared_ptr<AsyncWork>& work) {
  // `work = work`, not `[work]`: a copy-capture of a const reference is a const member, which
  // the task's moves into and out of the queue would copy (two locked instructions each, four
  // moves per call).
  work->helper_ = stream.enqueue_helpable([work = work] { work->run(); });
}

void AsyncWork::start_after(std::shared_ptr<npu::detail::EventState> recorded,
                            const npu::detail::StreamImpl& caller) {
  std::lock_guard<std::mutex> lock(recorded->mutex);
  caller_generation_ = recorded->record_generation;
  caller_stream_ = std::move(recorded);
  caller_device_ = caller.device();
  caller_stream_id_ = caller.id();
}

// The caller's stream usually gets through the work before the collective in time. It may never:
// a task there that waits for this collective, or for a later one of the group (queued behind
// this one), waits for itself. Bounded by the group's timeout, as every wait of a collective is;
// the group's failure ends it too (the collective cannot run then: execute() says why).
void AsyncWork::wait_for_caller_stream() {
  npu::detail::EventState& event = *caller_stream_;
  const auto deadline = detail::deadline_after(state_.timeout());
  {
    std::unique_lock<std::mutex> lock(event.mutex);
    while (!npu::detail::generation_completed_locked(event, caller_generation_)) {
      if (state_.failed()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      event.completed_cv.wait_until(lock, std::min(deadline, now + kFailurePoll));
    }
    if (npu::detail::generation_completed_locked(event, caller_generation_)) return;
  }
  const std::string message = detail::concat(
      plan_.name, " (sequence ", plan_.sequence, ") on group ", state_.comm_name(), " waited ",
      state_.timeout().count(),
      " ms (the group's timeout) for the work queued before it on its caller's current stream "
      "(npu:",
      caller_device_, " stream ", caller_stream_id_,
      "), which has not completed: a task there may wait for this collective or a later "
      "one of the group");
  if (TraceRing* trace = state_.trace()) trace->finished(plan_.sequence, false, true);
  // This rank never arrives at this call: its peers must not wait for it.
  state_.fail_before_arrival(plan_.sequence, message, transport::FailureKind::kTimeout);
  throw TimeoutError(message);
}

void AsyncWork::run() noexcept {
  std::exception_ptr error;
  try {
    if (caller_stream_ != nullptr) wait_for_caller_stream();
    execute(state_, plan_);
  } catch (...) {
    error = std::current_exception();
  }
  // Before completing: a waiter that returns finds the tensors released, as after a
  // synchronous call (a handle kept for later does not keep their memory).
  plan_.release_tensors();
  tensors_ = OwnedTensors();
  finish(std::move(error));
}

void AsyncWork::help(bool run_here) const {
  helper_(run_here);
}

}  // namespace shmccl::collectives
