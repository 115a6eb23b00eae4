// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The device kernels: every vector ISA against the generic kernels, bit for bit, on random data
// with NaNs, infinities, zeros and subnormals, for every dtype x op x count (tails) x number of
// sources, misaligned and in place; the generic kernels against references computed in double or
// int64; ISA selection.

#include "device/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "device/kernels_impl.h"
#include "shmccl/dtype.hpp"
#include "shmccl/error.hpp"
#include "shmccl/half.hpp"

namespace shmccl::kernels {
namespace {

constexpr ScalarType kAllTypes[] = {kBool,  kInt8,    kUInt8,    kInt16,   kInt32,
                                    kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
                                ReduceOp::AVG};
constexpr BinaryOp kAllBinaryOps[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                                      BinaryOp::kDiv, BinaryOp::kMax, BinaryOp::kMin};
constexpr size_t kCounts[] = {0, 1, 15, 16, 17, 1000, 4099};
constexpr int kNumSrcs[] = {1, 2, 3, 8};

const char* binary_op_name(BinaryOp op) {
  constexpr const char* kNames[] = {"add", "sub", "mul", "div", "max", "min"};
  return kNames[static_cast<int>(op)];
}

// `count` elements starting `offset` bytes past a 64-byte boundary (misaligned for every vector
// width while aligned for the element), with guard bytes after them.
class Buffer {
 public:
  static constexpr size_t kGuard = 64;

  Buffer(ScalarType type, size_t count, size_t offset = 0)
      : type_(type),
        count_(count),
        offset_(offset),
        storage_((count * element_size(type) + offset + kGuard) / 8 + 9) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = reinterpret_cast<unsigned char*>((base + 63) / 64 * 64 + offset);
    std::memset(data_, 0xA5, bytes() + kGuard);
  }
  Buffer(const Buffer& other) : Buffer(other.type_, other.count_, other.offset_) {
    std::memcpy(data_, other.data_, bytes() + kGuard);
  }
  Buffer& operator=(const Buffer&) = delete;
  static Buffer misaligned(ScalarType type, size_t count) {
    return Buffer(type, count, element_size(type));
  }

  void* data() { return data_; }
  const void* data() const { return data_; }
  unsigned char* at(size_t i) { return data_ + i * element_size(type_); }
  const unsigned char* at(size_t i) const { return data_ + i * element_size(type_); }
  size_t bytes() const { return count_ * element_size(type_); }
  bool guard_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (data_[bytes() + i] != 0xA5) return false;
    }
    return true;
  }

 private:
  ScalarType type_;
  size_t count_;
  size_t offset_;
  std::vector<uint64_t> storage_;
  unsigned char* data_;
};

