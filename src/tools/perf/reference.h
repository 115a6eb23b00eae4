// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The data of a checked run and its host reference. Every rank's input element i is a
// deterministic function of (rank, i): small integers, chosen per dtype, reduce op and rank count
// so that every result is exact in every dtype and independent of the order of the reduction:
//   - sum, min, max, avg and the non-reducing ops: integers in [-m, m] ([0, m] for uint8) with
//     n * m within the dtype's exact range (256 for bfloat16, 2048 for float16, 126 for int8, ...),
//     so that no sum rounds or overflows; avg is then the exact sum divided once (float) or
//     truncated (integers), as the kernels compute it.
//   - prod: one rank contributes 2 per element, the others 1, -1 or (rarely) 0: |product| <= 2.
//   - bool: 0/1, mostly 0 for the or-like ops (sum, max, avg), mostly 1 for the and-like ones.
// Outputs are pre-filled with a poison no result can equal (NaN, the type's maximum, the byte 0xFF
// for bool), so an element the collective never wrote counts as wrong. Functions take host memory
// of the pattern's dtype. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>

#include "shmccl/dtype.hpp"
#include "shmccl/reduce_op.hpp"

namespace shmccl::perf {

class DataPattern {
 public:
  // `reducing`: the values are combined by `op` over `world` ranks; otherwise they are only
  // moved, and `op` is ignored.
  DataPattern(ScalarType dtype, ReduceOp op, bool reducing, int world);

  ScalarType dtype() const { return dtype_; }
  ReduceOp op() const { return op_; }
  int world() const { return world_; }

  // Rank's input element at global index `index` (an index into the collective's full buffer).
  int64_t value(int rank, int64_t index) const;

  // data[k] = value(rank, first + k) for k in [0, count).
  void fill(void* data, int64_t count, int rank, int64_t first) const;
  // data[k] = the poison, for k in [0, count).
  void fill_poison(void* data, int64_t count) const;

  // Elements of data[0, count) that differ from value(rank, first + k): an all-gather's slice of
  // `rank`, or a broadcast from `rank`.
  int64_t count_wrong_values(const void* data, int64_t count, int rank, int64_t first) const;
  // Elements of data[0, count) that differ from the op over all ranks of value(r, first + k).
  int64_t count_wrong_reduced(const void* data, int64_t count, int64_t first) const;

 private:
  enum class Shape { kRange, kProduct, kBoolAny, kBoolAll, kBoolBits };

  ScalarType dtype_;
  ReduceOp op_;
  int world_;
  Shape shape_;
  int64_t magnitude_;  // kRange: values in [-m, m], or [0, m] when !signed_
  bool signed_;
};

}  // namespace shmccl::perf
