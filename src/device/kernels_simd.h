// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The loops shared by the AVX2 and AVX-512 kernels, written once over a vector-traits type V.
// Include this only from an ISA file, after its `#pragma GCC target`, so the loops are compiled
// for that ISA; instantiated with the file's internal traits types, they stay internal too. Add no
// include here that the ISA files do not make before their pragma: an inline function first seen
// under the pragma would be compiled for the ISA and could be the copy the linker keeps.
//
// V provides: Elem (the stored element), Vec, kLanes, kIsFloat, kIsBool, kHasMul;
// load(const Elem*) -> Vec, store(Elem*, Vec); add, sub, min, max and, where present, mul and div
// (floats) with exactly the generic kernels' semantics; from_int(int) -> Vec for floats.
#pragma once

#include <cstddef>

#include "device/kernels_impl.h"

namespace shmccl::kernels::detail::simd {

// bfloat16 for reductions, kept interleaved: a bfloat16 is the upper half of a float32, so a vector
// of 2 * Math::kLanes bfloat16 splits into its even elements (shifted up) and its odd ones (masked)
// as two float32 vectors, and joins back by blending, with no lane-crossing widen or narrow.
// Bits provides split(const uint16_t*, Vec& even, Vec& odd) and join(uint16_t*, Vec even, Vec odd)
// (rounding to nearest even, NaNs as half.hpp). Elements are paired differently from the
// contiguous layout, which only an element-wise op may ignore: reduce and binary, not casts.
template <class Math, class Bits>
struct InterleavedBF16 {
  using Elem = uint16_t;
  using Half = typename Math::Vec;
  struct Vec {
    Half even;
    Half odd;
  };
  static constexpr size_t kLanes = 2 * Math::kLanes;
  static constexpr bool kIsFloat = true;
  static constexpr bool kIsBool = false;
  static constexpr bool kHasMul = true;
  static Vec load(const uint16_t* p) {
    Vec v;
    Bits::split(p, v.even, v.odd);
    return v;
  }
  static void store(uint16_t* p, Vec v) { Bits::join(p, v.even, v.odd); }
  // The first n (< kLanes) elements, where Bits can mask (lanes past n read as 0, never written).
  static Vec load_partial(const uint16_t* p, size_t n) requires requires(Half& half) {
    Bits::split_partial(p, n, half, half);
  }
  {
    Vec v;
    Bits::split_partial(p, n, v.even, v.odd);
    return v;
  }
  static void store_partial(uint16_t* p, Vec v, size_t n) requires requires {
    Bits::join_partial(p, v.even, v.odd, n);
  }
  { Bits::join_partial(p, v.even, v.odd, n); }
  static Vec add(Vec a, Vec b) { return {Math::add(a.even, b.even), Math::add(a.odd, b.odd)}; }
  static Vec sub(Vec a, Vec b) { return {Math::sub(a.even, b.even), Math::sub(a.odd, b.odd)}; }
  static Vec mul(Vec a, Vec b) { return {Math::mul(a.even, b.even), Math::mul(a.odd, b.odd)}; }
  static Vec div(Vec a, Vec b) { return {Math::div(a.even, b.even), Math::div(a.odd, b.odd)}; }
  static Vec max(Vec a, Vec b) { return {Math::max(a.even, b.even), Math::max(a.odd, b.odd)}; }
  static Vec min(Vec a, Vec b) { return {Math::min(a.even, b.even), Math::min(a.odd, b.odd)}; }
  static Vec from_int(int n) { return {Math::from_int(n), Math::from_int(n)}; }
};

// dst[i] = finish(src0[i] combine src1[i] ... combine srcN-1[i]) for whole vectors in [begin, end);
// returns where it stopped (the caller finishes the tail). Reads all sources of a block before
// storing it, so dst may be one of the sources.
template <class V, class Combine, class Finish>
size_t reduce_loop(void* dst, const void* const* srcs, int num_srcs, size_t begin, size_t end,
                   Combine combine, Finish finish) {
  using Elem = typename V::Elem;
  using Vec = typename V::Vec;
  constexpr size_t kLanes = V::kLanes;
  auto* out = static_cast<Elem*>(dst);
  const auto* first = static_cast<const Elem*>(srcs[0]);
  size_t i = begin;
  // Four independent accumulators hide the latency of the ops and the loads.
  for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
    Vec a0 = V::load(first + i);
    Vec a1 = V::load(first + i + kLanes);
    Vec a2 = V::load(first + i + 2 * kLanes);
    Vec a3 = V::load(first + i + 3 * kLanes);
    for (int s = 1; s < num_srcs; ++s) {
      const Elem* src = static_cast<const Elem*>(srcs[s]) + i;
      a0 = combine(a0, V::load(src));
      a1 = combine(a1, V::load(src + kLanes));
      a2 = combine(a2, V::load(src + 2 * kLanes));
      a3 = combine(a3, V::load(src + 3 * kLanes));
    }
    V::store(out + i, finish(a0));
    V::store(out + i + kLanes, finish(a1));
    V::store(out + i + 2 * kLanes, finish(a2));
    V::store(out + i + 3 * kLanes, finish(a3));
  }
  for (; i + kLanes <= end; i += kLanes) {
    Vec a = V::load(first + i);
    for (int s = 1; s < num_srcs; ++s)
      a = combine(a, V::load(static_cast<const Elem*>(srcs[s]) + i));
    V::store(out + i, finish(a));
  }
  // Traits with masked loads and stores finish the tail as one partial vector.
  if constexpr (requires(const Elem* p, Elem* q, Vec v, size_t n) {
                  V::load_partial(p, n);
                  V::store_partial(q, v, n);
                }) {
    if (i < end) {
      const size_t n = end - i;
      Vec a = V::load_partial(first + i, n);
      for (int s = 1; s < num_srcs; ++s)
        a = combine(a, V::load_partial(static_cast<const Elem*>(srcs[s]) + i, n));
      V::store_partial(out + i, finish(a), n);
      i = end;
    }
  }
  return i;
}

