// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The device's compute kernels on raw memory: fill, cast, element-wise binary ops, n-way
// reductions and copies, for every dtype. Vectorized paths (AVX-512, AVX2+F16C) are chosen at run
// time from what the CPU supports, capped by SHMCCL_KERNEL_ISA; the portable path is always
// available and tested against the vector ones: every ISA gives the same bits, except for which
// NaN payload an add/mul/div of two NaNs keeps. float16/bfloat16 arithmetic happens in float32 and
// rounds once, to nearest even, exactly as shmccl::Half / BFloat16 do. Integer arithmetic wraps in
// the dtype, as in torch (so AVG divides the wrapped sum, truncating). MIN/MAX propagate NaN (the
// first one in source order). All functions are thread-safe and never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shmccl/dtype.hpp"
#include "shmccl/reduce_op.hpp"

namespace shmccl::kernels {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
const char* isa_name(Isa isa) noexcept;  // "generic", "avx2", "avx512"

// The best ISA this CPU runs (AVX-512 needs F/BW/VL; AVX2 needs FMA and F16C too).
Isa detected_isa() noexcept;
// The ISA in use: min(detected, SHMCCL_KERNEL_ISA).
Isa active_isa() noexcept;
// Tests and benchmarks: switch the ISA in use. InvalidArgument when the CPU lacks it.
void set_active_isa(Isa isa);
// Tests: forget set_active_isa; the next use reads SHMCCL_KERNEL_ISA again (after
// config::reload()).
void reset_active_isa() noexcept;

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMax, kMin };

// dst[0..count) = *value, where value points at one element of `type`.
void fill(void* dst, ScalarType type, size_t count, const void* value);

// dst[i] = (dst_type) src[i], with C++ conversion semantics (float to integer truncates toward
// zero; NaN or out-of-range float to integer gives 0 / the saturated value; to bool: != 0).
// float64 and integers convert to float16/bfloat16 through float32, as c10::Half does.
void cast(void* dst, ScalarType dst_type, const void* src, ScalarType src_type, size_t count);

// dst[i] = a[i] op b[i]. dst may alias a or b exactly. Integer kDiv truncates; division by zero
// gives 0 for integers. bool: add = or, mul = and, max = or, min = and; sub and div are
// InvalidArgument.
void binary(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b, size_t count);

// dst[i] = op(srcs[0][i], ..., srcs[num_srcs-1][i]); AVG divides the sum by num_srcs. dst may be
// one of the sources (exactly, not partially overlapping). float16/bfloat16 accumulate all sources
// in float32 and round once. num_srcs >= 1.
void reduce(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
            size_t count);

// memcpy; uses non-temporal stores for copies larger than the last-level cache.
void copy(void* dst, const void* src, size_t bytes);

// memcpy with non-temporal (streaming) stores whatever the size: for callers that know the
// destination will not be read soon and the whole operation exceeds the cache (a collective's
// outputs), even when each piece is small. Falls back to memcpy without a vector ISA.
void copy_streaming(void* dst, const void* src, size_t bytes);

namespace detail {
// bytes in [sizeof(Word), 2 * sizeof(Word)]: the first and the last Word, both loaded first.
template <typename Word>
inline void copy_two_words(unsigned char* to, const unsigned char* from, size_t bytes) {
  Word head;
  Word tail;
  std::memcpy(&head, from, sizeof(Word));
  std::memcpy(&tail, from + bytes - sizeof(Word), sizeof(Word));
  std::memcpy(to, &head, sizeof(Word));
  std::memcpy(to + bytes - sizeof(Word), &tail, sizeof(Word));
}
}  // namespace detail

// memcpy of a few bytes (a small collective's payload), inline: 4 to 16 bytes take two
// overlapping loads and two stores instead of a call into the C library (about 25 instructions
// per copy, several per collective). dst and src may overlap.
inline void copy_small(void* dst, const void* src, size_t bytes) {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  if (bytes >= 8 && bytes <= 16) {
    detail::copy_two_words<uint64_t>(to, from, bytes);
  } else if (bytes >= 4 && bytes < 8) {
    detail::copy_two_words<uint32_t>(to, from, bytes);
  } else if (bytes > 0) {
    std::memmove(dst, src, bytes);
  }
}

}  // namespace shmccl::kernels
