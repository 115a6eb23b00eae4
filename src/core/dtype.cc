// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "shmccl/dtype.hpp"

#include "core/check.h"
#include "shmccl/reduce_op.hpp"

namespace shmccl {

const char* dtype_name(ScalarType type) noexcept {
  switch (type) {
    case ScalarType::Bool:
      return "bool";
    case ScalarType::Int8:
      return "int8";
    case ScalarType::UInt8:
      return "uint8";
    case ScalarType::Int16:
      return "int16";
    case ScalarType::Int32:
      return "int32";
    case ScalarType::Int64:
      return "int64";
    case ScalarType::Float16:
      return "float16";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Float32:
      return "float32";
    case ScalarType::Float64:
      return "float64";
  }
  return "invalid";
}

ScalarType dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    const auto type = static_cast<ScalarType>(i);
    if (name == dtype_name(type)) return type;
  }
  if (name == "half" || name == "fp16") return kFloat16;
  if (name == "bf16") return kBFloat16;
  if (name == "float" || name == "fp32") return kFloat32;
  if (name == "double" || name == "fp64") return kFloat64;
  if (name == "long") return kInt64;
  if (name == "int") return kInt32;
  if (name == "short") return kInt16;
  if (name == "char") return kInt8;
  if (name == "byte") return kUInt8;
  throw InvalidArgument(detail::concat("unknown dtype '", name,
                                       "'; expected one of bool, int8, uint8, int16, int32, "
                                       "int64, float16, bfloat16, float32, float64"));
}

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::SUM:
      return "sum";
    case ReduceOp::PRODUCT:
      return "product";
    case ReduceOp::MIN:
      return "min";
    case ReduceOp::MAX:
      return "max";
    case ReduceOp::AVG:
      return "avg";
  }
  return "invalid";
}

}  // namespace shmccl