template <class V>
bool reduce_with(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
                 size_t count) {
  using Vec = typename V::Vec;
  const auto same = [](Vec a) { return a; };
  const auto add = [](Vec a, Vec b) { return V::add(a, b); };
  size_t done = 0;
  switch (op) {
    case ReduceOp::SUM:
      done = reduce_loop<V>(dst, srcs, num_srcs, 0, count, add, same);
      break;
    case ReduceOp::PRODUCT:
      if constexpr (!V::kHasMul) {
        return false;
      } else {
        done = reduce_loop<V>(
            dst, srcs, num_srcs, 0, count, [](Vec a, Vec b) { return V::mul(a, b); }, same);
      }
      break;
    case ReduceOp::MIN:
      done = reduce_loop<V>(
          dst, srcs, num_srcs, 0, count, [](Vec a, Vec b) { return V::min(a, b); }, same);
      break;
    case ReduceOp::MAX:
      done = reduce_loop<V>(
          dst, srcs, num_srcs, 0, count, [](Vec a, Vec b) { return V::max(a, b); }, same);
      break;
    case ReduceOp::AVG:
      if constexpr (V::kIsBool) {
        done = reduce_loop<V>(dst, srcs, num_srcs, 0, count, add, same);
      } else if constexpr (V::kIsFloat) {
        const Vec divisor = V::from_int(num_srcs);
        done = reduce_loop<V>(dst, srcs, num_srcs, 0, count, add,
                              [divisor](Vec sum) { return V::div(sum, divisor); });
      } else {
        // No vector integer division: sum a chunk, then divide it while it is still in L1.
        constexpr size_t kChunk = 2048;
        for (size_t begin = 0; begin < count; begin += kChunk) {
          const size_t end = count - begin < kChunk ? count : begin + kChunk;
          const size_t vector_end = reduce_loop<V>(dst, srcs, num_srcs, begin, end, add, same);
          generic_reduce(ReduceOp::SUM, type, dst, srcs, num_srcs, vector_end, end);
          generic_divide(type, dst, begin, end, num_srcs);
        }
        return true;
      }
      break;
  }
  generic_reduce(op, type, dst, srcs, num_srcs, done, count);
  return true;
}

// kSub for every non-bool type, kDiv for floats; add/mul/max/min go through reduce_with.
template <class V>
bool binary_with(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b,
                 size_t count) {
  using Vec = typename V::Vec;
  const void* const srcs[2] = {a, b};
  const auto same = [](Vec v) { return v; };
  size_t done = 0;
  if constexpr (V::kIsBool) {
    return false;
  } else if (op == BinaryOp::kSub) {
    done = reduce_loop<V>(
        dst, srcs, 2, 0, count, [](Vec x, Vec y) { return V::sub(x, y); }, same);
  } else if (op == BinaryOp::kDiv) {
    if constexpr (!V::kIsFloat) {
      return false;
    } else {
      done = reduce_loop<V>(
          dst, srcs, 2, 0, count, [](Vec x, Vec y) { return V::div(x, y); }, same);
    }
  } else {
    return false;
  }
  generic_binary(op, type, dst, a, b, done, count);
  return true;
}

