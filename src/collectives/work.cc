// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "shmccl/work.hpp"

#include <utility>

#include "core/check.h"
#include "core/deadline.h"
#include "device/stream_impl.h"

namespace shmccl {

Work::Work(std::string description, uint64_t sequence)
    : description_(std::move(description)),
      sequence_(sequence),
      fork_generation_(npu::detail::fork_generation()) {}

Work::Work(std::string description, uint64_t sequence, bool runs_on_stream, int device)
    : description_(std::move(description)),
      sequence_(sequence),
      runs_on_stream_(runs_on_stream),
      device_(device),
      fork_generation_(npu::detail::fork_generation()) {}

void Work::throw_if_made_before_fork() const {
  if (fork_generation_ == npu::detail::fork_generation() ||
      completed_.load(std::memory_order_acquire)) [[likely]] {
    return;
  }
  throw InvalidArgument(detail::concat(
      description_, " (sequence ", sequence_,
      "): its Work was made before fork() and had not completed; the collective runs in the "
      "parent process only, so the child would wait for it forever"));
}

void Work::help(bool /*run_here*/) const {}

bool Work::is_completed() const {
  if (completed_.load(std::memory_order_acquire)) return true;
  if (!runs_on_stream_) return false;
  help(/*run_here=*/false);  // a caller polling for it wants it started, not at the next poll
  return completed_.load(std::memory_order_acquire);
}

bool Work::is_success() const {
  return completed_.load(std::memory_order_acquire) && error_ == nullptr;
}

std::exception_ptr Work::exception() const {
  return completed_.load(std::memory_order_acquire) ? error_ : nullptr;
}

bool Work::wait(std::chrono::milliseconds timeout) {
  throw_if_made_before_fork();
  if (!completed_.load(std::memory_order_acquire) && runs_on_stream_) {
    // No deadline to keep: run the collective here if it has not started (it would block this
    // thread just as long on the stream's thread, plus the hand-offs). With one: a collective
    // run here could not be left when it passes, so only make sure that thread starts it now.
    help(/*run_here=*/timeout.count() < 0);
  }
  if (!completed_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto done = [&] { return completed_.load(std::memory_order_relaxed); };
    if (timeout.count() < 0) {
      completed_cv_.wait(lock, done);
    } else if (!completed_cv_.wait_until(lock, detail::deadline_after(timeout), done)) {
      return false;
    }
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void Work::synchronize() {
  throw_if_made_before_fork();
  if (!runs_on_stream_) {
    wait();  // host-side work: waiting on the host is the only ordering there is
    return;
  }
  npu::detail::StreamImpl& stream =
      *npu::current_stream(device_ >= 0 ? device_ : npu::current_device()).impl();
  std::shared_ptr<npu::detail::EventState> event;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_.load(std::memory_order_relaxed)) {
      // Nothing to order after; a failure still reaches the stream's next synchronisation, as
      // it does when the collective fails after this call (docs/errors.md).
      if (error_) stream.fail_with(error_);
      return;
    }
    if (completion_event_ == nullptr) {
      completion_event_ = std::make_shared<npu::detail::EventState>();
      completion_generation_ = npu::detail::begin_task_record(*completion_event_);
    }
    event = completion_event_;
    generation = completion_generation_;
  }
  help(/*run_here=*/false);  // the stream waiting for it needs it started
  stream.wait_for_task(event, generation);
}

void Work::finish(std::exception_ptr error) {
  std::shared_ptr<npu::detail::EventState> event;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_.load(std::memory_order_relaxed)) return;
    error_ = std::move(error);
    completed_.store(true, std::memory_order_release);
    event = completion_event_;
    generation = completion_generation_;
  }
  completed_cv_.notify_all();
  if (event != nullptr) npu::detail::complete_task_record(*event, generation, error_);
}

}  // namespace shmccl
