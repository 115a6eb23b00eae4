// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// npu::Stream: a copyable handle on a StreamImpl (device/stream_impl.h does the work).
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "shmccl/npu.hpp"

namespace shmccl::npu {

Stream::Stream(int device) : Stream(device::new_stream(device)) {}

int Stream::device() const {
  return impl_->device();
}

uint64_t Stream::id() const {
  return impl_->id();
}

bool Stream::query() const {
  return impl_->idle();
}

void Stream::synchronize() const {
  impl_->synchronize();
}

void Stream::wait_event(const Event& event) const {
  impl_->wait(event.state());
}

Event Stream::record_event() const {
  Event event;
  event.record(*this);
  return event;
}

}  // namespace shmccl::npu
