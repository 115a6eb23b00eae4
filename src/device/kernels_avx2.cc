// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// AVX2 + F16C kernels. Everything after the pragma is compiled for AVX2, so the library needs no
// special flags; all of it has internal linkage except avx2_table(), and the headers come first
// so no inline function of theirs is emitted with AVX2 instructions.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "device/kernels_impl.h"
#include "shmccl/dtype.hpp"
#include "shmccl/half.hpp"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC target("avx2,f16c,fma")
// The function-pointer thunk of a captureless lambda does not get the target and -Wpsabi warns
// about it; nothing calls it, and every vector-passing function here is internal.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "device/kernels_simd.h"

namespace shmccl::kernels::detail {
namespace {

// 16-bit lanes of `wide` (each known to fit) packed into 8 x 16 bits.
__m128i pack_epi32(__m256i wide) {
  return _mm_packus_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
}

// float32 arithmetic, shared by float32 and the 16-bit floats computed in float32.
struct Float32Math {
  using Vec = __m256;
  static constexpr size_t kLanes = 8;
  static constexpr bool kIsFloat = true;
  static constexpr bool kIsBool = false;
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  // maxps returns b unless a > b, so a NaN b wins; a NaN in a is put back by the blend.
  static Vec max(Vec a, Vec b) {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  static Vec min(Vec a, Vec b) {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  static Vec from_int(int n) { return _mm256_set1_ps(static_cast<float>(n)); }
};

struct F32 : Float32Math {
  using Elem = float;
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
};

struct F16 : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const Vec v = _mm256_cvtph_ps(h);
    // vcvtph2ps quiets signalling NaNs; half.hpp keeps every NaN bit, so rebuild NaN lanes.
    const __m128i magnitude = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(magnitude, _mm_set1_epi16(0x7C00))) == 0) [[likely]] {
      return v;
    }
    const __m256i wide = _mm256_cvtepu16_epi32(h);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x7FFF)),
                                           _mm256_set1_epi32(0x7C00));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x8000)), 16);
    const __m256i payload = _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x3FF)), 13);
    const __m256i bits =
        _mm256_or_si256(_mm256_or_si256(sign, payload), _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
  }
  static void store(uint16_t* p, Vec v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // vcvtps2ph quiets NaNs; half.hpp keeps the top payload bits (quiet only if they are 0).
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan) != 0) [[unlikely]] {
      const __m256i bits = _mm256_castps_si256(v);
      __m256i payload = _mm256_and_si256(_mm256_srli_epi32(bits, 13), _mm256_set1_epi32(0x3FF));
      const __m256i empty = _mm256_cmpeq_epi32(payload, _mm256_setzero_si256());
      payload = _mm256_or_si256(payload, _mm256_and_si256(empty, _mm256_set1_epi32(0x200)));
      const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000));
      const __m256i nan_half =
          _mm256_or_si256(_mm256_or_si256(sign, payload), _mm256_set1_epi32(0x7C00));
      const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                            _mm256_extractf128_si256(_mm256_castps_si256(nan), 1));
      h = _mm_blendv_epi8(h, pack_epi32(nan_half), nan16);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
};

// float16 for the arithmetic ops: plain conversions (see kernels_avx512.cc's F16Arith).
struct F16Arith : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(uint16_t* p, Vec v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// The bit operations of InterleavedBF16 on 16 bfloat16.
struct BF16Bits {
  static void split(const uint16_t* p, __m256& even, __m256& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000))));
  }
  // The bfloat16 nearest to v in the upper half of each 32-bit lane (the lower half is garbage).
  static __m256i round_up_half(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i upper = _mm256_srli_epi32(bits, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(upper, _mm256_set1_epi32(1)));
    const __m256i rounded = _mm256_add_epi32(bits, bias);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan) == 0) [[likely]] {
      return rounded;
    }
    // NaN: truncate, setting the quiet bit only when the kept payload is 0 (as half.hpp does).
    const __m256i empty = _mm256_cmpeq_epi32(_mm256_and_si256(upper, _mm256_set1_epi32(0x7F)),
                                             _mm256_setzero_si256());
    const __m256i kept =
        _mm256_or_si256(bits, _mm256_and_si256(empty, _mm256_set1_epi32(0x400000)));
    return _mm256_blendv_epi8(rounded, kept, _mm256_castps_si256(nan));
  }
  static void join(uint16_t* p, __m256 even, __m256 odd) {
    const __m256i low = _mm256_srli_epi32(round_up_half(even), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_blend_epi16(low, round_up_half(odd), 0xAA));
  }
};

// Contiguous, for casts: the rounding of BF16Bits, then narrowed to 16 bits.
struct BF16 : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void store(uint16_t* p, Vec v) {
    const __m256i result = _mm256_srli_epi32(BF16Bits::round_up_half(v), 16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), pack_epi32(result));
  }
};

