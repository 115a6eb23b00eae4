// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Fused operators on the simulated NPU, spelled like torch_npu / MindSpeed.
//
// npu_grouped_mat_mul_all_reduce: each rank holds a column shard of every x_i and the matching
// row shard of every weight_i; every rank ends with
//   y_i = sum over ranks (x_i,r @ weight_i,r) + bias_i      (bias counted once in total).
// The GEMMs run on oneDNN with float32 accumulation; each rank's partial result (with the bias on
// the group's rank 0) is rounded to x's dtype, then one all-reduce in that dtype sums the partials
// in float32 and rounds again: the numerics of npu_grouped_matmul followed by all_reduce. The
// all-reduce overlaps later GEMMs only in rounds (comm_turn > 0, or comm_turn 0 when every rank
// has a CPU to spare); docs/ops.md says how.
//
// split_item (as the reference operator):
//   0: x, weight and y are lists of group_num tensors; group_list empty.
//   1: x is one tensor whose rows group_list splits; weight and y are lists.
//   2: x and weight are lists, group_list empty; y is one tensor, the groups' rows stacked.
//   3: x and y are single tensors split by group_list; weight is a list of 2-D tensors or one
//      3-D tensor [group_num, k, n].
// group_list_type 0: cumulative row ends ({10, 30}: 10 rows, then 20); 1: row counts.
// dtypes: float16 x/weight/bias/y; bfloat16 x/weight, float32 bias, bfloat16 y; float32 for all.
// comm_turn: 0 lets the operator choose how to pipeline the communication; k > 0 sends it in k
// rounds. Runs in the order of the current stream of x's device and returns when y is ready.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmccl/tensor.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

struct GroupedMatmulAllReduceOptions {
  std::vector<Tensor> bias{};         // empty: no bias
  std::vector<int64_t> group_list{};  // empty: none
  int64_t split_item = 0;             // 0..3
  std::string reduce_op = "sum";
  int64_t comm_turn = 0;
  int64_t group_list_type = 0;  // 0: cumulative row ends (the reference), 1: row counts
};

std::vector<Tensor> npu_grouped_mat_mul_all_reduce(
    const std::vector<Tensor>& x, const std::vector<Tensor>& weight, const std::string& hcomm,
    const GroupedMatmulAllReduceOptions& options = {});

// The same grouped matmul without communication (torch_npu's npu_grouped_matmul): y_i = x_i @
// weight_i + bias_i on this rank alone. Same arguments, checks and kernels.
struct GroupedMatmulOptions {
  std::vector<Tensor> bias{};
  std::vector<int64_t> group_list{};
  int64_t split_item = 0;
  int64_t group_list_type = 0;
};

std::vector<Tensor> npu_grouped_matmul(const std::vector<Tensor>& x,
                                       const std::vector<Tensor>& weight,
                                       const GroupedMatmulOptions& options = {});

}  // namespace shmccl

#pragma GCC visibility pop