template <typename T>
void put(unsigned char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

template <typename T>
T get(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A float value of `type` stored at p (from a double), or a special with the type's own bits.
void put_float(ScalarType type, unsigned char* p, double value) {
  switch (type) {
    case kFloat16:
      return put(p, Half(static_cast<float>(value)).x);
    case kBFloat16:
      return put(p, BFloat16(static_cast<float>(value)).x);
    case kFloat32:
      return put(p, static_cast<float>(value));
    default:
      return put(p, value);
  }
}

double get_float(ScalarType type, const unsigned char* p) {
  switch (type) {
    case kFloat16:
      return float(Half(get<uint16_t>(p), from_bits));
    case kBFloat16:
      return float(BFloat16(get<uint16_t>(p), from_bits));
    case kFloat32:
      return get<float>(p);
    default:
      return get<double>(p);
  }
}

int64_t get_int(ScalarType type, const unsigned char* p) {
  switch (type) {
    case kBool:
      return p[0] != 0;
    case kInt8:
      return get<int8_t>(p);
    case kUInt8:
      return get<uint8_t>(p);
    case kInt16:
      return get<int16_t>(p);
    case kInt32:
      return get<int32_t>(p);
    default:
      return get<int64_t>(p);
  }
}

// The dtype's wrap-around of a 64-bit result.
int64_t wrap(ScalarType type, uint64_t value) {
  switch (type) {
    case kInt8:
      return static_cast<int8_t>(value);
    case kUInt8:
      return static_cast<uint8_t>(value);
    case kInt16:
      return static_cast<int16_t>(value);
    case kInt32:
      return static_cast<int32_t>(value);
    default:
      return static_cast<int64_t>(value);
  }
}

bool is_nan(ScalarType type, const unsigned char* p) {
  return is_floating_point(type) && std::isnan(get_float(type, p));
}

// Random elements. Integers: full range, with extra 0, -1 and minimum values (division corner
// cases); bool: mostly 0/1 plus other bytes. Floats: [-2, 2], and with `specials` also NaNs with
// random payloads (quiet and signalling), infinities, signed zeros, subnormals and huge values.
void randomize(ScalarType type, void* data, size_t count, std::mt19937_64& rng, bool specials) {
  auto* bytes = static_cast<unsigned char*>(data);
  const size_t size = element_size(type);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* p = bytes + i * size;
    const uint64_t bits = rng();
    const unsigned pick = static_cast<unsigned>(rng() % 100);
    if (type == kBool) {
      p[0] = pick < 80 ? static_cast<unsigned char>(bits & 1) : static_cast<unsigned char>(bits);
    } else if (!is_floating_point(type)) {
      uint64_t value = bits;
      if (pick < 8) value = 0;
      if (pick >= 8 && pick < 16) value = ~uint64_t{0};
      if (pick >= 16 && pick < 20) value = uint64_t{1} << (8 * size - 1);  // the minimum
      std::memcpy(p, &value, size);
    } else if (!specials || pick >= 12) {
      put_float(type, p, uniform(rng));
    } else {
      const bool negative = bits >> 63;
      switch (pick % 6) {
        case 0: {  // NaN, random payload (a zero payload would be Inf: force a bit)
          const int mantissa_bits = type == kFloat16    ? 10
                                    : type == kBFloat16 ? 7
                                    : type == kFloat32  ? 23
                                                        : 52;
          const int exponent_bits = static_cast<int>(8 * size) - 1 - mantissa_bits;
          uint64_t payload = (bits >> 8) & ((uint64_t{1} << mantissa_bits) - 1);
          if (payload == 0) payload = 1;
          const uint64_t exponent = ((uint64_t{1} << exponent_bits) - 1) << mantissa_bits;
          const uint64_t value =
              (static_cast<uint64_t>(negative) << (8 * size - 1)) | exponent | payload;
          std::memcpy(p, &value, size);
          break;
        }
        case 1:
          put_float(type, p, negative ? -INFINITY : INFINITY);
          break;
        case 2:
          put_float(type, p, negative ? -0.0 : 0.0);
          break;
        case 3: {  // the smallest subnormals
          const uint64_t value = (bits >> 8) % 7 + 1;
          std::memcpy(p, &value, size);
          break;
        }
        case 4:
          put_float(type, p, negative ? -60000.0 : 60000.0);
          break;
        default:
          put_float(type, p, uniform(rng) * 1e-6);
          break;
      }
    }
  }
}

// Element-wise bit equality; with `any_nan`, two NaNs also match (which NaN payload survives an
// addition of two NaNs depends on the compiler's operand order).
::testing::AssertionResult same_elements(ScalarType type, const Buffer& expected,
                                         const Buffer& actual, size_t count, bool any_nan) {
  const size_t size = element_size(type);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(expected.at(i), actual.at(i), size) == 0) continue;
    if (any_nan && is_nan(type, expected.at(i)) && is_nan(type, actual.at(i))) continue;
    uint64_t want = 0;
    uint64_t got = 0;
    std::memcpy(&want, expected.at(i), size);
    std::memcpy(&got, actual.at(i), size);
    std::ostringstream message;  // AssertionResult streams each value apart: no std::hex there
    message << "element " << i << " of " << count << ": expected bits 0x" << std::hex << want
            << ", got 0x" << got;
    return ::testing::AssertionFailure() << message.str();
  }
  if (!actual.guard_intact()) return ::testing::AssertionFailure() << "wrote past the end";
  return ::testing::AssertionSuccess();
}

bool isa_available(Isa isa) {
  return isa <= detected_isa();
}

class KernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { reset_active_isa(); }
};

// ----- vector ISA x dtype against the generic kernels -----

class IsaTypeTest : public ::testing::TestWithParam<std::tuple<Isa, ScalarType>> {
 protected:
  void SetUp() override {
    if (!isa_available(isa())) GTEST_SKIP() << isa_name(isa()) << " not supported by this CPU";
  }
  void TearDown() override { reset_active_isa(); }
  Isa isa() const { return std::get<0>(GetParam()); }
  ScalarType type() const { return std::get<1>(GetParam()); }
};

