// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Random collectives for the reliability suite (faults, fuzz, soak): every rank draws the same
// call from the same random stream (op, dtype, reduce op, rows, uneven splits including zeros,
// host or NPU tensors, sync or async), runs it on a group, and checks its own result against a
// reference computed locally from the deterministic inputs of every rank (collectives/
// reference.h). Header-only; not thread-safe.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "collectives/reference.h"

namespace shmccl::testing {

enum class RandomOp {
  kAllGatherUneven,
  kReduceScatterUneven,
  kAllReduce,
  kBroadcast,
  kAllGatherList,
  kAllGatherEven,
  kReduceScatterEven,
  kBarrier,
};
inline constexpr int kRandomOps = 8;

inline const char* random_op_name(RandomOp op) {
  switch (op) {
    case RandomOp::kAllGatherUneven:
      return "all_gather_into_tensor_uneven";
    case RandomOp::kReduceScatterUneven:
      return "reduce_scatter_tensor_uneven";
    case RandomOp::kAllReduce:
      return "all_reduce";
    case RandomOp::kBroadcast:
      return "broadcast";
    case RandomOp::kAllGatherList:
      return "all_gather";
    case RandomOp::kAllGatherEven:
      return "all_gather_into_tensor";
    case RandomOp::kReduceScatterEven:
      return "reduce_scatter_tensor";
    case RandomOp::kBarrier:
      return "barrier";
  }
  return "?";
}

// One call, the same on every rank of the group.
struct OpSpec {
  RandomOp op = RandomOp::kAllReduce;
  ScalarType dtype = kFloat32;
  ReduceOp reduce = ReduceOp::SUM;
  std::vector<int64_t> splits;  // rows per group rank (uneven and list forms)
  int64_t rows = 0;             // per rank for the even forms, total for all-reduce / broadcast
  int64_t row = 1;              // elements per row
  int root = 0;                 // broadcast source, group rank
  bool on_npu = true;
  bool async_op = false;
  int salt = 0;  // varies the inputs between calls