struct F64 {
  using Elem = double;
  using Vec = __m256d;
  static constexpr size_t kLanes = 4;
  static constexpr bool kIsFloat = true;
  static constexpr bool kIsBool = false;
  static constexpr bool kHasMul = true;
  static Vec load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, Vec v) { _mm256_storeu_pd(p, v); }
  static Vec add(Vec a, Vec b) { return _mm256_add_pd(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_pd(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_pd(a, b); }
  static Vec max(Vec a, Vec b) {
    return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  static Vec min(Vec a, Vec b) {
    return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  static Vec from_int(int n) { return _mm256_set1_pd(static_cast<double>(n)); }
};

template <typename T>
struct IntBase {
  using Elem = T;
  using Vec = __m256i;
  static constexpr size_t kLanes = 32 / sizeof(T);
  static constexpr bool kIsFloat = false;
  static constexpr bool kIsBool = false;
  static Vec load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(T* p, Vec v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
};

// No 8-bit multiply: int8/uint8 PRODUCT stays generic.
struct I8 : IntBase<int8_t> {
  static constexpr bool kHasMul = false;
  static Vec add(Vec a, Vec b) { return _mm256_add_epi8(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_epi8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm256_min_epi8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_epi8(a, b); }
};

struct U8 : IntBase<uint8_t> {
  static constexpr bool kHasMul = false;
  static Vec add(Vec a, Vec b) { return _mm256_add_epi8(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_epi8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm256_min_epu8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_epu8(a, b); }
};

// bool bytes are normalized to 0/1 on load; then or = max and and = min.
struct Bool : IntBase<uint8_t> {
  static constexpr bool kIsBool = true;
  static constexpr bool kHasMul = true;
  static Vec load(const uint8_t* p) {
    return _mm256_min_epu8(IntBase::load(p), _mm256_set1_epi8(1));
  }
  static Vec add(Vec a, Vec b) { return _mm256_max_epu8(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_min_epu8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm256_min_epu8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_epu8(a, b); }
};

struct I16 : IntBase<int16_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm256_add_epi16(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_epi16(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mullo_epi16(a, b); }
  static Vec min(Vec a, Vec b) { return _mm256_min_epi16(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_epi16(a, b); }
};

struct I32 : IntBase<int32_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_epi32(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mullo_epi32(a, b); }
  static Vec min(Vec a, Vec b) { return _mm256_min_epi32(a, b); }
  static Vec max(Vec a, Vec b) { return _mm256_max_epi32(a, b); }
};

struct I64 : IntBase<int64_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm256_add_epi64(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_epi64(a, b); }
  // The low 64 bits of the product from 32x32->64 multiplies.
  static Vec mul(Vec a, Vec b) {
    const Vec low = _mm256_mul_epu32(a, b);
    const Vec cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                       _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
  }
  // No vpminsq/vpmaxsq before AVX-512.
  static Vec min(Vec a, Vec b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
  static Vec max(Vec a, Vec b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
};

struct Avx2 {
  using Bool = detail::Bool;
  using I8 = detail::I8;
  using U8 = detail::U8;
  using I16 = detail::I16;
  using I32 = detail::I32;
  using I64 = detail::I64;
  using F16 = detail::F16;
  using F16Arith = detail::F16Arith;
  using BF16 = detail::BF16;
  using BF16Elementwise = simd::InterleavedBF16<detail::F32, detail::BF16Bits>;
  using F32 = detail::F32;
  using F64 = detail::F64;
};

bool fill(void* dst, ScalarType type, size_t count, const void* value) {
  const size_t size = element_size(type);
  __m256i pattern;
  switch (size) {
    case 1: {
      uint8_t byte;
      std::memcpy(&byte, value, 1);
      if (type == ScalarType::Bool) byte = byte != 0;
      pattern = _mm256_set1_epi8(static_cast<char>(byte));
      break;
    }
    case 2: {
      int16_t element;
      std::memcpy(&element, value, 2);
      pattern = _mm256_set1_epi16(element);
      break;
    }
    case 4: {
      int32_t element;
      std::memcpy(&element, value, 4);
      pattern = _mm256_set1_epi32(element);
      break;
    }
    default: {
      long long element;  // NOLINT(runtime/int): the intrinsic's type
      std::memcpy(&element, value, 8);
      pattern = _mm256_set1_epi64x(element);
      break;
    }
  }
  // 32 bytes hold a whole number of elements, so the pattern lines up at every 32-byte step.
  auto* out = static_cast<char*>(dst);
  const size_t bytes = count * size;
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), pattern);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 32), pattern);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 64), pattern);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 96), pattern);
  }
  for (; i + 32 <= bytes; i += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), pattern);
  generic_fill(out + i, type, (bytes - i) / size, value);
  return true;
}

void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  // Streaming stores want aligned destinations: copy up to the first 32-byte boundary normally.
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(out) & 31)) & 31;
  if (head >= bytes) {
    std::memcpy(out, in, bytes);
    return;
  }
  std::memcpy(out, in, head);
  out += head;
  in += head;
  bytes -= head;
  for (; bytes >= 128; bytes -= 128, in += 128, out += 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), v0);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + 32), v1);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + 64), v2);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + 96), v3);
  }
  for (; bytes >= 32; bytes -= 32, in += 32, out += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  }
  std::memcpy(out, in, bytes);
  // Streaming stores are weakly ordered: fence them before whatever publishes the data.
  _mm_sfence();
}

constexpr IsaTable kTable = {simd::reduce_any<Avx2>, simd::binary_any<Avx2>, simd::cast_any<Avx2>,
                             fill, stream_copy};

}  // namespace
}  // namespace shmccl::kernels::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace shmccl::kernels::detail {

// Outside the pragma: compiled for the baseline ISA like its callers.
const IsaTable& avx2_table() noexcept {
  return kTable;
}

}  // namespace shmccl::kernels::detail
