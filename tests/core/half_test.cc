// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Exhaustive checks of shmccl::Half and shmccl::BFloat16: every 16-bit pattern round-trips through
// float, and float -> 16 bits rounds to nearest even as an independent reference computed in
// double says, on ties, subnormals, overflow, zeros, infinities and NaNs.

#include "shmccl/half.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

namespace shmccl {
namespace {

bool is_half_nan(uint16_t h) {
  return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
}
bool is_bfloat16_nan(uint16_t b) {
  return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0;
}

// The value of a half pattern, decoded from the definition of binary16 rather than half.hpp.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// Round |value| (finite) to the nearest binary16, ties to the even pattern; 65536 stands for
// infinity, the value just past the largest finite half (65504).
uint16_t reference_half_magnitude(double magnitude) {
  static const std::vector<double> kValues = [] {
    std::vector<double> values;
    for (uint32_t h = 0; h < 0x7C00; ++h)
      values.push_back(half_value(static_cast<uint16_t>(h)));
    values.push_back(65536.0);  // pattern 0x7C00: Inf
    return values;
  }();
  if (magnitude >= 65536.0) return 0x7C00;
  // The last value <= magnitude and the one after it; the pattern is the index.
  const auto upper = std::upper_bound(kValues.begin(), kValues.end(), magnitude);
  const size_t hi = static_cast<size_t>(upper - kValues.begin());
  const size_t lo = hi - 1;
  if (kValues[lo] == magnitude) return static_cast<uint16_t>(lo);
  const double below = magnitude - kValues[lo];
  const double above = kValues[hi] - magnitude;  // exact: both are short binary fractions
  if (below < above) return static_cast<uint16_t>(lo);
  if (above < below) return static_cast<uint16_t>(hi);
  return static_cast<uint16_t>(lo % 2 == 0 ? lo : hi);
}

// Expected float -> half bits. NaN keeps sign and the top 10 payload bits; if those are all zero
// the result is the quiet NaN (it must not turn into infinity).
uint16_t reference_half(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) {
    const uint16_t payload = static_cast<uint16_t>((bits >> 13) & 0x3FFu);
    return static_cast<uint16_t>(sign | 0x7C00u | (payload != 0 ? payload : 0x200u));
  }
  if (std::isinf(value)) return static_cast<uint16_t>(sign | 0x7C00u);
  return static_cast<uint16_t>(sign | reference_half_magnitude(std::fabs(double{value})));
}

// Expected float -> bfloat16 bits: the two bfloat16 neighbours of the value are its top 16 bits
// and the pattern after; compare distances in double.
uint16_t reference_bfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(value)) {
    const uint16_t upper = static_cast<uint16_t>(bits >> 16);
    return (upper & 0x7Fu) != 0 ? upper : static_cast<uint16_t>(upper | 0x40u);
  }
  if (std::isinf(value)) return static_cast<uint16_t>(bits >> 16);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  const uint32_t lo = magnitude_bits >> 16;
  const uint32_t hi = lo + 1;
  const double magnitude = std::fabs(double{value});
  const double lo_value = double{std::bit_cast<float>(lo << 16)};
  // Past the largest finite bfloat16 the next value is 2^128 (Inf), not representable in float.
  const double hi_value =
      hi == 0x7F80u ? std::ldexp(1.0, 128) : double{std::bit_cast<float>(hi << 16)};
  const double below = magnitude - lo_value;
  const double above = hi_value - magnitude;
  uint32_t result = lo;
  if (above < below || (above == below && lo % 2 == 1)) result = hi;
  return static_cast<uint16_t>(sign | result);
}

