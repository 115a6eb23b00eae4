// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// AVX-512 (F, BW, VL) kernels. Everything after the pragma is compiled for AVX-512, so the
// library needs no special flags; all of it has internal linkage except avx512_table(), and the
// headers come first so no inline function of theirs is emitted with AVX-512 instructions.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "device/kernels_impl.h"
#include "shmccl/dtype.hpp"
#include "shmccl/half.hpp"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")
// The function-pointer thunk of a captureless lambda does not get the target and -Wpsabi warns
// about it; nothing calls it, and every vector-passing function here is internal.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 warns about the intrinsics' own `__Y = __Y` idiom once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "device/kernels_simd.h"

namespace shmccl::kernels::detail {
namespace {

// float32 arithmetic, shared by float32 and the 16-bit floats computed in float32.
struct Float32Math {
  using Vec = __m512;
  static constexpr size_t kLanes = 16;
  static constexpr bool kIsFloat = true;
  static constexpr bool kIsBool = false;
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  // maxps returns b unless a > b, so a NaN b wins; a NaN in a is put back by the blend.
  static Vec max(Vec a, Vec b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Vec min(Vec a, Vec b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Vec from_int(int n) { return _mm512_set1_ps(static_cast<float>(n)); }
};

struct F32 : Float32Math {
  using Elem = float;
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
};

struct F16 : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const Vec v = _mm512_cvtph_ps(h);
    // vcvtph2ps quiets signalling NaNs; half.hpp keeps every NaN bit, so rebuild NaN lanes.
    const __mmask16 nan = _mm256_cmpgt_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7FFF)),
                                                  _mm256_set1_epi16(0x7C00));
    if (nan == 0) [[likely]] {
      return v;
    }
    const __m512i wide = _mm512_cvtepu16_epi32(h);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(wide, _mm512_set1_epi32(0x8000)), 16);
    const __m512i payload = _mm512_slli_epi32(_mm512_and_si512(wide, _mm512_set1_epi32(0x3FF)), 13);
    const __m512i bits =
        _mm512_or_si512(_mm512_or_si512(sign, payload), _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(bits));
  }
  static void store(uint16_t* p, Vec v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // vcvtps2ph quiets NaNs; half.hpp keeps the top payload bits (quiet only if they are 0).
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan != 0) [[unlikely]] {
      const __m512i bits = _mm512_castps_si512(v);
      __m512i payload = _mm512_and_si512(_mm512_srli_epi32(bits, 13), _mm512_set1_epi32(0x3FF));
      const __mmask16 empty = _mm512_testn_epi32_mask(payload, payload);
      payload = _mm512_mask_or_epi32(payload, empty, payload, _mm512_set1_epi32(0x200));
      const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000));
      const __m512i nan_half =
          _mm512_or_si512(_mm512_or_si512(sign, payload), _mm512_set1_epi32(0x7C00));
      h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(nan_half));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
};

