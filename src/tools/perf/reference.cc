// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "reference.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace shmccl::perf {
namespace {

template <typename T>
constexpr bool kIs16BitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// What the kernels compute in: float for the 16-bit floats, the type itself for float and double.
// Integers are combined in int64_t: the pattern keeps every sum within the dtype, so this equals
// the kernels' wrapping arithmetic in the dtype.
template <typename T>
using Acc = std::conditional_t<kIs16BitFloat<T>, float,
                               std::conditional_t<std::is_integral_v<T>, int64_t, T>>;

// Largest magnitude every value of the dtype up to which integers are exact and (for integers)
// that stays below the poison (the type's maximum). Capped to keep the values small.
int64_t exact_limit(ScalarType dtype) {
  constexpr int64_t kCap = 1000000;
  switch (dtype) {
    case ScalarType::Bool:
      return 1;
    case ScalarType::Int8:
      return 126;
    case ScalarType::UInt8:
      return 254;
    case ScalarType::Int16:
      return 32766;
    case ScalarType::BFloat16:
      return 256;
    case ScalarType::Float16:
      return 2048;
    case ScalarType::Int32:
    case ScalarType::Int64:
    case ScalarType::Float32:
    case ScalarType::Float64:
      return kCap;
  }
  return 1;
}

// A stateless mix of (rank, index): splitmix64's finalizer over a combination of both.
uint64_t hash(int rank, int64_t index) {
  uint64_t z = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull +
               (static_cast<uint64_t>(rank) + 1) * 0xC2B2AE3D27D4EB4Full;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element k of `data`, of element type T (bool as its byte).
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <typename T>
Stored<T> to_stored(int64_t value) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<uint8_t>(value != 0);
  } else if constexpr (kIs16BitFloat<T>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
Stored<T> from_acc(Acc<T> value) {
  if constexpr (kIs16BitFloat<T>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
Stored<T> poison() {
  if constexpr (std::is_same_v<T, bool>) {
    return 0xFF;
  } else if constexpr (kIs16BitFloat<T>) {
    return T(std::numeric_limits<float>::quiet_NaN());
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::numeric_limits<T>::quiet_NaN();
  } else {
    return std::numeric_limits<T>::max();
  }
}

// Equal values (floats compare as numbers: the poison NaN never matches, -0 matches 0).
template <typename T>
bool same(Stored<T> got, Stored<T> expected) {
  if constexpr (kIs16BitFloat<T>) {
    return static_cast<float>(got) == static_cast<float>(expected);
  } else {
    return got == expected;
  }
}

template <typename T>
Stored<T> expected_reduced(const DataPattern& pattern, int64_t index) {
  const int n = pattern.world();
  const ReduceOp op = pattern.op();
  if constexpr (std::is_same_v<T, bool>) {
    const bool all = op == ReduceOp::PRODUCT || op == ReduceOp::MIN;  // and; otherwise or
    bool result = all;
    for (int r = 0; r < n; ++r) {
      const bool bit = pattern.value(r, index) != 0;
      result = all ? (result && bit) : (result || bit);
    }
    return static_cast<uint8_t>(result);
  } else {
    using A = Acc<T>;
    A acc = static_cast<A>(pattern.value(0, index));
    for (int r = 1; r < n; ++r) {
      const A x = static_cast<A>(pattern.value(r, index));
      switch (op) {
        case ReduceOp::SUM:
        case ReduceOp::AVG:
          acc += x;
          break;
        case ReduceOp::PRODUCT:
          acc *= x;
          break;
        case ReduceOp::MIN:
          acc = std::min(acc, x);
          break;
        case ReduceOp::MAX:
          acc = std::max(acc, x);
          break;
      }
    }
    if (op == ReduceOp::AVG) acc = acc / static_cast<A>(n);  // integers truncate, as the kernels
    return from_acc<T>(acc);
  }
}

}  // namespace

DataPattern::DataPattern(ScalarType dtype, ReduceOp op, bool reducing, int world)
    : dtype_(dtype), op_(op), world_(world) {
  signed_ = dtype != ScalarType::UInt8 && dtype != ScalarType::Bool;
  if (dtype == ScalarType::Bool) {
    if (!reducing) {
      shape_ = Shape::kBoolBits;
    } else {
      shape_ = (op == ReduceOp::PRODUCT || op == ReduceOp::MIN) ? Shape::kBoolAll : Shape::kBoolAny;
    }
  } else if (reducing && op == ReduceOp::PRODUCT) {
    shape_ = Shape::kProduct;
  } else {
    shape_ = Shape::kRange;
  }
  const int64_t limit = exact_limit(dtype);
  magnitude_ = reducing ? std::max<int64_t>(1, limit / world) : limit;
}

int64_t DataPattern::value(int rank, int64_t index) const {
  const uint64_t h = hash(rank, index);
  switch (shape_) {
    case Shape::kRange: {
      const uint64_t span = static_cast<uint64_t>(signed_ ? 2 * magnitude_ + 1 : magnitude_ + 1);
      const auto v = static_cast<int64_t>(h % span);
      return signed_ ? v - magnitude_ : v;
    }
    case Shape::kProduct:
      if (index % world_ == rank) return 2;
      if (h % 37 == 0) return 0;
      return signed_ && ((h >> 8) & 1) ? -1 : 1;
    case Shape::kBoolAny:
      return (h & 3) == 0;
    case Shape::kBoolAll:
      return (h & 3) != 0;
    case Shape::kBoolBits:
      return static_cast<int64_t>(h & 1);
  }
  return 0;
}

void DataPattern::fill(void* data, int64_t count, int rank, int64_t first) const {
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<Stored<T>*>(data);
    for (int64_t k = 0; k < count; ++k)
      out[k] = to_stored<T>(value(rank, first + k));
  });
}

void DataPattern::fill_poison(void* data, int64_t count) const {
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<Stored<T>*>(data), count, poison<T>());
  });
}

int64_t DataPattern::count_wrong_values(const void* data, int64_t count, int rank,
                                        int64_t first) const {
  return visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto* got = static_cast<const Stored<T>*>(data);
    int64_t wrong = 0;
    for (int64_t k = 0; k < count; ++k)
      wrong += !same<T>(got[k], to_stored<T>(value(rank, first + k)));
    return wrong;
  });
}

int64_t DataPattern::count_wrong_reduced(const void* data, int64_t count, int64_t first) const {
  return visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto* got = static_cast<const Stored<T>*>(data);
    int64_t wrong = 0;
    for (int64_t k = 0; k < count; ++k)
      wrong += !same<T>(got[k], expected_reduced<T>(*this, first + k));
    return wrong;
  });
}

}  // namespace shmccl::perf
