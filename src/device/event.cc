// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// npu::Event: a copyable handle on an EventState. Recording and waiting are done by the stream
// (StreamImpl::record / wait); this file reads the completion state.
#include <chrono>
#include <mutex>

#include "core/check.h"
#include "device/stream_impl.h"
#include "shmccl/npu.hpp"

namespace shmccl::npu {
namespace {

// What elapsed_time() needs of one event, read under its mutex.
struct TimingSnapshot {
  bool enable_timing;
  bool recorded;
  bool completed;
  std::chrono::steady_clock::time_point completed_at;
};

TimingSnapshot snapshot(detail::EventState& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  return {state.enable_timing, state.recorded, state.completed, state.completed_at};
}

void check_timable(const TimingSnapshot& event, const char* which) {
  SHMCCL_CHECK_ARG(event.enable_timing, "Event.elapsed_time(): the ", which,
                   " event was created without enable_timing=true");
  SHMCCL_CHECK_ARG(event.recorded, "Event.elapsed_time(): the ", which,
                   " event was never recorded");
  SHMCCL_CHECK_ARG(event.completed, "Event.elapsed_time(): the ", which,
                   " event has not completed yet (synchronize it first)");
}

}  // namespace

Event::Event(bool enable_timing) : state_(std::make_shared<detail::EventState>()) {
  state_->enable_timing = enable_timing;  // before the state is shared: no lock needed
}

void Event::record() {
  record(current_stream());
}

void Event::record(const Stream& stream) {
  stream.impl()->record(state_);
}

bool Event::query() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->completed;
}

void Event::synchronize() const {
  detail::wait_event_completed(*state_);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->completed) error = state_->error;  // else re-recorded since: not ours to report
  }
  if (error) std::rethrow_exception(error);
}

void Event::wait(const Stream& stream) const {
  stream.impl()->wait(state_);
}

float Event::elapsed_time(const Event& end) const {
  const TimingSnapshot start_event = snapshot(*state_);
  const TimingSnapshot end_event = snapshot(*end.state_);
  check_timable(start_event, "start");
  check_timable(end_event, "end");
  return std::chrono::duration<float, std::milli>(end_event.completed_at - start_event.completed_at)
      .count();
}

}  // namespace shmccl::npu