// float16 for the arithmetic ops (SUM, PRODUCT, AVG, sub, div): plain conversions. They alter only
// NaNs (vcvtph2ps quiets a signalling one, vcvtps2ph quiets and truncates), and float32
// arithmetic quiets every NaN it touches anyway, so the results are F16's bit for bit. MIN and
// MAX pass a NaN through untouched and take F16.
struct F16Arith : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(uint16_t* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // The first n < 16 elements: masked lanes are neither read nor written.
  static __mmask16 first(size_t n) { return static_cast<__mmask16>((1u << n) - 1); }
  static Vec load_partial(const uint16_t* p, size_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p));
  }
  static void store_partial(uint16_t* p, Vec v, size_t n) {
    _mm256_mask_storeu_epi16(p, first(n),
                             _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// The bit operations of InterleavedBF16 on 32 bfloat16.
struct BF16Bits {
  static void split(const uint16_t* p, __m512& even, __m512& odd) {
    const __m512i v = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000))));
  }
  // Integer round-to-nearest-even, not vcvtneps2bf16: that one flushes denormals to zero.
  // The bfloat16 nearest to v in the upper half of each 32-bit lane (the lower half is garbage).
  static __m512i round_up_half(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i upper = _mm512_srli_epi32(bits, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(upper, _mm512_set1_epi32(1)));
    const __m512i rounded = _mm512_add_epi32(bits, bias);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan == 0) [[likely]] {
      return rounded;
    }
    // NaN: truncate, setting the quiet bit only when the kept payload is 0 (as half.hpp does).
    const __mmask16 empty = _mm512_testn_epi32_mask(upper, _mm512_set1_epi32(0x7F));
    const __m512i kept = _mm512_mask_or_epi32(bits, empty, bits, _mm512_set1_epi32(0x400000));
    return _mm512_mask_mov_epi32(rounded, nan, kept);
  }
  static __m512i pack(__m512 even, __m512 odd) {
    const __m512i low = _mm512_srli_epi32(round_up_half(even), 16);
    return _mm512_mask_blend_epi16(0xAAAAAAAA, low, round_up_half(odd));
  }
  static void join(uint16_t* p, __m512 even, __m512 odd) {
    _mm512_storeu_si512(p, pack(even, odd));
  }
  // The first n < 32 elements: masked lanes are neither read nor written (no fault past the end).
  static __mmask32 first(size_t n) { return (__mmask32{1} << n) - 1; }
  static void split_partial(const uint16_t* p, size_t n, __m512& even, __m512& odd) {
    const __m512i v = _mm512_maskz_loadu_epi16(first(n), p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000))));
  }
  static void join_partial(uint16_t* p, __m512 even, __m512 odd, size_t n) {
    _mm512_mask_storeu_epi16(p, first(n), pack(even, odd));
  }
};

// Contiguous, for casts: the rounding of BF16Bits, then narrowed to 16 bits.
struct BF16 : Float32Math {
  using Elem = uint16_t;
  static Vec load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store(uint16_t* p, Vec v) {
    const __m512i result = _mm512_srli_epi32(BF16Bits::round_up_half(v), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(result));
  }
};

