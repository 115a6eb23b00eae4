// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "shmccl/work.hpp"

#include <utility>

#include "core/check.h"

namespace shmccl {

Work::Work(std::string description, uint64_t sequence)
    : description_(std::move(description)), sequence_(sequence) {}

bool Work::is_completed() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ || !help_) return completed_;
  }
  help_(/*run_here=*/false);  // a caller polling for it wants it started, not at the next poll
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && error_ == nullptr;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!completed_ && help_) {
    lock.unlock();
    // No deadline to keep: run the collective here if it has not started (it would block this
    // thread just as long on the stream's thread, plus the hand-offs). With one: a collective
    // run here could not be left when it passes, so only make sure that thread starts it now.
    help_(/*run_here=*/timeout.count() < 0);
    lock.lock();
  }
  if (timeout.count() < 0) {
    completed_cv_.wait(lock, [&] { return completed_; });
  } else if (!completed_cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void Work::synchronize() {
  npu::Event event;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!has_event_) {
      // Host-side work (or already finished): waiting on the host is the only ordering there is.
      lock.unlock();
      wait();
      return;
    }
    event = completion_event_;
  }
  if (help_) help_(/*run_here=*/false);  // the stream waiting for it needs it started
  npu::current_stream(npu::current_device()).wait_event(event);
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
    completed_ = true;
    error_ = std::move(error);
  }
  completed_cv_.notify_all();
}

void Work::set_helper(std::function<void(bool run_here)> help) {
  std::lock_guard<std::mutex> lock(mutex_);
  help_ = std::move(help);
}

void Work::set_completion_event(npu::Event event) {
  std::lock_guard<std::mutex> lock(mutex_);
  completion_event_ = std::move(event);
  has_event_ = true;
}

}  // namespace shmccl