// Conversion between two traits with the same Vec (float32 and a 16-bit float).
template <class To, class From>
void cast_with(void* dst, ScalarType dst_type, const void* src, ScalarType src_type, size_t count) {
  static_assert(To::kLanes == From::kLanes);
  auto* out = static_cast<typename To::Elem*>(dst);
  const auto* in = static_cast<const typename From::Elem*>(src);
  constexpr size_t kLanes = To::kLanes;
  size_t i = 0;
  for (; i + 2 * kLanes <= count; i += 2 * kLanes) {
    const auto v0 = From::load(in + i);
    const auto v1 = From::load(in + i + kLanes);
    To::store(out + i, v0);
    To::store(out + i + kLanes, v1);
  }
  for (; i + kLanes <= count; i += kLanes)
    To::store(out + i, From::load(in + i));
  generic_cast(out + i, dst_type, in + i, src_type, count - i);
}

// Dtype dispatch over a family of traits: a struct naming one traits type per dtype (Bool, I8, U8,
// I16, I32, I64, F16, BF16, F32, F64; BF16Elementwise for reduce and binary, F16Arith for the
// arithmetic ops).
template <class F>
bool reduce_any(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
                size_t count) {
  switch (type) {
    case ScalarType::Bool:
      return reduce_with<typename F::Bool>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Int8:
      return reduce_with<typename F::I8>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::UInt8:
      return reduce_with<typename F::U8>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Int16:
      return reduce_with<typename F::I16>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Int32:
      return reduce_with<typename F::I32>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Int64:
      return reduce_with<typename F::I64>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Float16:
      if (op == ReduceOp::MIN || op == ReduceOp::MAX)
        return reduce_with<typename F::F16>(op, type, dst, srcs, num_srcs, count);
      return reduce_with<typename F::F16Arith>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::BFloat16:
      return reduce_with<typename F::BF16Elementwise>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Float32:
      return reduce_with<typename F::F32>(op, type, dst, srcs, num_srcs, count);
    case ScalarType::Float64:
      return reduce_with<typename F::F64>(op, type, dst, srcs, num_srcs, count);
  }
  return false;
}

template <class F>
bool binary_any(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b,
                size_t count) {
  switch (type) {
    case ScalarType::Bool:
      return false;
    case ScalarType::Int8:
      return binary_with<typename F::I8>(op, type, dst, a, b, count);
    case ScalarType::UInt8:
      return binary_with<typename F::U8>(op, type, dst, a, b, count);
    case ScalarType::Int16:
      return binary_with<typename F::I16>(op, type, dst, a, b, count);
    case ScalarType::Int32:
      return binary_with<typename F::I32>(op, type, dst, a, b, count);
    case ScalarType::Int64:
      return binary_with<typename F::I64>(op, type, dst, a, b, count);
    case ScalarType::Float16:
      return binary_with<typename F::F16Arith>(op, type, dst, a, b, count);
    case ScalarType::BFloat16:
      return binary_with<typename F::BF16Elementwise>(op, type, dst, a, b, count);
    case ScalarType::Float32:
      return binary_with<typename F::F32>(op, type, dst, a, b, count);
    case ScalarType::Float64:
      return binary_with<typename F::F64>(op, type, dst, a, b, count);
  }
  return false;
}

// float32 <-> float16 / bfloat16; other pairs are generic.
template <class F>
bool cast_any(void* dst, ScalarType dst_type, const void* src, ScalarType src_type, size_t count) {
  using S = ScalarType;
  if (dst_type == S::Float16 && src_type == S::Float32) {
    cast_with<typename F::F16, typename F::F32>(dst, dst_type, src, src_type, count);
  } else if (dst_type == S::Float32 && src_type == S::Float16) {
    cast_with<typename F::F32, typename F::F16>(dst, dst_type, src, src_type, count);
  } else if (dst_type == S::BFloat16 && src_type == S::Float32) {
    cast_with<typename F::BF16, typename F::F32>(dst, dst_type, src, src_type, count);
  } else if (dst_type == S::Float32 && src_type == S::BFloat16) {
    cast_with<typename F::F32, typename F::BF16>(dst, dst_type, src, src_type, count);
  } else {
    return false;
  }
  return true;
}

}  // namespace shmccl::kernels::detail::simd
