// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Element types of tensors, spelled as LibTorch spells them (shmccl::kFloat32 ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>

#include "shmccl/half.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

enum class ScalarType : int8_t {
  Bool,
  Int8,
  UInt8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
using Dtype = ScalarType;

inline constexpr int kNumScalarTypes = 10;

inline constexpr ScalarType kBool = ScalarType::Bool;
inline constexpr ScalarType kInt8 = ScalarType::Int8;
inline constexpr ScalarType kUInt8 = ScalarType::UInt8;
inline constexpr ScalarType kInt16 = ScalarType::Int16;
inline constexpr ScalarType kInt32 = ScalarType::Int32;
inline constexpr ScalarType kInt64 = ScalarType::Int64;
inline constexpr ScalarType kFloat16 = ScalarType::Float16;
inline constexpr ScalarType kHalf = ScalarType::Float16;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kFloat32 = ScalarType::Float32;
inline constexpr ScalarType kFloat = ScalarType::Float32;
inline constexpr ScalarType kFloat64 = ScalarType::Float64;
inline constexpr ScalarType kDouble = ScalarType::Float64;

// Bytes per element.
constexpr size_t element_size(ScalarType type) noexcept {
  switch (type) {
    case ScalarType::Bool:
    case ScalarType::Int8:
    case ScalarType::UInt8:
      return 1;
    case ScalarType::Int16:
    case ScalarType::Float16:
    case ScalarType::BFloat16:
      return 2;
    case ScalarType::Int32:
    case ScalarType::Float32:
      return 4;
    case ScalarType::Int64:
    case ScalarType::Float64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating_point(ScalarType type) noexcept {
  return type == ScalarType::Float16 || type == ScalarType::BFloat16 ||
         type == ScalarType::Float32 || type == ScalarType::Float64;
}

constexpr bool is_valid(ScalarType type) noexcept {
  return static_cast<int>(type) >= 0 && static_cast<int>(type) < kNumScalarTypes;
}

// "float32", "bfloat16", "int64", "bool" ...
const char* dtype_name(ScalarType type) noexcept;
// The inverse of dtype_name; also accepts torch's aliases ("float", "half", "double", "long").
// Throws InvalidArgument on an unknown name.
ScalarType dtype_from_name(const std::string& name);

inline std::ostream& operator<<(std::ostream& out, ScalarType type) {
  return out << dtype_name(type);
}

// The C++ element type of each dtype and back.
template <typename T>
struct ScalarTypeOf;
template <>
struct ScalarTypeOf<bool> : std::integral_constant<ScalarType, kBool> {};
template <>
struct ScalarTypeOf<int8_t> : std::integral_constant<ScalarType, kInt8> {};
template <>
struct ScalarTypeOf<uint8_t> : std::integral_constant<ScalarType, kUInt8> {};
template <>
struct ScalarTypeOf<int16_t> : std::integral_constant<ScalarType, kInt16> {};
template <>
struct ScalarTypeOf<int32_t> : std::integral_constant<ScalarType, kInt32> {};
template <>
struct ScalarTypeOf<int64_t> : std::integral_constant<ScalarType, kInt64> {};
template <>
struct ScalarTypeOf<Half> : std::integral_constant<ScalarType, kFloat16> {};
template <>
struct ScalarTypeOf<BFloat16> : std::integral_constant<ScalarType, kBFloat16> {};
template <>
struct ScalarTypeOf<float> : std::integral_constant<ScalarType, kFloat32> {};
template <>
struct ScalarTypeOf<double> : std::integral_constant<ScalarType, kFloat64> {};

template <typename T>
inline constexpr ScalarType scalar_type_of_v = ScalarTypeOf<T>::value;

// Calls fn(T{}) with T the element type of `type`: dispatch from a runtime dtype to a template.
template <typename Fn>
decltype(auto) visit_dtype(ScalarType type, Fn&& fn) {
  switch (type) {
    case ScalarType::Bool:
      return fn(bool{});
    case ScalarType::Int8:
      return fn(int8_t{});
    case ScalarType::UInt8:
      return fn(uint8_t{});
    case ScalarType::Int16:
      return fn(int16_t{});
    case ScalarType::Int32:
      return fn(int32_t{});
    case ScalarType::Int64:
      return fn(int64_t{});
    case ScalarType::Float16:
      return fn(Half{});
    case ScalarType::BFloat16:
      return fn(BFloat16{});
    case ScalarType::Float32:
      return fn(float{});
    case ScalarType::Float64:
      break;
  }
  return fn(double{});
}

}  // namespace shmccl

#pragma GCC visibility pop
