// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Private to the kernels: the portable scalar kernels (kernels_generic.cc), which define the exact
// results every vector path must reproduce bit for bit, and the per-ISA tables of vector kernels
// (kernels_avx2.cc, kernels_avx512.cc) that kernels.cc dispatches to.
#pragma once

#include <cstddef>

#include "device/kernels.h"
#include "shmccl/dtype.hpp"
#include "shmccl/reduce_op.hpp"

namespace shmccl::kernels::detail {

// Scalar kernels. `reduce` and `binary` work on the elements [begin, end) so a vector kernel can
// hand its tail over; the others take pointers already offset.
void generic_reduce(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
                    size_t begin, size_t end);
// kSub and kDiv only (add, mul, max and min are two-source reductions).
void generic_binary(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b,
                    size_t begin, size_t end);
void generic_cast(void* dst, ScalarType dst_type, const void* src, ScalarType src_type,
                  size_t count);
void generic_fill(void* dst, ScalarType type, size_t count, const void* value);
// Integer AVG's last step: data[i] /= divisor, truncating.
void generic_divide(ScalarType type, void* data, size_t begin, size_t end, int divisor);

// The vector kernels of one ISA. Each returns false when it has no kernel for the arguments, and
// the caller then runs the generic one; when it returns true it has done all `count` elements.
struct IsaTable {
  bool (*reduce)(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
                 size_t count);
  bool (*binary)(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b,
                 size_t count);
  bool (*cast)(void* dst, ScalarType dst_type, const void* src, ScalarType src_type, size_t count);
  bool (*fill)(void* dst, ScalarType type, size_t count, const void* value);
  // Copy with non-temporal stores, ending with a store fence.
  void (*stream_copy)(void* dst, const void* src, size_t bytes);
};

// Only call these when detected_isa() covers the ISA.
const IsaTable& avx2_table() noexcept;
const IsaTable& avx512_table() noexcept;

}  // namespace shmccl::kernels::detail
