// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Collectives for the library's own operators that run as a task of a device stream: queued on
// the group's communication stream without waiting for the caller's stream (which is running
// the caller and could not complete first). The caller guarantees the tensors are ready.
#pragma once

#include <memory>

#include "shmccl/process_group.hpp"
#include "shmccl/work.hpp"

namespace shmccl::collectives {

// An asynchronous in-place SUM all-reduce of `tensor` (an NPU tensor) over `group`.
std::shared_ptr<Work> all_reduce_unordered(ProcessGroup& group, const Tensor& tensor);

}  // namespace shmccl::collectives
