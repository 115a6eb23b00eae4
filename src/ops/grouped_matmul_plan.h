// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// GroupedMatmulPlan: the arguments of a grouped matmul (with or without its all-reduce) after
// every constraint of the reference operator was checked, resolved into one GEMM per group and
// the output tensors the groups write. Built before anything runs, so bad input throws before
// any peer waits.
#pragma once

#include <cstdint>
#include <vector>

#include "shmccl/tensor.hpp"

namespace shmccl::ops {

struct MatmulGroup {
  Tensor x;       // [m, k]: this group's rows of x
  Tensor weight;  // [k, n]
  Tensor bias;    // [n], or undefined
  Tensor y;       // [m, n]: a view of the output (rows offset.. of y_flat)
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  int64_t offset = 0;  // where y starts in y_flat, in elements
};

struct GroupedMatmulPlan {
  ScalarType dtype = kFloat32;  // of x, weight and y
  int device = 0;
  std::vector<MatmulGroup> groups;
  std::vector<Tensor> outputs;  // what the operator returns: views of y_flat
  // Every group's y, one after the other in one storage (the group order of split_item 2 and 3's
  // stacked y), so that one all-reduce covers them all.
  Tensor y_flat;
  int64_t output_elements = 0;  // sum of m * n
  double flops = 0;             // 2 * sum of m * k * n
};

struct GroupedMatmulArgs {
  const char* op;  // the operator's name, for messages
  const std::vector<Tensor>& x;
  const std::vector<Tensor>& weight;
  const std::vector<Tensor>& bias;
  const std::vector<int64_t>& group_list;
  int64_t split_item;
  int64_t group_list_type;
};

// Checks everything and allocates the outputs. Throws InvalidArgument naming the constraint.
GroupedMatmulPlan plan_grouped_matmul(const GroupedMatmulArgs& args);

// The most tensors any list may hold (the reference's limit).
inline constexpr size_t kMaxGroupedTensors = 64;

}  // namespace shmccl::ops