TEST_P(IsaTypeTest, ReduceMatchesGeneric) {
  std::mt19937_64 rng(static_cast<uint64_t>(type()) * 131 + static_cast<uint64_t>(isa()));
  for (ReduceOp op : kAllOps) {
    const bool any_nan = op != ReduceOp::MIN && op != ReduceOp::MAX;
    for (size_t count : kCounts) {
      for (int num_srcs : kNumSrcs) {
        SCOPED_TRACE(::testing::Message() << op << " count " << count << " srcs " << num_srcs);
        std::vector<Buffer> srcs;
        std::vector<const void*> pointers;
        for (int s = 0; s < num_srcs; ++s) {
          srcs.push_back(Buffer(type(), count, element_size(type()) * (s % 3)));
          randomize(type(), srcs.back().data(), count, rng, /*specials=*/true);
        }
        for (auto& src : srcs)
          pointers.push_back(src.data());
        Buffer expected = Buffer::misaligned(type(), count);
        Buffer actual = Buffer::misaligned(type(), count);
        set_active_isa(Isa::kGeneric);
        reduce(op, type(), expected.data(), pointers.data(), num_srcs, count);
        set_active_isa(isa());
        reduce(op, type(), actual.data(), pointers.data(), num_srcs, count);
        ASSERT_TRUE(same_elements(type(), expected, actual, count, any_nan));
        // In place, into the first and into the last source.
        for (int into : {0, num_srcs - 1}) {
          std::vector<Buffer> copies = srcs;
          std::vector<const void*> copy_pointers;
          for (auto& src : copies)
            copy_pointers.push_back(src.data());
          reduce(op, type(), copies[into].data(), copy_pointers.data(), num_srcs, count);
          ASSERT_TRUE(same_elements(type(), expected, copies[into], count, any_nan))
              << "in place into source " << into;
        }
      }
    }
  }
}

TEST_P(IsaTypeTest, BinaryMatchesGeneric) {
  std::mt19937_64 rng(static_cast<uint64_t>(type()) * 7 + 1);
  for (BinaryOp op : kAllBinaryOps) {
    const bool any_nan = op != BinaryOp::kMax && op != BinaryOp::kMin;
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << binary_op_name(op) << " count " << count);
      Buffer a(type(), count);
      Buffer b = Buffer::misaligned(type(), count);
      randomize(type(), a.data(), count, rng, true);
      randomize(type(), b.data(), count, rng, true);
      Buffer expected = Buffer::misaligned(type(), count);
      Buffer actual = Buffer::misaligned(type(), count);
      if (type() == kBool && (op == BinaryOp::kSub || op == BinaryOp::kDiv)) {
        set_active_isa(isa());
        EXPECT_THROW(binary(op, type(), actual.data(), a.data(), b.data(), count), InvalidArgument);
        continue;
      }
      set_active_isa(Isa::kGeneric);
      binary(op, type(), expected.data(), a.data(), b.data(), count);
      set_active_isa(isa());
      binary(op, type(), actual.data(), a.data(), b.data(), count);
      ASSERT_TRUE(same_elements(type(), expected, actual, count, any_nan));
      Buffer in_place = b;  // dst aliasing b
      binary(op, type(), in_place.data(), a.data(), in_place.data(), count);
      ASSERT_TRUE(same_elements(type(), expected, in_place, count, any_nan));
    }
  }
}

TEST_P(IsaTypeTest, CastMatchesGeneric) {
  std::mt19937_64 rng(static_cast<uint64_t>(type()) * 11 + 3);
  for (ScalarType to : kAllTypes) {
    for (size_t count : kCounts) {
      SCOPED_TRACE(::testing::Message() << type() << " -> " << to << " count " << count);
      Buffer src = Buffer::misaligned(type(), count);
      randomize(type(), src.data(), count, rng, true);
      Buffer expected(to, count);
      Buffer actual = Buffer::misaligned(to, count);
      set_active_isa(Isa::kGeneric);
      cast(expected.data(), to, src.data(), type(), count);
      set_active_isa(isa());
      cast(actual.data(), to, src.data(), type(), count);
      ASSERT_TRUE(same_elements(to, expected, actual, count, /*any_nan=*/false));
    }
  }
}

TEST_P(IsaTypeTest, FillWritesEveryElement) {
  std::mt19937_64 rng(5);
  set_active_isa(isa());
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{33}, size_t{1000}, size_t{4099}}) {
    Buffer value(type(), 1);
    randomize(type(), value.data(), 1, rng, true);
    Buffer out = Buffer::misaligned(type(), count);
    fill(out.data(), type(), count, value.data());
    for (size_t i = 0; i < count; ++i) {
      if (type() == kBool) {
        ASSERT_EQ(*out.at(i), *value.at(0) != 0 ? 1 : 0) << i;
      } else {
        ASSERT_EQ(std::memcmp(out.at(i), value.at(0), element_size(type())), 0) << i;
      }
    }
    ASSERT_TRUE(out.guard_intact()) << count;
  }
}

