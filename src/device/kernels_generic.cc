// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The portable kernels. They define the results: every vector kernel must match them bit for bit.
// Integer arithmetic wraps (done in unsigned types, so it is never UB); float16/bfloat16 compute
// in float32 and round once; MIN/MAX return the first NaN met, as the vector max/min + blend do.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "device/kernels_impl.h"
#include "shmccl/half.hpp"

namespace shmccl::kernels::detail {
namespace {

// bool elements are stored as bytes; reading one as `bool` would be UB for a byte other than 0/1.
struct BoolByte {
  uint8_t x;
};

template <typename T>
using Storage = std::conditional_t<std::is_same_v<T, bool>, BoolByte, T>;

// The type elements are computed in: float for the 16-bit floats, 0/1 bytes for bool.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                               std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;

template <typename T>
Acc<T> load(Storage<T> value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value.x != 0;
  } else {
    return static_cast<Acc<T>>(value);
  }
}

template <typename T>
Storage<T> store(Acc<T> value) {
  if constexpr (std::is_same_v<T, bool>) {
    return BoolByte{value};
  } else {
    return Storage<T>(value);
  }
}

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<Acc<T>>;

// Unsigned type wide enough that integer + and * neither promote to int nor overflow as signed.
template <typename T>
using Wide = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

template <typename T>
struct Ops {
  using A = Acc<T>;
  static A add(A a, A b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a | b;
    } else if constexpr (kIsFloat<T>) {
      return a + b;
    } else {
      return static_cast<A>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    }
  }
  static A mul(A a, A b) {
    if constexpr (std::is_same_v<T, bool>) {
      return a & b;
    } else if constexpr (kIsFloat<T>) {
      return a * b;
    } else {
      return static_cast<A>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    }
  }
  // x86 maxps/minps return b unless a > b (a < b); a NaN in a is kept.
  static A max(A a, A b) {
    if constexpr (kIsFloat<T>) {
      if (std::isnan(a)) return a;
    }
    return a > b ? a : b;
  }
  static A min(A a, A b) {
    if constexpr (kIsFloat<T>) {
      if (std::isnan(a)) return a;
    }
    return a < b ? a : b;
  }
  static A sub(A a, A b) {
    if constexpr (kIsFloat<T>) {
      return a - b;
    } else {
      return static_cast<A>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
    }
  }
  static A div(A a, A b) {
    if constexpr (kIsFloat<T>) {
      return a / b;
    } else {
      if (b == 0) return 0;
      // INT_MIN / -1 overflows; the wrapped negation is the answer.
      if (std::is_signed_v<A> && b == static_cast<A>(-1)) return sub(0, a);
      return static_cast<A>(a / b);
    }
  }
  // AVG's last step. Integers: the (wrapped) sum divided, truncating.
  static A average(A sum, int n) {
    if constexpr (std::is_same_v<T, bool>) {
      return sum;
    } else if constexpr (kIsFloat<T>) {
      return sum / static_cast<A>(n);
    } else {
      return static_cast<A>(static_cast<int64_t>(sum) / n);
    }
  }
};

template <typename T, typename Combine, typename Finish>
void reduce_range(void* dst, const void* const* srcs, int num_srcs, size_t begin, size_t end,
                  Combine combine, Finish finish) {
  // Chunks keep the accumulators in L1 and read each source sequentially; per element the order
  // of operations is still src0 op src1 op ... op srcN-1.
  constexpr size_t kChunk = 256;
  Acc<T> acc[kChunk];
  auto* out = static_cast<Storage<T>*>(dst);
  for (size_t chunk = begin; chunk < end; chunk += kChunk) {
    const size_t len = end - chunk < kChunk ? end - chunk : kChunk;
    const auto* first = static_cast<const Storage<T>*>(srcs[0]) + chunk;
    for (size_t i = 0; i < len; ++i)
      acc[i] = load<T>(first[i]);
    for (int s = 1; s < num_srcs; ++s) {
      const auto* src = static_cast<const Storage<T>*>(srcs[s]) + chunk;
      for (size_t i = 0; i < len; ++i)
        acc[i] = combine(acc[i], load<T>(src[i]));
    }
    for (size_t i = 0; i < len; ++i)
      out[chunk + i] = store<T>(finish(acc[i]));
  }
}

