// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Allocation of tensor storage and the ordering rules for work on tensors: host work runs at once,
// NPU work runs on the current stream of the tensor's device.
#pragma once

#include <functional>
#include <memory>

#include "core/storage.h"
#include "shmccl/npu.hpp"
#include "shmccl/tensor.hpp"

namespace shmccl::device {

// Host memory is 64-byte aligned; NPU memory comes from the device's caching allocator. An NPU
// device of index -1 means the current device; the storage records the resolved index.
std::shared_ptr<detail::Storage> allocate_storage(size_t nbytes, Device device);

// Queues `work` on the current stream of `device` (asynchronous), or runs it now for the CPU.
void launch(const Device& device, std::function<void()> work);

// Runs `work` in the order of `device`'s current stream and returns when it is done (inline when
// the stream is idle). For the CPU, just runs it.
void run_ordered(const Device& device, const std::function<void()>& work);

// run_ordered for a read of device memory by the host: then an error that work on the stream
// stored is thrown (and cleared), as torch's .cpu() raises a failed kernel's error: the values
// read may be what the failed work left undone.
void read_ordered(const Device& device, const std::function<void()>& work);

}  // namespace shmccl::device