std::string isa_type_name(const ::testing::TestParamInfo<std::tuple<Isa, ScalarType>>& info) {
  return std::string(isa_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
}

// The tests above go through the dispatching functions, which fall back to the generic kernels
// whenever a table declines: a vector table that declined everything would pass them. Here each
// table is called directly. It must take every case it is documented to take (all but int8/uint8
// PRODUCT; sub for every non-bool dtype and div for the floats; float32 <-> float16/bfloat16
// casts; every fill), matching the generic kernels, and decline the rest.
TEST_P(IsaTypeTest, TheTableTakesItsCasesItself) {
  const detail::IsaTable& table =
      isa() == Isa::kAvx512 ? detail::avx512_table() : detail::avx2_table();
  const bool is_float =
      type() == kFloat16 || type() == kBFloat16 || type() == kFloat32 || type() == kFloat64;
  std::mt19937_64 rng(static_cast<uint64_t>(type()) * 17 + static_cast<uint64_t>(isa()));
  constexpr size_t kCount = 1000;
  std::vector<Buffer> srcs;
  std::vector<const void*> pointers;
  for (int s = 0; s < 3; ++s) {
    srcs.push_back(Buffer(type(), kCount));
    randomize(type(), srcs.back().data(), kCount, rng, /*specials=*/false);
  }
  for (auto& src : srcs)  // after the vector's last growth
    pointers.push_back(src.data());
  for (ReduceOp op : kAllOps) {
    SCOPED_TRACE(::testing::Message() << "reduce " << op);
    Buffer expected(type(), kCount);
    Buffer actual(type(), kCount);
    detail::generic_reduce(op, type(), expected.data(), pointers.data(), 3, 0, kCount);
    const bool declines = op == ReduceOp::PRODUCT && (type() == kInt8 || type() == kUInt8);
    ASSERT_EQ(table.reduce(op, type(), actual.data(), pointers.data(), 3, kCount), !declines);
    if (!declines) {
      EXPECT_TRUE(same_elements(type(), expected, actual, kCount, false));
    }
  }
  for (BinaryOp op : {BinaryOp::kSub, BinaryOp::kDiv}) {
    SCOPED_TRACE(binary_op_name(op));
    Buffer expected(type(), kCount);
    Buffer actual(type(), kCount);
    const bool takes = type() != kBool && (op == BinaryOp::kSub || is_float);
    ASSERT_EQ(table.binary(op, type(), actual.data(), pointers[0], pointers[1], kCount), takes);
    if (!takes) continue;
    detail::generic_binary(op, type(), expected.data(), pointers[0], pointers[1], 0, kCount);
    EXPECT_TRUE(same_elements(type(), expected, actual, kCount, /*any_nan=*/true));
  }
  for (ScalarType to : kAllTypes) {
    SCOPED_TRACE(::testing::Message() << "cast to " << to);
    const bool takes = (type() == kFloat32 && (to == kFloat16 || to == kBFloat16)) ||
                       (to == kFloat32 && (type() == kFloat16 || type() == kBFloat16));
    Buffer expected(to, kCount);
    Buffer actual(to, kCount);
    ASSERT_EQ(table.cast(actual.data(), to, pointers[0], type(), kCount), takes);
    if (!takes) continue;
    detail::generic_cast(expected.data(), to, pointers[0], type(), kCount);
    EXPECT_TRUE(same_elements(to, expected, actual, kCount, false));
  }
  Buffer expected(type(), kCount);
  Buffer actual(type(), kCount);
  ASSERT_TRUE(table.fill(actual.data(), type(), kCount, pointers[2]));
  detail::generic_fill(expected.data(), type(), kCount, pointers[2]);
  EXPECT_TRUE(same_elements(type(), expected, actual, kCount, false));
}

INSTANTIATE_TEST_SUITE_P(Kernels, IsaTypeTest,
                         ::testing::Combine(::testing::Values(Isa::kAvx2, Isa::kAvx512),
                                            ::testing::ValuesIn(kAllTypes)),
                         isa_type_name);

// ----- every ISA (generic included) x dtype against references in double / int64 -----

class ReferenceTest : public IsaTypeTest {};

// The reduction of one element computed independently of the kernels.
struct Expected {
  double value;
  double tolerance;
};

Expected float_reference(ScalarType type, ReduceOp op, const std::vector<double>& values) {
  double result = values[0];
  double magnitude = std::fabs(values[0]);
  for (size_t s = 1; s < values.size(); ++s) {
    const double x = values[s];
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
        result += x;
        break;
      case ReduceOp::PRODUCT:
        result *= x;
        break;
      case ReduceOp::MIN:
        result = std::min(result, x);
        break;
      case ReduceOp::MAX:
        result = std::max(result, x);
        break;
    }
    magnitude += std::fabs(x);
  }
  const double n = static_cast<double>(values.size());
  if (op == ReduceOp::AVG) {
    result /= n;
    magnitude /= n;
  }
  if (op == ReduceOp::MIN || op == ReduceOp::MAX) return {result, 0.0};
  if (op == ReduceOp::PRODUCT) magnitude = std::fabs(result);
  // Accumulation in float32 (float64 for float64), then one rounding to the output type.
  const double accumulate = type == kFloat64 ? 0x1p-52 : 0x1p-23;
  const double output = type == kFloat16 ? 0x1p-10 : type == kBFloat16 ? 0x1p-7 : accumulate;
  const double subnormal = type == kFloat16 ? 0x1p-24 : 0.0;
  return {result, n * accumulate * magnitude + output * std::fabs(result) + subnormal};
}

