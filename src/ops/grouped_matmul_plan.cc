// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "ops/grouped_matmul_plan.h"

#include <ostream>
#include <string>

#include "core/check.h"

namespace shmccl::ops {
namespace {

// Names a list element in messages: "weight[2]".
struct Element {
  const char* list;
  size_t index;
};
std::ostream& operator<<(std::ostream& out, const Element& element) {
  return out << element.list << "[" << element.index << "]";
}

void check_list_length(const char* op, const char* list, size_t length) {
  SHMCCL_CHECK_ARG(length <= kMaxGroupedTensors, op, ": ", list, " has ", length,
                   " elements; at most ", kMaxGroupedTensors, " are supported");
}

void check_npu(const char* op, const Tensor& tensor, const Element& name, int device) {
  SHMCCL_CHECK_ARG(tensor.defined(), op, ": ", name, " is an undefined tensor");
  SHMCCL_CHECK_ARG(tensor.is_npu(), op, ": ", name,
                   " is a host tensor; x, weight and bias must be NPU tensors");
  SHMCCL_CHECK_ARG(tensor.device().index == device, op, ": ", name,
                   " is on npu:", tensor.device().index, " but x[0] is on npu:", device,
                   "; all tensors must be on one device");
}

// The bias dtype that goes with x's dtype (the reference: float16 -> float16, bfloat16 ->
// float32; beyond it: float32 -> float32).
ScalarType bias_dtype_for(ScalarType dtype) {
  return dtype == kFloat16 ? kFloat16 : kFloat32;
}

// The reference's text for the counts of x, weight and group_list under `split_item` (its
// _check_dims); shmccl's own detail follows it.
const char* count_rule(int64_t split_item) {
  switch (split_item) {
    case 0:
    case 2:
      return "When split_item = 0 or 2, the num of x tensors must equal the num of weight tensors, "
             "and there is supposed not to be group_list input";
    case 1:
      return "When split_item = 1, the num of x tensors must equal 1, and the num of weight "
             "tensors is supposed to equal the length of group_list";
    default:
      return "Invalid dim of weight. When split_item = 3, weight is a list of 2-D tensors as long "
             "as group_list, or one 3-D tensor whose first dim equals the length of group_list";
  }
}

// Row ranges of the groups of a split x, from group_list.
std::vector<int64_t> group_rows(const GroupedMatmulArgs& args, size_t group_num, int64_t rows) {
  const char* op = args.op;
  SHMCCL_CHECK_ARG(!args.group_list.empty(), op, ": ", count_rule(args.split_item), ": split_item ",
                   args.split_item, " splits x by group_list, which must not be empty");
  SHMCCL_CHECK_ARG(args.group_list.size() == group_num, op, ": ", count_rule(args.split_item),
                   ": group_list has ", args.group_list.size(), " elements but there are ",
                   group_num, " weights; they must be equal");
  std::vector<int64_t> counts(group_num);
  int64_t previous_end = 0;
  int64_t total = 0;
  for (size_t i = 0; i < group_num; ++i) {
    const int64_t value = args.group_list[i];
    if (args.group_list_type == 0) {
      SHMCCL_CHECK_ARG(value >= previous_end, op, ": group_list ", args.group_list,
                       " must be non-decreasing cumulative row ends (group_list_type 0), but "
                       "group_list[",
                       i, "] = ", value, " < ", previous_end);
      counts[i] = value - previous_end;
      previous_end = value;
      total = value;
    } else {
      SHMCCL_CHECK_ARG(value >= 0, op, ": group_list ", args.group_list,
                       " holds row counts (group_list_type 1), but group_list[", i, "] = ", value,
                       " is negative");
      counts[i] = value;
      SHMCCL_CHECK_ARG(!__builtin_add_overflow(total, value, &total), op, ": group_list ",
                       args.group_list, " holds row counts (group_list_type 1) whose sum ",
                       "overflows int64_t; x has ", rows, " rows");
    }
  }
  SHMCCL_CHECK_ARG(total == rows, op, ": group_list ", args.group_list,
                   args.group_list_type == 0 ? " ends at row " : " sums to ", total, " but x has ",
                   rows, " rows; they must be equal");
  return counts;
}

}  // namespace

GroupedMatmulPlan plan_grouped_matmul(const GroupedMatmulArgs& args) {
  const char* op = args.op;
  SHMCCL_CHECK_ARG(!args.x.empty() && !args.weight.empty(), op,
                   ": Neither x nor weight could be empty.");
  SHMCCL_CHECK_ARG(args.split_item >= 0 && args.split_item <= 3, op, ": The given split_item [",
                   args.split_item, "] is invalid, which must be one of 0/1/2/3");
  SHMCCL_CHECK_ARG(args.group_list_type == 0 || args.group_list_type == 1, op, ": group_list_type ",
                   args.group_list_type,
                   " is invalid, which must be 0 (cumulative row ends) or 1 (row counts)");
  check_list_length(op, "x", args.x.size());
  check_list_length(op, "weight", args.weight.size());
  check_list_length(op, "bias", args.bias.size());
  check_list_length(op, "group_list", args.group_list.size());

  const bool split_x = args.split_item == 1 || args.split_item == 3;
  const bool single_y = args.split_item == 2 || args.split_item == 3;
  const Tensor& x0 = args.x[0];
  SHMCCL_CHECK_ARG(x0.defined(), op, ": x[0] is an undefined tensor");
  SHMCCL_CHECK_ARG(x0.is_npu(), op,
                   ": x[0] is a host tensor; x, weight and bias must be NPU tensors");
  GroupedMatmulPlan plan;
  plan.device = x0.device().index;
  plan.dtype = x0.dtype();
  SHMCCL_CHECK_ARG(plan.dtype == kFloat16 || plan.dtype == kBFloat16 || plan.dtype == kFloat32, op,
                   ": x has dtype ", plan.dtype, "; supported are float16, bfloat16 and float32");

  // Weights: a list of 2-D tensors, or (split_item 3) one 3-D tensor [group_num, k, n].
  std::vector<Tensor> weights;
  if (args.split_item == 3 && args.weight.size() == 1 && args.weight[0].defined() &&
      args.weight[0].dim() == 3) {
    check_npu(op, args.weight[0], Element{"weight", 0}, plan.device);
    // Checked before the views are made: an empty [2^32, 0, n] weight costs no memory, its
    // views would.
    const int64_t groups = args.weight[0].size(0);
    SHMCCL_CHECK_ARG(groups > 0, op, ": Neither x nor weight could be empty.");
    SHMCCL_CHECK_ARG(groups <= static_cast<int64_t>(kMaxGroupedTensors), op, ": weight holds ",
                     groups, " groups; at most ", kMaxGroupedTensors, " are supported");
    for (int64_t g = 0; g < groups; ++g)
      weights.push_back(args.weight[0][g]);
  } else {
    weights = args.weight;
  }
  const size_t group_num = weights.size();

  if (split_x) {
    // (The reference has no text of its own for split_item 3's x count: the plain one.)
    if (args.split_item == 1) {
      SHMCCL_CHECK_ARG(args.x.size() == 1, op, ": ", count_rule(1), ": split_item 1 takes x as ",
                       "one tensor split by group_list, but x has ", args.x.size(), " tensors");
    }
    SHMCCL_CHECK_ARG(args.x.size() == 1, op, ": split_item ", args.split_item,
                     " takes x as one tensor split by group_list, but x has ", args.x.size(),
                     " tensors");
  } else {
    SHMCCL_CHECK_ARG(args.x.size() == group_num, op, ": ", count_rule(args.split_item),
                     ": split_item ", args.split_item, " takes one x per weight, but x has ",
                     args.x.size(), " tensors and weight ", group_num);
    SHMCCL_CHECK_ARG(args.group_list.empty(), op, ": ", count_rule(args.split_item),
                     ": group_list must be empty when split_item is ", args.split_item,
                     " (x is already one tensor per group), got ", args.group_list);
  }
  SHMCCL_CHECK_ARG(args.bias.empty() || args.bias.size() == group_num, op, ": bias has ",
                   args.bias.size(), " tensors but weight has ", group_num,
                   "; bias must be empty or one per group");

  for (size_t i = 0; i < args.x.size(); ++i) {
    const Element name{"x", i};
    check_npu(op, args.x[i], name, plan.device);
    SHMCCL_CHECK_ARG(args.x[i].dtype() == plan.dtype, op, ": ", name, " has dtype ",
                     args.x[i].dtype(), " but x[0] has ", plan.dtype, "; all x must agree");
    SHMCCL_CHECK_ARG(args.x[i].dim() == 2, op, ": ", name, " must be 2-D [m, k], got shape ",
                     args.x[i].sizes());
  }
  for (size_t i = 0; i < group_num; ++i) {
    const Element name{"weight", i};
    check_npu(op, weights[i], name, plan.device);
    SHMCCL_CHECK_ARG(weights[i].dtype() == plan.dtype, op, ": ", name, " has dtype ",
                     weights[i].dtype(), " but x has ", plan.dtype,
                     "; x and weight must have the same dtype");
    SHMCCL_CHECK_ARG(weights[i].dim() == 2, op, ": ", name, " must be 2-D [k, n], got shape ",
                     weights[i].sizes());
  }
  const ScalarType bias_dtype = bias_dtype_for(plan.dtype);
  for (size_t i = 0; i < args.bias.size(); ++i) {
    const Element name{"bias", i};
    check_npu(op, args.bias[i], name, plan.device);
    SHMCCL_CHECK_ARG(args.bias[i].dtype() == bias_dtype, op, ": ", name, " has dtype ",
                     args.bias[i].dtype(), " but x is ", plan.dtype, ", which takes a ", bias_dtype,
                     " bias (float16: float16 bias; bfloat16: float32 bias; float32: float32)");
  }

  std::vector<int64_t> rows(group_num);
  if (split_x) {
    rows = group_rows(args, group_num, x0.size(0));
  } else {
    for (size_t i = 0; i < group_num; ++i)
      rows[i] = args.x[i].size(0);
  }

  int64_t row_start = 0;
  int64_t total_rows = 0;
  for (size_t i = 0; i < group_num; ++i) {
    MatmulGroup group;
    group.m = rows[i];
    group.x = split_x ? x0.narrow(0, row_start, rows[i]) : args.x[i];
    group.k = group.x.size(1);
    group.weight = weights[i];
    group.n = weights[i].size(1);
    SHMCCL_CHECK_ARG(weights[i].size(0) == group.k, op, ": group ", i, ": x", split_x ? "" : "[",
                     split_x ? "" : std::to_string(i), split_x ? "" : "]", " has k = ", group.k,
                     " columns but weight[", i, "] has ", weights[i].size(0), " rows (shape ",
                     weights[i].sizes(), "); they must be equal");
    if (!args.bias.empty()) {
      group.bias = args.bias[i];
      SHMCCL_CHECK_ARG(group.bias.dim() == 1 && group.bias.size(0) == group.n, op, ": bias[", i,
                       "] must have shape [", group.n, "] (n of weight[", i, "]), got ",
                       group.bias.sizes());
    }
    if (single_y && i > 0) {
      SHMCCL_CHECK_ARG(group.n == plan.groups[0].n, op, ": split_item ", args.split_item,
                       " stacks every group's rows in one y, so all n must be equal, but weight[",
                       i, "] has n = ", group.n, " and weight[0] has n = ", plan.groups[0].n);
    }
    group.offset = plan.output_elements;
    // Shapes of empty inputs are free to be huge ([2^31, 0] @ [0, 2^33]): the output's size is
    // checked, not left to overflow.
    int64_t group_elements = 0;
    SHMCCL_CHECK_ARG(
        !__builtin_mul_overflow(group.m, group.n, &group_elements) &&
            !__builtin_add_overflow(plan.output_elements, group_elements, &plan.output_elements),
        op, ": group ", i, ": its output of ", group.m, " x ", group.n,
        " elements does not fit in int64_t with the groups before it");
    plan.flops += 2.0 * static_cast<double>(group.m) * static_cast<double>(group.k) *
                  static_cast<double>(group.n);
    if (split_x) row_start += rows[i];  // within x0's rows: no overflow
    SHMCCL_CHECK_ARG(!__builtin_add_overflow(total_rows, rows[i], &total_rows), op, ": group ", i,
                     ": its ", rows[i], " rows do not fit in int64_t with the groups before it");
    plan.groups.push_back(std::move(group));
  }

  plan.y_flat = empty({plan.output_elements}, plan.dtype, Device::npu(plan.device));
  for (MatmulGroup& group : plan.groups) {
    group.y = plan.y_flat.narrow(0, group.offset, group.m * group.n).view({group.m, group.n});
    if (!single_y) plan.outputs.push_back(group.y);
  }
  if (single_y) plan.outputs.push_back(plan.y_flat.view({total_rows, plan.groups[0].n}));
  return plan;
}

}  // namespace shmccl::ops