struct F64 {
  using Elem = double;
  using Vec = __m512d;
  static constexpr size_t kLanes = 8;
  static constexpr bool kIsFloat = true;
  static constexpr bool kIsBool = false;
  static constexpr bool kHasMul = true;
  static Vec load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, Vec v) { _mm512_storeu_pd(p, v); }
  static Vec add(Vec a, Vec b) { return _mm512_add_pd(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_pd(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_pd(a, b); }
  static Vec max(Vec a, Vec b) {
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Vec min(Vec a, Vec b) {
    return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  }
  static Vec from_int(int n) { return _mm512_set1_pd(static_cast<double>(n)); }
};

template <typename T>
struct IntBase {
  using Elem = T;
  using Vec = __m512i;
  static constexpr size_t kLanes = 64 / sizeof(T);
  static constexpr bool kIsFloat = false;
  static constexpr bool kIsBool = false;
  static Vec load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, Vec v) { _mm512_storeu_si512(p, v); }
};

// No 8-bit multiply: int8/uint8 PRODUCT stays generic.
struct I8 : IntBase<int8_t> {
  static constexpr bool kHasMul = false;
  static Vec add(Vec a, Vec b) { return _mm512_add_epi8(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm512_min_epi8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epi8(a, b); }
};

struct U8 : IntBase<uint8_t> {
  static constexpr bool kHasMul = false;
  static Vec add(Vec a, Vec b) { return _mm512_add_epi8(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm512_min_epu8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epu8(a, b); }
};

// bool bytes are normalized to 0/1 on load; then or = max and and = min.
struct Bool : IntBase<uint8_t> {
  static constexpr bool kIsBool = true;
  static constexpr bool kHasMul = true;
  static Vec load(const uint8_t* p) {
    return _mm512_min_epu8(_mm512_loadu_si512(p), _mm512_set1_epi8(1));
  }
  static Vec add(Vec a, Vec b) { return _mm512_max_epu8(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_min_epu8(a, b); }
  static Vec min(Vec a, Vec b) { return _mm512_min_epu8(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epu8(a, b); }
};

struct I16 : IntBase<int16_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm512_add_epi16(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi16(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mullo_epi16(a, b); }
  static Vec min(Vec a, Vec b) { return _mm512_min_epi16(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epi16(a, b); }
};

struct I32 : IntBase<int32_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi32(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mullo_epi32(a, b); }
  static Vec min(Vec a, Vec b) { return _mm512_min_epi32(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epi32(a, b); }
};

struct I64 : IntBase<int64_t> {
  static constexpr bool kHasMul = true;
  static Vec add(Vec a, Vec b) { return _mm512_add_epi64(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi64(a, b); }
  // vpmullq needs AVX512DQ: build the low 64 bits of the product from 32x32->64 multiplies.
  static Vec mul(Vec a, Vec b) {
    const Vec low = _mm512_mul_epu32(a, b);
    const Vec cross = _mm512_add_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), b),
                                       _mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)));
    return _mm512_add_epi64(low, _mm512_slli_epi64(cross, 32));
  }
  static Vec min(Vec a, Vec b) { return _mm512_min_epi64(a, b); }
  static Vec max(Vec a, Vec b) { return _mm512_max_epi64(a, b); }
};

struct Avx512 {
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
  __m512i pattern;
  switch (element_size(type)) {
    case 1: {
      uint8_t byte;
      std::memcpy(&byte, value, 1);
      if (type == ScalarType::Bool) byte = byte != 0;
      pattern = _mm512_set1_epi8(static_cast<char>(byte));
      break;
    }
    case 2: {
      int16_t element;
      std::memcpy(&element, value, 2);
      pattern = _mm512_set1_epi16(element);
      break;
    }
    case 4: {
      int32_t element;
      std::memcpy(&element, value, 4);
      pattern = _mm512_set1_epi32(element);
      break;
    }
    default: {
      long long element;  // NOLINT(runtime/int): the intrinsic's type
      std::memcpy(&element, value, 8);
      pattern = _mm512_set1_epi64(element);
      break;
    }
  }
  // 64 bytes hold a whole number of elements, so the pattern lines up at every 64-byte step.
  auto* out = static_cast<char*>(dst);
  const size_t bytes = count * element_size(type);
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    _mm512_storeu_si512(out + i, pattern);
    _mm512_storeu_si512(out + i + 64, pattern);
    _mm512_storeu_si512(out + i + 128, pattern);
    _mm512_storeu_si512(out + i + 192, pattern);
  }
  for (; i + 64 <= bytes; i += 64)
    _mm512_storeu_si512(out + i, pattern);
  if (i < bytes) _mm512_mask_storeu_epi8(out + i, (__mmask64{1} << (bytes - i)) - 1, pattern);
  return true;
}

void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  // Streaming stores want whole aligned lines: copy up to the first 64-byte boundary normally.
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(out) & 63)) & 63;
  if (head >= bytes) {
    std::memcpy(out, in, bytes);
    return;
  }
  std::memcpy(out, in, head);
  out += head;
  in += head;
  bytes -= head;
  for (; bytes >= 256; bytes -= 256, in += 256, out += 256) {
    const __m512i v0 = _mm512_loadu_si512(in);
    const __m512i v1 = _mm512_loadu_si512(in + 64);
    const __m512i v2 = _mm512_loadu_si512(in + 128);
    const __m512i v3 = _mm512_loadu_si512(in + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), v0);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 64), v1);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 128), v2);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 192), v3);
  }
  for (; bytes >= 64; bytes -= 64, in += 64, out += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), _mm512_loadu_si512(in));
  }
  std::memcpy(out, in, bytes);
  // Streaming stores are weakly ordered: fence them before whatever publishes the data.
  _mm_sfence();
}

constexpr IsaTable kTable = {simd::reduce_any<Avx512>, simd::binary_any<Avx512>,
                             simd::cast_any<Avx512>, fill, stream_copy};

}  // namespace
}  // namespace shmccl::kernels::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace shmccl::kernels::detail {

// Outside the pragma: compiled for the baseline ISA like its callers.
const IsaTable& avx512_table() noexcept {
  return kTable;
}

}  // namespace shmccl::kernels::detail