int64_t integer_reference(ScalarType type, ReduceOp op, const std::vector<int64_t>& values) {
  if (type == kBool) {
    int64_t any = 0;
    int64_t all = 1;
    for (int64_t v : values) {
      any |= v;
      all &= v;
    }
    return op == ReduceOp::PRODUCT || op == ReduceOp::MIN ? all : any;
  }
  uint64_t result = static_cast<uint64_t>(values[0]);
  int64_t extreme = values[0];
  for (size_t s = 1; s < values.size(); ++s) {
    const uint64_t x = static_cast<uint64_t>(values[s]);
    if (op == ReduceOp::PRODUCT) {
      result *= x;
    } else {
      result += x;
    }
    extreme = op == ReduceOp::MIN ? std::min(extreme, values[s]) : std::max(extreme, values[s]);
  }
  switch (op) {
    case ReduceOp::MIN:
    case ReduceOp::MAX:
      return extreme;
    case ReduceOp::AVG:  // the sum wraps in the dtype, then divides truncating
      return wrap(type, wrap(type, result) / static_cast<int64_t>(values.size()));
    default:
      return wrap(type, result);
  }
}

TEST_P(ReferenceTest, ReduceMatchesReference) {
  std::mt19937_64 rng(static_cast<uint64_t>(type()) + 99);
  set_active_isa(isa());
  for (ReduceOp op : kAllOps) {
    for (size_t count : {size_t{17}, size_t{1000}}) {
      for (int num_srcs : kNumSrcs) {
        SCOPED_TRACE(::testing::Message() << op << " count " << count << " srcs " << num_srcs);
        std::vector<Buffer> srcs;
        std::vector<const void*> pointers;
        for (int s = 0; s < num_srcs; ++s) {
          srcs.push_back(Buffer::misaligned(type(), count));
          randomize(type(), srcs.back().data(), count, rng, /*specials=*/false);
        }
        for (auto& src : srcs)
          pointers.push_back(src.data());
        Buffer out(type(), count);
        reduce(op, type(), out.data(), pointers.data(), num_srcs, count);
        for (size_t i = 0; i < count; ++i) {
          if (is_floating_point(type())) {
            std::vector<double> values;
            for (auto& src : srcs)
              values.push_back(get_float(type(), src.at(i)));
            const Expected expected = float_reference(type(), op, values);
            ASSERT_NEAR(get_float(type(), out.at(i)), expected.value, expected.tolerance) << i;
          } else {
            std::vector<int64_t> values;
            for (auto& src : srcs)
              values.push_back(get_int(type(), src.at(i)));
            ASSERT_EQ(get_int(type(), out.at(i)), integer_reference(type(), op, values)) << i;
            if (type() == kBool) {
              ASSERT_LE(*out.at(i), 1) << "bool output must be 0 or 1";
            }
          }
        }
      }
    }
  }
}

