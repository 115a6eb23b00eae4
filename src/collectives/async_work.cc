// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/async_work.h"

#include <exception>

#include "collectives/executor.h"

namespace shmccl::collectives {

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

void AsyncWork::run() noexcept {
  std::exception_ptr error;
  try {
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