template <typename T>
void reduce_typed(ReduceOp op, void* dst, const void* const* srcs, int n, size_t begin,
                  size_t end) {
  using O = Ops<T>;
  using A = Acc<T>;
  // Lambdas, not &O::add: each op gets its own inlined loop instead of a call per element.
  const auto same = [](A a) { return a; };
  const auto add = [](A a, A b) { return O::add(a, b); };
  switch (op) {
    case ReduceOp::SUM:
      return reduce_range<T>(dst, srcs, n, begin, end, add, same);
    case ReduceOp::PRODUCT:
      return reduce_range<T>(
          dst, srcs, n, begin, end, [](A a, A b) { return O::mul(a, b); }, same);
    case ReduceOp::MIN:
      return reduce_range<T>(
          dst, srcs, n, begin, end, [](A a, A b) { return O::min(a, b); }, same);
    case ReduceOp::MAX:
      return reduce_range<T>(
          dst, srcs, n, begin, end, [](A a, A b) { return O::max(a, b); }, same);
    case ReduceOp::AVG:
      return reduce_range<T>(dst, srcs, n, begin, end, add,
                             [n](Acc<T> sum) { return O::average(sum, n); });
  }
}

// Float (or a 16-bit float's float) to integer: truncate toward zero, NaN -> 0, saturate. The
// bounds are compared in double, where every float and each lo - 1 / hi + 1 needed is exact
// enough: for int64, hi + 1 rounds to 2^63, the first out-of-range value.
template <typename To>
To float_to_integer(double value) {
  constexpr To kLo = std::numeric_limits<To>::lowest();
  constexpr To kHi = std::numeric_limits<To>::max();
  if (std::isnan(value)) return 0;
  if (value <= static_cast<double>(kLo) - 1.0) return kLo;
  if (value >= static_cast<double>(kHi) + 1.0) return kHi;
  return static_cast<To>(value);
}

template <typename To, typename From>
Storage<To> convert(Storage<From> from) {
  if constexpr (std::is_same_v<From, bool>) {
    const uint8_t bit = from.x != 0;
    if constexpr (std::is_same_v<To, bool>) {
      return BoolByte{bit};
    } else {
      return To(static_cast<float>(bit));  // 0 and 1 are exact in every type
    }
  } else {
    using Value = std::conditional_t<std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>,
                                     float, From>;
    const Value value = static_cast<Value>(from);
    if constexpr (std::is_same_v<To, bool>) {
      return BoolByte{static_cast<uint8_t>(value != 0)};
    } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
      return To(static_cast<float>(value));  // as c10::Half: through float
    } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<Value>) {
      return float_to_integer<To>(static_cast<double>(value));
    } else {
      return static_cast<To>(value);
    }
  }
}

template <typename To, typename From>
void cast_typed(void* dst, const void* src, size_t count) {
  auto* out = static_cast<Storage<To>*>(dst);
  const auto* in = static_cast<const Storage<From>*>(src);
  for (size_t i = 0; i < count; ++i)
    out[i] = convert<To, From>(in[i]);
}

template <typename Fn>
decltype(auto) visit_type(ScalarType type, Fn&& fn) {
  return visit_dtype(type, [&](auto tag) { return fn(tag); });
}

}  // namespace

void generic_reduce(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
                    size_t begin, size_t end) {
  visit_type(type,
             [&](auto tag) { reduce_typed<decltype(tag)>(op, dst, srcs, num_srcs, begin, end); });
}

void generic_binary(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b,
                    size_t begin, size_t end) {
  visit_type(type, [&](auto tag) {
    using T = decltype(tag);
    SHMCCL_CHECK((!std::is_same_v<T, bool>), "no bool binary kernel for op ", static_cast<int>(op));
    SHMCCL_CHECK(op == BinaryOp::kSub || op == BinaryOp::kDiv, "generic_binary is for sub and div");
    if constexpr (!std::is_same_v<T, bool>) {
      using A = Acc<T>;
      const void* const srcs[2] = {a, b};
      const auto same = [](A x) { return x; };
      if (op == BinaryOp::kSub) {
        reduce_range<T>(
            dst, srcs, 2, begin, end, [](A x, A y) { return Ops<T>::sub(x, y); }, same);
      } else {
        reduce_range<T>(
            dst, srcs, 2, begin, end, [](A x, A y) { return Ops<T>::div(x, y); }, same);
      }
    }
  });
}

void generic_cast(void* dst, ScalarType dst_type, const void* src, ScalarType src_type,
                  size_t count) {
  visit_type(dst_type, [&](auto to) {
    visit_type(src_type,
               [&](auto from) { cast_typed<decltype(to), decltype(from)>(dst, src, count); });
  });
}

void generic_fill(void* dst, ScalarType type, size_t count, const void* value) {
  const size_t size = element_size(type);
  unsigned char element[8];
  std::memcpy(element, value, size);
  if (type == ScalarType::Bool) element[0] = element[0] != 0;
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < count; ++i)
    std::memcpy(out + i * size, element, size);
}

void generic_divide(ScalarType type, void* data, size_t begin, size_t end, int divisor) {
  visit_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      auto* values = static_cast<T*>(data);
      for (size_t i = begin; i < end; ++i)
        values[i] = Ops<T>::average(values[i], divisor);
    }
  });
}

}  // namespace shmccl::kernels::detail
