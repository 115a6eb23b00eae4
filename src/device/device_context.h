// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Per-process state of the simulated devices: for each device, its arena, caching allocator and
// default stream, created on first use; per thread, the current device and current streams.
// Thread-safe.
#pragma once

#include <memory>

#include "device/arena.h"
#include "device/caching_allocator.h"
#include "device/stream_impl.h"

namespace shmccl::device {

// `device` itself, or the current device when it is -1; InvalidArgument when out of range.
int resolve_device(int device);

// A new stream on `device` (-1: current) with a process-unique id.
std::shared_ptr<npu::detail::StreamImpl> new_stream(int device);

// A new stream whose work may touch any device (a process group's communication stream: its
// collectives run on the devices of their tensors): npu::synchronize of every device waits for
// it. `device` (-1: current) is the one it reports.
std::shared_ptr<npu::detail::StreamImpl> new_shared_stream(int device);

// The calling thread's current stream of `device` (-1: current), without copying a handle.
npu::detail::StreamImpl& current_stream_impl(int device);

// The calling thread's current stream of its current device when this process uses that device
// (the device exists, or the thread set a stream of its own), else nullptr: an unused device has
// no work queued. Never creates a device, never throws (a barrier, which has no tensors, is
// ordered after it).
npu::detail::StreamImpl* current_stream_impl_if_used() noexcept;

// The arena and allocator of `device` (-1: current), created on first use.
Arena& arena(int device);
CachingAllocator& allocator(int device);

// The arena of `device` if this process created it, else nullptr (never creates one; any int is
// accepted, for indices read from shared memory).
Arena* existing_arena(int device) noexcept;

// The device whose arena contains `pointer`, or -1 for host memory.
int device_of_pointer(const void* pointer);

}  // namespace shmccl::device