TEST_P(ReferenceTest, BinaryMatchesReference) {
  if (type() == kBool) GTEST_SKIP() << "bool add/mul/max/min are or/and: covered by reduce";
  std::mt19937_64 rng(static_cast<uint64_t>(type()) + 5);
  set_active_isa(isa());
  const size_t count = 1000;
  Buffer a(type(), count);
  Buffer b(type(), count);
  randomize(type(), a.data(), count, rng, false);
  randomize(type(), b.data(), count, rng, false);
  for (BinaryOp op : kAllBinaryOps) {
    SCOPED_TRACE(binary_op_name(op));
    Buffer out(type(), count);
    binary(op, type(), out.data(), a.data(), b.data(), count);
    for (size_t i = 0; i < count; ++i) {
      if (is_floating_point(type())) {
        // One operation in float32 (float64), rounded once to the type: the nearest value.
        const double x = get_float(type(), a.at(i));
        const double y = get_float(type(), b.at(i));
        double exact = 0;
        switch (op) {
          case BinaryOp::kAdd:
            exact = x + y;
            break;
          case BinaryOp::kSub:
            exact = x - y;
            break;
          case BinaryOp::kMul:
            exact = x * y;
            break;
          case BinaryOp::kDiv:
            exact = x / y;
            break;
          case BinaryOp::kMax:
            exact = std::max(x, y);
            break;
          case BinaryOp::kMin:
            exact = std::min(x, y);
            break;
        }
        Buffer want(type(), 1);
        put_float(type(), want.at(0), type() == kFloat64 ? exact : static_cast<float>(exact));
        ASSERT_EQ(get_float(type(), out.at(i)), get_float(type(), want.at(0)))
            << x << " " << binary_op_name(op) << " " << y;
      } else {
        const int64_t x = get_int(type(), a.at(i));
        const int64_t y = get_int(type(), b.at(i));
        const auto ux = static_cast<uint64_t>(x);
        const auto uy = static_cast<uint64_t>(y);
        int64_t want = 0;
        switch (op) {
          case BinaryOp::kAdd:
            want = wrap(type(), ux + uy);
            break;
          case BinaryOp::kSub:
            want = wrap(type(), ux - uy);
            break;
          case BinaryOp::kMul:
            want = wrap(type(), ux * uy);
            break;
          case BinaryOp::kDiv:  // by zero: 0; MIN / -1 wraps to MIN
            want = y == 0 ? 0 : y == -1 ? wrap(type(), 0 - ux) : wrap(type(), x / y);
            break;
          case BinaryOp::kMax:
            want = std::max(x, y);
            break;
          case BinaryOp::kMin:
            want = std::min(x, y);
            break;
        }
        ASSERT_EQ(get_int(type(), out.at(i)), want) << x << " " << binary_op_name(op) << " " << y;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReferenceTest,
                         ::testing::Combine(::testing::Values(Isa::kGeneric, Isa::kAvx2,
                                                              Isa::kAvx512),
                                            ::testing::ValuesIn(kAllTypes)),
                         isa_type_name);

// ----- per ISA -----

class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_available(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported";
    set_active_isa(GetParam());
  }
  void TearDown() override { reset_active_isa(); }
};

TEST_P(IsaTest, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ScalarType type : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(type));
    const size_t count = 40;  // vector body and tail
    Buffer a(type, count);
    Buffer b(type, count);
    for (size_t i = 0; i < count; ++i) {
      put_float(type, a.at(i), i % 3 == 0 ? nan : 1.0);
      put_float(type, b.at(i), i % 3 == 1 ? nan : 2.0);
    }
    const void* srcs[] = {a.data(), b.data()};
    for (ReduceOp op : {ReduceOp::MIN, ReduceOp::MAX}) {
      Buffer out(type, count);
      reduce(op, type, out.data(), srcs, 2, count);
      for (size_t i = 0; i < count; ++i) {
        const double got = get_float(type, out.at(i));
        if (i % 3 == 2) {
          EXPECT_EQ(got, op == ReduceOp::MIN ? 1.0 : 2.0) << i;
        } else {
          EXPECT_TRUE(std::isnan(got)) << op << " element " << i;
        }
      }
    }
  }
}