  std::string describe() const {
    std::string text = std::string(random_op_name(op)) + "(" + dtype_name(dtype) + ", " +
                       reduce_op_name(reduce) + ", rows " + std::to_string(rows) + ", row " +
                       std::to_string(row) + ", splits [";
    for (size_t i = 0; i < splits.size(); ++i)
      text += (i ? "," : "") + std::to_string(splits[i]);
    return text + "], " + (on_npu ? "npu" : "host") + (async_op ? ", async)" : ")");
  }
};

// Element counts stay below `max_elements` per tensor (rows * row).
inline OpSpec random_op_spec(std::mt19937_64& rng, int world, int64_t max_elements,
                             bool allow_async = true) {
  auto pick = [&rng](int64_t low, int64_t high) {  // [low, high]
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  static const ScalarType kDtypes[] = {kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16};
  static const ReduceOp kReduces[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                                      ReduceOp::MAX, ReduceOp::AVG};
  OpSpec spec;
  spec.op = static_cast<RandomOp>(pick(0, kRandomOps - 1));
  spec.dtype = kDtypes[pick(0, 5)];
  spec.reduce = kReduces[pick(0, 4)];
  spec.row = pick(0, 3) == 0 ? pick(2, 5) : 1;
  // Mostly small (inline path), sometimes large enough for the work pool.
  const int64_t max_rows = std::max<int64_t>(1, max_elements / spec.row / world);
  const int64_t scale = pick(0, 2) == 0 ? max_rows : std::min<int64_t>(max_rows, 64);
  spec.splits.resize(static_cast<size_t>(world));
  for (int64_t& split : spec.splits)
    split = pick(0, 4) == 0 ? 0 : pick(0, scale);
  spec.rows = pick(1, std::max<int64_t>(1, scale));
  spec.root = static_cast<int>(pick(0, world - 1));
  spec.on_npu = pick(0, 3) != 0;
  spec.async_op = allow_async && pick(0, 2) == 0;
  spec.salt = static_cast<int>(pick(0, 1000));
  return spec;
}

// Deterministic input values of `rank` as a host tensor of `shape`.
inline Tensor values_of(const OpSpec& spec, int rank, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t size : shape)
    numel *= size;
  std::vector<double> values(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    values[static_cast<size_t>(i)] = input_value(spec.reduce, spec.dtype, rank, i, spec.salt);
  }
  return from_vector<double>(values, shape).to(spec.dtype);
}

// The reduction over every rank of element `index` of their inputs.
inline double reduced_value(const OpSpec& spec, int world, int64_t index) {
  std::vector<double> values(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    values[static_cast<size_t>(r)] = input_value(spec.reduce, spec.dtype, r, index, spec.salt);
  return reduce_values(spec.reduce, spec.dtype, values);
}

// A call prepared on one rank: its tensors, launched on a group, then checked.
class PreparedOp {
 public:
  PreparedOp(OpSpec spec, int rank, int world)
      : spec_(std::move(spec)), rank_(rank), world_(world) {
    const Device device = spec_.on_npu ? Device::npu(npu::current_device()) : Device::cpu();
    auto place = [&](const Tensor& host) { return host.to(device); };
    auto zeros_on = [&](const std::vector<int64_t>& shape) {
      return zeros(shape, spec_.dtype, device);
    };
    const int64_t total = sum(spec_.splits);
    const int64_t mine = spec_.splits[static_cast<size_t>(rank_)];
    switch (spec_.op) {
      case RandomOp::kAllGatherUneven:
        input_ = place(values_of(spec_, rank_, {mine, spec_.row}));
        output_ = zeros_on({total, spec_.row});
        break;
      case RandomOp::kReduceScatterUneven:
        input_ = place(values_of(spec_, rank_, {total, spec_.row}));
        output_ = zeros_on({mine, spec_.row});
        break;
      case RandomOp::kAllReduce:
      case RandomOp::kBroadcast:
        input_ = place(values_of(spec_, rank_, {spec_.rows, spec_.row}));
        break;
      case RandomOp::kAllGatherList:
        input_ = place(values_of(spec_, rank_, {mine, spec_.row}));
        for (int r = 0; r < world_; ++r)
          outputs_.push_back(zeros_on({spec_.splits[static_cast<size_t>(r)], spec_.row}));
        break;
      case RandomOp::kAllGatherEven:
        input_ = place(values_of(spec_, rank_, {spec_.rows, spec_.row}));
        output_ = zeros_on({world_ * spec_.rows, spec_.row});
        break;
      case RandomOp::kReduceScatterEven:
        input_ = place(values_of(spec_, rank_, {world_ * spec_.rows, spec_.row}));
        output_ = zeros_on({spec_.rows, spec_.row});
        break;
      case RandomOp::kBarrier:
        break;
    }
  }

  const OpSpec& spec() const { return spec_; }

  std::shared_ptr<Work> launch(const ProcessGroupPtr& group) {
    ProcessGroup& g = group ? *group : *default_group();
    switch (spec_.op) {
      case RandomOp::kAllGatherUneven:
        return g.all_gather_into_tensor_uneven(output_, input_, spec_.splits, spec_.async_op);
      case RandomOp::kReduceScatterUneven:
        return g.reduce_scatter_tensor_uneven(output_, input_, spec_.splits, spec_.reduce,
                                              spec_.async_op);
      case RandomOp::kAllReduce:
        return g.all_reduce(input_, spec_.reduce, spec_.async_op);
      case RandomOp::kBroadcast:
        return g.broadcast(input_, spec_.root, spec_.async_op);
      case RandomOp::kAllGatherList:
        return g.all_gather(outputs_, input_, spec_.async_op);
      case RandomOp::kAllGatherEven:
        return g.all_gather_into_tensor(output_, input_, spec_.async_op);
      case RandomOp::kReduceScatterEven:
        return g.reduce_scatter_tensor(output_, input_, spec_.reduce, spec_.async_op);
      case RandomOp::kBarrier:
        return g.barrier(spec_.async_op);
    }
    return nullptr;
  }

  // Throws RequirementFailed naming the call when this rank's result is wrong.
  void verify() const {
    const std::string what = "rank " + std::to_string(rank_) + ": " + spec_.describe();
    const int64_t row = spec_.row;
    switch (spec_.op) {
      case RandomOp::kAllGatherUneven: {
        int64_t at = 0;
        for (int r = 0; r < world_; ++r) {
          const int64_t rows = spec_.splits[static_cast<size_t>(r)];
          require_close(output_.narrow(0, at, rows), values_of(spec_, r, {rows, row}), what);
          at += rows;
        }
        break;
      }
      case RandomOp::kAllGatherList:
        for (int r = 0; r < world_; ++r) {
          const int64_t rows = spec_.splits[static_cast<size_t>(r)];
          require_close(outputs_[static_cast<size_t>(r)], values_of(spec_, r, {rows, row}), what);
        }
        break;
      case RandomOp::kAllGatherEven:
        for (int r = 0; r < world_; ++r) {
          require_close(output_.narrow(0, r * spec_.rows, spec_.rows),
                        values_of(spec_, r, {spec_.rows, row}), what);
        }
        break;
      case RandomOp::kReduceScatterUneven: {
        int64_t first = 0;
        for (int r = 0; r < rank_; ++r)
          first += spec_.splits[static_cast<size_t>(r)];
        require_close(output_, reduced(first * row, output_.sizes()), what);
        break;
      }
      case RandomOp::kReduceScatterEven:
        require_close(output_, reduced(rank_ * spec_.rows * row, output_.sizes()), what);
        break;
      case RandomOp::kAllReduce:
        require_close(input_, reduced(0, input_.sizes()), what);
        break;
      case RandomOp::kBroadcast:
        require_close(input_, values_of(spec_, spec_.root, {spec_.rows, row}), what);
        break;
      case RandomOp::kBarrier:
        break;
    }
  }

 private:
  static int64_t sum(const std::vector<int64_t>& values) {
    int64_t total = 0;
    for (int64_t v : values)
      total += v;
    return total;
  }
  Tensor reduced(int64_t first, const std::vector<int64_t>& shape) const {
    int64_t numel = 1;
    for (int64_t size : shape)
      numel *= size;
    std::vector<double> values(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i)
      values[static_cast<size_t>(i)] = reduced_value(spec_, world_, first + i);
    return from_vector<double>(values, shape).to(spec_.dtype);
  }

  OpSpec spec_;
  int rank_;
  int world_;
  Tensor input_, output_;
  std::vector<Tensor> outputs_;
};

}  // namespace shmccl::testing
