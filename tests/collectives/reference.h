// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Deterministic per-rank inputs and locally computed expected results for collective tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "multiprocess.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::testing {

inline constexpr ScalarType kAllTypes[] = {kBool,  kInt8,    kUInt8,    kInt16,   kInt32,
                                           kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                                       ReduceOp::MAX, ReduceOp::AVG};

// Rows per rank: a quarter of them 0, the others up to `max_rows`, reproducible from `seed`.
inline std::vector<int64_t> random_splits(int world, uint64_t seed, int64_t max_rows) {
  std::mt19937_64 generator(seed);
  std::vector<int64_t> splits(static_cast<size_t>(world));
  for (int64_t& rows : splits) {
    rows = generator() % 4 == 0 ? 0 : static_cast<int64_t>(generator() % (max_rows + 1));
  }
  return splits;
}

// A hash of (rank, index, salt): every rank's sequence of values differs from every other's,
// so a result that dropped, repeated or swapped a rank's data differs from the reference (a
// linear mix of the rank repeats with its period: ranks r and r + 5 had equal inputs).
inline uint64_t input_hash(int rank, int64_t index, int salt) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(index) + 1) * 0xBF58476D1CE4E5B9ull ^
               (static_cast<uint64_t>(salt) + 1) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

// Small values whose sums and products over 8 ranks are exact in every dtype.
inline double input_value(ReduceOp op, ScalarType dtype, int rank, int64_t index, int salt) {
  const uint64_t mix = input_hash(rank, index, salt);
  if (dtype == kBool) return (mix % 3) == 0 ? 1 : 0;
  const bool is_unsigned = dtype == kUInt8;
  if (op == ReduceOp::PRODUCT) {
    // A 2 on at most two of 8 ranks per element (ranks 4 apart), so a product stays within
    // +-4 and int8 never wraps; the signs come from the hash.
    if ((rank + index + salt) % 4 == 0) return 2;
    if (!is_unsigned && mix % 3 == 0) return -1;
    return 1;
  }
  const double value = static_cast<double>(mix % 5);
  return is_unsigned ? value : value - 2;
}

inline Tensor make_input(ReduceOp op, ScalarType dtype, int rank, const std::vector<int64_t>& shape,
                         int salt) {
  int64_t numel = 1;
  for (int64_t size : shape)
    numel *= size;
  std::vector<double> values(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i)
    values[static_cast<size_t>(i)] = input_value(op, dtype, rank, i, salt);
  return from_vector<double>(values, shape).to(dtype);
}

inline double reduce_values(ReduceOp op, ScalarType dtype, const std::vector<double>& values) {
  if (dtype == kBool) {
    bool any = false, all = true;
    for (double v : values) {
      any = any || v != 0;
      all = all && v != 0;
    }
    return (op == ReduceOp::PRODUCT || op == ReduceOp::MIN) ? all : any;
  }
  double result = values[0];
  for (size_t i = 1; i < values.size(); ++i) {
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
        result += values[i];
        break;
      case ReduceOp::PRODUCT:
        result *= values[i];
        break;
      case ReduceOp::MIN:
        result = std::min(result, values[i]);
        break;
      case ReduceOp::MAX:
        result = std::max(result, values[i]);
        break;
    }
  }
  if (op == ReduceOp::AVG) {
    result /= static_cast<double>(values.size());
    if (!is_floating_point(dtype)) result = std::trunc(result);
  }
  return result;
}

inline double tolerance(ScalarType dtype) {
  if (dtype == kFloat16 || dtype == kBFloat16) return 1e-2;
  if (dtype == kFloat32) return 1e-6;
  return 0;
}

// Compares on the host; the message names the first differing element.
inline void require_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  require(actual.sizes() == expected.sizes(), what + ": shape differs");
  const Tensor a = actual.cpu().to(kFloat64);
  const Tensor e = expected.cpu().to(kFloat64);
  const std::vector<double> got = a.to_vector<double>();
  const std::vector<double> want = e.to_vector<double>();
  const double tol = tolerance(actual.dtype());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * std::max(1.0, std::fabs(want[i]))) {
      throw RequirementFailed(str(what, ": element ", i, " is ", got[i], ", expected ", want[i]));
    }
  }
}

}  // namespace shmccl::testing