TEST_P(IsaTest, CastCornerCases) {
  auto cast_one = [](ScalarType to, ScalarType from, const void* value) {
    int64_t out = 0;
    Buffer src(from, 1);
    std::memcpy(src.data(), value, element_size(from));
    cast(&out, to, src.data(), from, 1);
    return out;
  };
  auto to_int32 = [&](float value) {
    return static_cast<int32_t>(cast_one(kInt32, kFloat32, &value));
  };
  EXPECT_EQ(to_int32(1.9f), 1);
  EXPECT_EQ(to_int32(-1.9f), -1);
  EXPECT_EQ(to_int32(NAN), 0);
  EXPECT_EQ(to_int32(3e9f), INT32_MAX);
  EXPECT_EQ(to_int32(-3e9f), INT32_MIN);
  EXPECT_EQ(to_int32(INFINITY), INT32_MAX);
  EXPECT_EQ(to_int32(-INFINITY), INT32_MIN);
  EXPECT_EQ(to_int32(2147483520.0f), 2147483520);
  EXPECT_EQ(to_int32(2147483648.0f), INT32_MAX);
  EXPECT_EQ(to_int32(-2147483648.0f), INT32_MIN);
  auto to_int64 = [&](double value) { return cast_one(kInt64, kFloat64, &value); };
  EXPECT_EQ(to_int64(9.3e18), INT64_MAX);
  EXPECT_EQ(to_int64(-9.3e18), INT64_MIN);
  EXPECT_EQ(to_int64(-9223372036854775808.0), INT64_MIN);
  EXPECT_EQ(to_int64(9223372036854774784.0), 9223372036854774784);
  EXPECT_EQ(to_int64(-0.999), 0);
  auto to_uint8 = [&](float value) {
    return static_cast<uint8_t>(cast_one(kUInt8, kFloat32, &value));
  };
  EXPECT_EQ(to_uint8(-0.5f), 0);
  EXPECT_EQ(to_uint8(-1.0f), 0);
  EXPECT_EQ(to_uint8(255.9f), 255);
  EXPECT_EQ(to_uint8(300.0f), 255);
  auto to_bool = [&](float value) { return cast_one(kBool, kFloat32, &value) & 0xFF; };
  EXPECT_EQ(to_bool(NAN), 1);
  EXPECT_EQ(to_bool(0.0f), 0);
  EXPECT_EQ(to_bool(-0.0f), 0);
  EXPECT_EQ(to_bool(1e-40f), 1);
  const uint8_t two = 2;
  EXPECT_EQ(static_cast<int32_t>(cast_one(kInt32, kBool, &two)), 1);
  EXPECT_EQ(cast_one(kBool, kBool, &two) & 0xFF, 1);
  const int32_t wide = 300;
  EXPECT_EQ(static_cast<int8_t>(cast_one(kInt8, kInt32, &wide)), 44);
  const uint16_t half_nan = 0x7E00;
  EXPECT_EQ(static_cast<int32_t>(cast_one(kInt32, kFloat16, &half_nan)), 0);
  const uint16_t half_max = 0x7BFF;
  EXPECT_EQ(static_cast<int16_t>(cast_one(kInt16, kFloat16, &half_max)), INT16_MAX);
  const float one_third = 1.0f / 3;
  EXPECT_EQ(static_cast<uint16_t>(cast_one(kFloat16, kFloat32, &one_third)), Half(one_third).x);
  const double big = 1e300;
  EXPECT_EQ(static_cast<uint16_t>(cast_one(kBFloat16, kFloat64, &big)), 0x7F80);
}

// All 65536 patterns of both 16-bit floats through the vector casts, and back.
TEST_P(IsaTest, SixteenBitCastsAreExhaustive) {
  for (ScalarType type : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(type));
    std::vector<uint16_t> patterns(65536);
    for (uint32_t i = 0; i < patterns.size(); ++i)
      patterns[i] = static_cast<uint16_t>(i);
    std::vector<float> floats(patterns.size());
    cast(floats.data(), kFloat32, patterns.data(), type, patterns.size());
    for (uint32_t i = 0; i < patterns.size(); ++i) {
      const float want = type == kFloat16 ? float(Half(patterns[i], from_bits))
                                          : float(BFloat16(patterns[i], from_bits));
      ASSERT_EQ(std::bit_cast<uint32_t>(floats[i]), std::bit_cast<uint32_t>(want)) << i;
    }
    std::vector<uint16_t> back(patterns.size());
    cast(back.data(), type, floats.data(), kFloat32, floats.size());
    ASSERT_EQ(back, patterns);
  }
}

TEST_P(IsaTest, FloatTo16BitRoundsLikeHalfHpp) {
  std::mt19937 rng(42);
  std::vector<float> floats(1 << 18);
  for (size_t i = 0; i < floats.size(); ++i) {
    // Random patterns, half of them near the 16-bit ranges' rounding boundaries.
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2 == 0) bits = (bits & 0x80001FFFu) | ((0x33u + i % 20) << 23) | (bits & 0x7FE000u);
    floats[i] = std::bit_cast<float>(bits);
  }
  std::vector<uint16_t> halves(floats.size());
  std::vector<uint16_t> bfloats(floats.size());
  cast(halves.data(), kFloat16, floats.data(), kFloat32, floats.size());
  cast(bfloats.data(), kBFloat16, floats.data(), kFloat32, floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(halves[i], Half(floats[i]).x) << std::hex << std::bit_cast<uint32_t>(floats[i]);
    ASSERT_EQ(bfloats[i], BFloat16(floats[i]).x) << std::hex << std::bit_cast<uint32_t>(floats[i]);
  }
}

