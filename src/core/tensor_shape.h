// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Checks on a tensor's shape shared by the Tensor class and the factories.
#pragma once

#include <cstdint>
#include <vector>

namespace shmccl::detail {

// The element count of a tensor of `sizes`: InvalidArgument when a size is negative or the
// count overflows int64_t (a wrapped count would make a tensor with too little memory).
int64_t checked_numel(const std::vector<int64_t>& sizes);

}  // namespace shmccl::detail