// Inputs that stress the rounding: midpoints between neighbouring 16-bit values and the floats
// just around them, zeros, subnormals, the overflow boundary, infinities, NaNs, and a sweep over
// float bit patterns.
std::vector<float> rounding_inputs() {
  std::vector<float> inputs;
  auto add_around = [&](float value) {
    inputs.push_back(value);
    inputs.push_back(std::nextafter(value, std::numeric_limits<float>::infinity()));
    inputs.push_back(std::nextafter(value, -std::numeric_limits<float>::infinity()));
  };
  for (uint32_t h = 0; h < 0x7C00; ++h) {  // every half midpoint, incl. subnormal and overflow
    const double lo = half_value(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7C00 ? 65536.0 : half_value(static_cast<uint16_t>(h + 1));
    add_around(static_cast<float>((lo + hi) / 2));  // exact: needs 12 significant bits
    add_around(static_cast<float>(lo));
  }
  for (uint32_t b = 0; b < 0x7F80; ++b) {  // every bfloat16 midpoint
    add_around(std::bit_cast<float>((b << 16) | 0x8000u));
  }
  for (float special :
       {0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
        std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(), 65504.0f,
        65520.0f, 0x1p-24f, 0x1p-25f, 0x1p-14f}) {
    add_around(special);
  }
  for (uint32_t bits = 0; bits < 0x80000000u; bits += 4093) {  // a sweep, NaN patterns included
    inputs.push_back(std::bit_cast<float>(bits));
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000; ++i) {  // NaNs with random payloads, quiet and signalling
    inputs.push_back(std::bit_cast<float>(static_cast<uint32_t>(0x7F800001u + rng() % 0x7FFFFFu)));
  }
  const size_t positive = inputs.size();
  for (size_t i = 0; i < positive; ++i)
    inputs.push_back(-inputs[i]);
  return inputs;
}

TEST(HalfTest, EveryPatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const Half half(static_cast<uint16_t>(bits), from_bits);
    const float value = half;
    ASSERT_EQ(std::isnan(value), is_half_nan(half.x)) << std::hex << bits;
    if ((bits & 0x7FFFu) == 0x7C00u) {
      ASSERT_TRUE(std::isinf(value) && std::signbit(value) == (bits >> 15)) << std::hex << bits;
    } else if (!std::isnan(value)) {
      ASSERT_EQ(double{value}, half_value(half.x)) << std::hex << bits;
    }
    ASSERT_EQ(Half(value).x, bits) << std::hex << bits;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  for (float value : rounding_inputs()) {
    ASSERT_EQ(Half(value).x, reference_half(value))
        << "float bits " << std::hex << std::bit_cast<uint32_t>(value);
  }
}

TEST(HalfTest, Specials) {
  EXPECT_EQ(Half(0.0f).x, 0x0000);
  EXPECT_EQ(Half(-0.0f).x, 0x8000);
  EXPECT_EQ(Half(1.0f).x, 0x3C00);
  EXPECT_EQ(Half(65504.0f).x, 0x7BFF);
  EXPECT_EQ(Half(65519.996f).x, 0x7BFF);
  EXPECT_EQ(Half(65520.0f).x, 0x7C00);  // tie between 65504 and 2^16 goes to the even (Inf)
  EXPECT_EQ(Half(-1e30f).x, 0xFC00);
  EXPECT_EQ(Half(0x1p-24f).x, 0x0001);    // smallest subnormal
  EXPECT_EQ(Half(0x1p-25f).x, 0x0000);    // tie with 0 goes to 0
  EXPECT_EQ(Half(0x1.8p-24f).x, 0x0002);  // tie between 1 and 2 ulps goes to 2
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).x, 0x7C00);
  EXPECT_TRUE(is_half_nan(Half(std::numeric_limits<float>::quiet_NaN()).x));
  EXPECT_EQ(Half(std::bit_cast<float>(0x7F800001u)).x, 0x7E00);  // payload lost: quiet NaN
  EXPECT_EQ(Half(std::bit_cast<float>(0xFF802000u)).x, 0xFC01);  // signalling payload kept
}

TEST(BFloat16Test, EveryPatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const BFloat16 bf(static_cast<uint16_t>(bits), from_bits);
    const float value = bf;
    ASSERT_EQ(std::bit_cast<uint32_t>(value), bits << 16) << std::hex << bits;
    ASSERT_EQ(std::isnan(value), is_bfloat16_nan(bf.x)) << std::hex << bits;
    ASSERT_EQ(BFloat16(value).x, bits) << std::hex << bits;
  }
}

TEST(BFloat16Test, RoundsToNearestEven) {
  for (float value : rounding_inputs()) {
    ASSERT_EQ(BFloat16(value).x, reference_bfloat16(value))
        << "float bits " << std::hex << std::bit_cast<uint32_t>(value);
  }
}

TEST(BFloat16Test, Specials) {
  EXPECT_EQ(BFloat16(-0.0f).x, 0x8000);
  EXPECT_EQ(BFloat16(1.0f).x, 0x3F80);
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x3F808000u)).x, 0x3F80);  // tie to even
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x3F818000u)).x, 0x3F82);  // tie to even (up)
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).x, 0x7F80);  // rounds up to Inf
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::denorm_min()).x, 0x0000);
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x00008000u)).x, 0x0000);  // subnormal tie to even
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x00018000u)).x, 0x0002);
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0x7F800001u)).x, 0x7FC0);  // payload lost: quiet NaN
  EXPECT_EQ(BFloat16(std::bit_cast<float>(0xFF810000u)).x, 0xFF81);  // signalling payload kept
}

TEST(HalfTest, ConstexprAndStreams) {
  static_assert(Half(2.0f).x == 0x4000);
  static_assert(BFloat16(2.0f).x == 0x4000);
  static_assert(float(Half(0x3555, from_bits)) == 0x1.554p-2f);
  std::ostringstream out;
  out << Half(1.5f) << " " << BFloat16(-2.0f);
  EXPECT_EQ(out.str(), "1.5 -2");
}

}  // namespace
}  // namespace shmccl