TEST_P(IsaTest, CopyAndStreamingCopy) {
  std::mt19937_64 rng(9);
  const size_t sizes[] = {0, 1, 31, 63, 64, 65, 1000, 4096 + 3, (1 << 20) + 5};
  std::vector<unsigned char> src((1 << 20) + 200);
  for (auto& byte : src)
    byte = static_cast<unsigned char>(rng());
  for (size_t bytes : sizes) {
    for (size_t src_offset : {0, 1, 33}) {
      for (size_t dst_offset : {0, 7, 64}) {
        std::vector<unsigned char> dst(bytes + 128, 0xEE);
        copy(dst.data() + dst_offset, src.data() + src_offset, bytes);
        ASSERT_EQ(std::memcmp(dst.data() + dst_offset, src.data() + src_offset, bytes), 0);
        if (GetParam() == Isa::kGeneric) continue;
        // The streaming path is only taken above the LLC size; call it directly.
        std::vector<unsigned char> streamed(bytes + 128, 0xEE);
        const detail::IsaTable& table =
            GetParam() == Isa::kAvx512 ? detail::avx512_table() : detail::avx2_table();
        table.stream_copy(streamed.data() + dst_offset, src.data() + src_offset, bytes);
        ASSERT_EQ(std::memcmp(streamed.data() + dst_offset, src.data() + src_offset, bytes), 0)
            << bytes << " bytes, offsets " << src_offset << "/" << dst_offset;
        ASSERT_EQ(streamed[dst_offset + bytes], 0xEE);
        if (dst_offset > 0) {
          ASSERT_EQ(streamed[dst_offset - 1], 0xEE);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, IsaTest,
                         ::testing::Values(Isa::kGeneric, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(isa_name(info.param));
                         });

// Every size up to 40 bytes (the inline cases and the memmove fallback), at every misalignment,
// disjoint and overlapping both ways: the same bytes as memmove, nothing outside touched.
TEST(CopySmallTest, MatchesMemmoveForEverySizeAndOverlap) {
  std::vector<unsigned char> pattern(160);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t bytes = 0; bytes <= 40; ++bytes) {
    for (size_t from = 0; from < 8; ++from) {
      for (size_t to : {size_t{0}, size_t{3}, size_t{8}, size_t{48}, from + 1, from + bytes / 2}) {
        std::vector<unsigned char> expected = pattern;
        std::vector<unsigned char> actual = pattern;
        std::memmove(expected.data() + 64 + to, expected.data() + 64 + from, bytes);
        copy_small(actual.data() + 64 + to, actual.data() + 64 + from, bytes);
        ASSERT_EQ(actual, expected) << bytes << " bytes from +" << from << " to +" << to;
      }
    }
  }
}

// ----- argument checks and ISA selection -----

TEST_F(KernelsTest, RejectsBadArguments) {
  int32_t value = 0;
  const void* srcs[] = {&value};
  EXPECT_THROW(reduce(ReduceOp::SUM, kInt32, &value, srcs, 0, 1), InvalidArgument);
  EXPECT_THROW(binary(BinaryOp::kSub, kBool, &value, &value, &value, 1), InvalidArgument);
  EXPECT_THROW(binary(BinaryOp::kDiv, kBool, &value, &value, &value, 0), InvalidArgument);
  EXPECT_THROW(fill(&value, static_cast<ScalarType>(42), 1, &value), InvalidArgument);
  // Nothing to do: null pointers are fine.
  reduce(ReduceOp::SUM, kFloat32, nullptr, srcs, 1, 0);
  copy(nullptr, nullptr, 0);
}

TEST_F(KernelsTest, DetectsAndSelectsIsa) {
  const Isa detected = detected_isa();
  EXPECT_LE(active_isa(), detected);
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (isa <= detected) {
      set_active_isa(isa);
      EXPECT_EQ(active_isa(), isa);
    } else {
      EXPECT_THROW(set_active_isa(isa), InvalidArgument) << isa_name(isa);
    }
  }
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
}

TEST_F(KernelsTest, HonoursKernelIsaVariable) {
  const char* saved = std::getenv("SHMCCL_KERNEL_ISA");
  const std::string saved_value = saved ? saved : "";
  auto with_variable = [](const char* value) {
    if (value) {
      setenv("SHMCCL_KERNEL_ISA", value, 1);
    } else {
      unsetenv("SHMCCL_KERNEL_ISA");
    }
    config::reload();
    reset_active_isa();
    return active_isa();
  };
  EXPECT_EQ(with_variable("generic"), Isa::kGeneric);
  EXPECT_EQ(with_variable("avx2"), std::min(Isa::kAvx2, detected_isa()));
  EXPECT_EQ(with_variable("avx512"), detected_isa());
  EXPECT_EQ(with_variable("auto"), detected_isa());
  EXPECT_EQ(with_variable("bogus"), detected_isa());  // warned about, then ignored
  EXPECT_EQ(with_variable(nullptr), detected_isa());
  // set_active_isa overrides the variable until the next reset.
  with_variable("generic");
  set_active_isa(detected_isa());
  EXPECT_EQ(active_isa(), detected_isa());
  with_variable(saved ? saved_value.c_str() : nullptr);
}

}  // namespace
}  // namespace shmccl::kernels
