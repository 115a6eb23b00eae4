// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// 16-bit floating point element types: shmccl::Half (IEEE 754 binary16) and shmccl::BFloat16
// (the upper half of a float32). Conversions from float round to nearest, ties to even; infinities
// stay infinities and NaN stays NaN with its sign and the top bits of its payload, so every 16-bit
// pattern survives a round trip through float exactly (a NaN whose kept payload bits would all be
// zero becomes a quiet NaN instead of infinity). Both are trivially copyable 2-byte values, usable
// as tensor elements (to_vector<Half>()).
#pragma once

#include <bit>
#include <cstdint>
#include <ostream>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {
namespace detail {

constexpr float half_bits_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

constexpr uint16_t float_to_half_bits(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // Inf or NaN; a NaN keeps its top 10 payload bits.
    uint32_t payload = (magnitude >> 13) & 0x3FFu;
    if (magnitude > 0x7F800000u && payload == 0) payload = 0x200u;
    return static_cast<uint16_t>(sign | 0x7C00u | payload);
  }
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: Inf
  if (magnitude < 0x38800000u) {               // Below 2^-14: a half subnormal or zero.
    if (magnitude < 0x33000000u) return sign;  // Below 2^-25: rounds to zero.
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // in [14, 24]
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15), then round the 13 dropped mantissa bits.
  uint32_t rebiased = magnitude - 0x38000000u;
  rebiased += 0xFFFu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rebiased >> 13));
}

constexpr float bfloat16_bits_to_float(uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

constexpr uint16_t float_to_bfloat16_bits(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: truncate, unless that would leave Inf
    const uint32_t upper = bits >> 16;
    return static_cast<uint16_t>((upper & 0x7Fu) != 0 ? upper : upper | 0x40u);
  }
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace detail

struct FromBits {};
inline constexpr FromBits from_bits{};

// IEEE 754 binary16.
struct Half {
  uint16_t x = 0;
  Half() = default;
  constexpr Half(float value) noexcept : x(detail::float_to_half_bits(value)) {}  // NOLINT
  constexpr Half(uint16_t bits, FromBits) noexcept : x(bits) {}
  constexpr operator float() const noexcept { return detail::half_bits_to_float(x); }  // NOLINT
};

// bfloat16: float32's sign, exponent and top 7 mantissa bits.
struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  constexpr BFloat16(float value) noexcept : x(detail::float_to_bfloat16_bits(value)) {}  // NOLINT
  constexpr BFloat16(uint16_t bits, FromBits) noexcept : x(bits) {}
  constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(x); }  // NOLINT
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

inline std::ostream& operator<<(std::ostream& out, Half value) {
  return out << float(value);
}
inline std::ostream& operator<<(std::ostream& out, BFloat16 value) {
  return out << float(value);
}

}  // namespace shmccl

#pragma GCC visibility pop
