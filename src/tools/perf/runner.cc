// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "runner.h"

#include <chrono>
#include <deque>
#include <memory>

#include "reference.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::perf {
namespace {

// The tensors of one measurement. In place, one views the other (all-gather: the input is the
// rank's slice of the output; reduce-scatter: the output is the rank's slice of the input);
// all-reduce and broadcast have one buffer, which both name.
struct Buffers {
  Tensor input;
  Tensor output;
  int64_t input_first = 0;  // global index of the input's first element (for the pattern)
};

Buffers allocate(Collective collective, const SizePlan& plan, ScalarType dtype, Device device,
                 int rank, bool in_place) {
  Buffers buffers;
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kAllGatherUneven:
      buffers.output = empty({plan.count}, dtype, device);
      buffers.input = in_place ? buffers.output.narrow(0, plan.offset(rank), plan.split(rank))
                               : empty({plan.split(rank)}, dtype, device);
      buffers.input_first = plan.offset(rank);
      break;
    case Collective::kReduceScatter:
    case Collective::kReduceScatterUneven:
      buffers.input = empty({plan.count}, dtype, device);
      buffers.output = in_place ? buffers.input.narrow(0, plan.offset(rank), plan.split(rank))
                                : empty({plan.split(rank)}, dtype, device);
      break;
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      buffers.input = empty({plan.count}, dtype, device);
      buffers.output = buffers.input;
      break;
  }
  return buffers;
}

// Lets `fill(host pointer)` write the tensor's elements: in place for a host tensor, through a
// host staging tensor (one synchronous copy) for an NPU tensor.
template <typename Fill>
void write(Tensor tensor, Fill&& fill) {
  if (tensor.numel() == 0) return;
  if (tensor.is_cpu()) {
    fill(tensor.data_ptr());
    return;
  }
  Tensor staging = empty(tensor.sizes(), tensor.dtype());
  fill(staging.data_ptr());
  tensor.copy_(staging);
}

// Output first, then input: where they alias, the input's values win.
void fill_with_pattern(Buffers& buffers, const DataPattern& pattern, int rank) {
  write(buffers.output, [&](void* data) { pattern.fill_poison(data, buffers.output.numel()); });
  write(buffers.input,
        [&](void* data) { pattern.fill(data, buffers.input.numel(), rank, buffers.input_first); });
}

int64_t sum_over_ranks(int64_t value) {
  Tensor total = from_vector<int64_t>({value});
  all_reduce(total, ReduceOp::SUM);
  return total.data_ptr<int64_t>()[0];
}

double max_over_ranks(double value) {
  Tensor slowest = from_vector<double>({value});
  all_reduce(slowest, ReduceOp::MAX);
  return slowest.data_ptr<double>()[0];
}

}  // namespace

Measurement Runner::measure(const SizePlan& plan, ScalarType dtype, ReduceOp op, bool in_place) {
  const Collective collective = options_.collective;
  const Device device =
      options_.placement == Placement::kNpu ? Device::npu(npu::current_device()) : Device::cpu();
  Buffers buffers = allocate(collective, plan, dtype, device, rank_, in_place);
  const DataPattern pattern(dtype, op, is_reducing(collective), world_);

  auto issue = [&](bool async_op) -> std::shared_ptr<Work> {
    switch (collective) {
      case Collective::kAllGather:
        return all_gather_into_tensor(buffers.output, buffers.input, nullptr, async_op);
      case Collective::kAllGatherUneven:
        return all_gather_into_tensor_uneven(buffers.output, buffers.input, plan.splits, nullptr,
                                             async_op);
      case Collective::kReduceScatter:
        return reduce_scatter_tensor(buffers.output, buffers.input, op, nullptr, async_op);
      case Collective::kReduceScatterUneven:
        return reduce_scatter_tensor_uneven(buffers.output, buffers.input, plan.splits, op, nullptr,
                                            async_op);
      case Collective::kAllReduce:
        return all_reduce(buffers.input, op, nullptr, async_op);
      case Collective::kBroadcast:
        return broadcast(buffers.input, options_.root, nullptr, async_op);
    }
    return nullptr;
  };
  // `iterations` ops, synchronous or with up to async_depth in flight; returns once all are done.
  auto run = [&](int iterations) {
    const size_t depth = static_cast<size_t>(options_.async_depth);
    if (depth == 0) {
      for (int i = 0; i < iterations; ++i)
        issue(false);
      return;
    }
    std::deque<std::shared_ptr<Work>> in_flight;
    for (int i = 0; i < iterations; ++i) {
      if (in_flight.size() == depth) {
        in_flight.front()->wait();
        in_flight.pop_front();
      }
      in_flight.push_back(issue(true));
    }
    for (; !in_flight.empty(); in_flight.pop_front())
      in_flight.front()->wait();
  };

  if (options_.check) {
    fill_with_pattern(buffers, pattern, rank_);
  } else {
    buffers.output.fill_(0);
    buffers.input.fill_(1);
  }
  run(options_.warmup_iters);
  barrier();
  const auto start = std::chrono::steady_clock::now();
  run(options_.iters);
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      options_.iters;
  Measurement measurement;
  measurement.seconds = max_over_ranks(mine);
  if (!options_.check) return measurement;

  // Checked after as many ops in flight as were timed (at least two in a row), where running
  // an op again leaves the same result: a reduction in place (all-reduce's SUM, say) would
  // reduce its own result, so it is checked after one op.
  const bool repeatable =
      collective == Collective::kAllGather || collective == Collective::kAllGatherUneven ||
      collective == Collective::kBroadcast ||
      ((collective == Collective::kReduceScatter ||
        collective == Collective::kReduceScatterUneven) &&
       !in_place) ||
      (collective == Collective::kAllReduce && (op == ReduceOp::MIN || op == ReduceOp::MAX));
  fill_with_pattern(buffers, pattern, rank_);
  run(repeatable ? std::max(2, options_.async_depth) : 1);
  if (rank_ == options_.corrupt_rank && buffers.output.numel() > 0) {
    write(buffers.output.narrow(0, 0, 1), [&](void* data) { pattern.fill_poison(data, 1); });
  }
  const Tensor result = buffers.output.is_cpu() ? buffers.output : buffers.output.cpu();
  const auto* data = static_cast<const char*>(result.data_ptr());
  const auto element = static_cast<int64_t>(element_size(dtype));
  int64_t wrong = 0;
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kAllGatherUneven:
      for (int r = 0; r < world_; ++r) {
        wrong += pattern.count_wrong_values(data + plan.offset(r) * element, plan.split(r), r,
                                            plan.offset(r));
      }
      break;
    case Collective::kReduceScatter:
    case Collective::kReduceScatterUneven:
      wrong = pattern.count_wrong_reduced(data, plan.split(rank_), plan.offset(rank_));
      break;
    case Collective::kAllReduce:
      wrong = pattern.count_wrong_reduced(data, plan.count, 0);
      break;
    case Collective::kBroadcast:
      wrong = pattern.count_wrong_values(data, plan.count, options_.root, 0);
      break;
  }
  measurement.wrong = sum_over_ranks(wrong);
  return measurement;
}

}  // namespace shmccl::perf
