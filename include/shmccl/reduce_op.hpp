// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#pragma once

#include <ostream>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

// Reductions of torch.distributed.ReduceOp. For bool tensors SUM is logical or and PRODUCT
// logical and (as c10d maps them); AVG on integers truncates toward zero, and on bool is an
// InvalidArgument ("Cannot use ReduceOp.AVG with boolean inputs", as torch). float16 and
// bfloat16 accumulate in float32. The values are c10d's RedOpType's, so an integer from torch
// (a config, a binding) converts as it is.
enum class ReduceOp { SUM = 0, AVG = 1, PRODUCT = 2, MIN = 3, MAX = 4 };

const char* reduce_op_name(ReduceOp op) noexcept;  // "sum", "product", "min", "max", "avg"

inline std::ostream& operator<<(std::ostream& out, ReduceOp op) {
  return out << reduce_op_name(op);
}

}  // namespace shmccl

#pragma GCC visibility pop
