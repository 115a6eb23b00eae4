// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The fused grouped matmul + all-reduce. Every group's partial product goes into one float32
// buffer in device memory (peers read it in place: the all-reduce is zero-copy); the buffer is
// cut into rounds (comm_turn), and each round's all-reduce runs on the group's communication
// stream while the GEMMs of the next round run here. The epilogue (sum + bias, one rounding to
// x's dtype) of a round runs as soon as its all-reduce is done, while its rows are still warm.
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "collectives/unordered_ops.h"
#include "core/check.h"
#include "core/logging.h"
#include "device/kernels.h"
#include "device/tensor_memory.h"
#include "ops/grouped_matmul_plan.h"
#include "ops/matmul_engine.h"
#include "shmccl/ops.hpp"
#include "shmccl/process_group.hpp"
#include "shmccl/work.hpp"

namespace shmccl {
namespace {

using ops::GroupedMatmulPlan;
using ops::MatmulGroup;

// Rows [row_begin, row_end) of one group: the GEMM a round runs.
struct Unit {
  size_t group;
  int64_t row_begin;
  int64_t row_end;
};

struct Round {
  std::vector<Unit> units;
  int64_t begin = 0;  // elements of the partial buffer this round covers
  int64_t end = 0;
};

// Rounds below this size cost more in synchronisation than they hide (measured; see
// docs/performance.md, "Grouped matmul + all-reduce").
constexpr int64_t kMinRoundElements = 64 * 1024;
constexpr int kMaxAutoRounds = 8;

int auto_rounds(const GroupedMatmulPlan& plan) {
  const int64_t rounds = plan.partial_elements / (4 * kMinRoundElements);
  return static_cast<int>(std::clamp<int64_t>(rounds, 1, kMaxAutoRounds));
}

// Cuts the groups' rows into `count` rounds of about equal elements, at row boundaries.
std::vector<Round> make_rounds(const GroupedMatmulPlan& plan, int64_t count) {
  const int64_t total = plan.partial_elements;
  count = std::max<int64_t>(1, std::min<int64_t>(count, std::max<int64_t>(total, 1)));
  const int64_t target = (total + count - 1) / count;
  std::vector<Round> rounds(1);
  int64_t position = 0;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const MatmulGroup& group = plan.groups[g];
    int64_t row = 0;
    while (row < group.m) {
      Round& round = rounds.back();
      const int64_t room = (static_cast<int64_t>(rounds.size()) * target) - position;
      int64_t rows = std::max<int64_t>(1, (room + group.n - 1) / std::max<int64_t>(group.n, 1));
      rows = std::min(rows, group.m - row);
      round.units.push_back(Unit{g, row, row + rows});
      row += rows;
      position += rows * group.n;
      round.end = position;
      if (position >= static_cast<int64_t>(rounds.size()) * target &&
          static_cast<int64_t>(rounds.size()) < count) {
        rounds.push_back(Round{{}, position, position});
      }
    }
  }
  if (rounds.back().units.empty() && rounds.size() > 1) rounds.pop_back();
  return rounds;
}

class GroupedMatmulRunner {
 public:
  GroupedMatmulRunner(const GroupedMatmulPlan& plan, ProcessGroup* group)
      : plan_(plan), group_(group), engine_(ops::MatmulEngine::instance()) {}

  void run(int64_t comm_turn) {
    if (plan_.partial_elements == 0) return;
    partial_ = empty({plan_.partial_elements}, kFloat32, Device::npu(plan_.device));
    prepare_biases();
    const bool communicate = group_ != nullptr && group_->size() > 1;
    // Communication is CPU work here: it overlaps the GEMMs only on a CPU of its own. Without
    // one (a rank per core or more), rounds would just take turns with the GEMMs on the same
    // core, so the operator sends everything in one all-reduce after the GEMMs.
    const int cpus = ops::cpu_share();
    int64_t count = comm_turn;
    if (count == 0) count = communicate && cpus >= 2 ? auto_rounds(plan_) : 1;
    threads_ = ops::gemm_threads(communicate && count > 1 && cpus >= 2 ? cpus - 1 : cpus);
    const std::vector<Round> rounds = make_rounds(plan_, count);
    // The all-reduce of round r runs on the communication stream while round r+1's GEMMs run
    // here; each round's epilogue runs once its sums are in.
    std::deque<std::pair<const Round*, std::shared_ptr<Work>>> in_flight;
    for (const Round& round : rounds) {
      for (const Unit& unit : round.units)
        gemm(unit);
      if (!communicate) {
        epilogue(round);
        continue;
      }
      Tensor slice = partial_.narrow(0, round.begin, round.end - round.begin);
      if (rounds.size() == 1) {
        group_->all_reduce(slice);  // nothing to overlap: no hand-off to the stream's thread
        epilogue(round);
        continue;
      }
      in_flight.emplace_back(&round, collectives::all_reduce_unordered(*group_, slice));
      // Keep one round in flight: finish the previous one while this one communicates.
      while (in_flight.size() > 1)
        finish_oldest(in_flight);
    }
    while (!in_flight.empty())
      finish_oldest(in_flight);
  }

 private:
  void finish_oldest(std::deque<std::pair<const Round*, std::shared_ptr<Work>>>& in_flight) {
    auto [round, work] = in_flight.front();
    in_flight.pop_front();
    try {
      work->wait();
    } catch (...) {
      // Later rounds' works fail with the group; wait for them so none outlives the buffer.
      for (auto& [later_round, later] : in_flight) {
        try {
          later->wait();
        } catch (...) {
        }
      }
      in_flight.clear();
      throw;
    }
    epilogue(*round);
  }

  void prepare_biases() {
    biases_.resize(plan_.groups.size());
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      const MatmulGroup& group = plan_.groups[g];
      if (!group.bias.defined()) continue;
      biases_[g].resize(static_cast<size_t>(group.n));
      kernels::cast(biases_[g].data(), kFloat32, group.bias.data_ptr(), group.bias.dtype(),
                    biases_[g].size());
    }
  }

  void gemm(const Unit& unit) {
    const MatmulGroup& group = plan_.groups[unit.group];
    const int64_t rows = unit.row_end - unit.row_begin;
    const size_t element = element_size(plan_.dtype);
    const auto* x = static_cast<const std::byte*>(group.x.data_ptr()) +
                    static_cast<size_t>(unit.row_begin * group.k) * element;
    float* c = partial_.data_ptr<float>() + group.partial_offset + unit.row_begin * group.n;
    const void* a = x;
    if (plan_.dtype == kFloat16) {
      // No float16 matmul on this ISA: widen this unit's rows of x to float32.
      converted_x_.resize(static_cast<size_t>(rows * group.k));
      kernels::cast(converted_x_.data(), kFloat32, x, kFloat16, converted_x_.size());
      a = converted_x_.data();
    }
    // Small GEMMs lose more to threading than they gain (measured 1.5-2.5x slower on 2 threads).
    const double macs =
        static_cast<double>(rows) * static_cast<double>(group.k) * static_cast<double>(group.n);
    const int threads = macs < kThreadedMacs ? 1 : threads_;
    engine_.matmul(ops::MatmulShape{rows, group.k, group.n, plan_.dtype}, a, group.k, group.weight,
                   c, threads);
  }

  // y = partial (+ bias), rounded once to y's dtype.
  void epilogue(const Round& round) {
    for (const Unit& unit : round.units) {
      const MatmulGroup& group = plan_.groups[unit.group];
      const size_t n = static_cast<size_t>(group.n);
      float* partial = partial_.data_ptr<float>() + group.partial_offset;
      auto* y = static_cast<std::byte*>(group.y.data_ptr());
      const size_t y_row_bytes = n * element_size(plan_.dtype);
      const std::vector<float>& bias = biases_[unit.group];
      if (bias.empty() && plan_.dtype == kFloat32) {
        kernels::copy(y + static_cast<size_t>(unit.row_begin) * y_row_bytes,
                      partial + unit.row_begin * group.n,
                      static_cast<size_t>(unit.row_end - unit.row_begin) * y_row_bytes);
        continue;
      }
      for (int64_t row = unit.row_begin; row < unit.row_end; ++row) {
        float* sums = partial + row * group.n;
        if (!bias.empty()) {
          kernels::binary(kernels::BinaryOp::kAdd, kFloat32, sums, sums, bias.data(), n);
        }
        kernels::cast(y + static_cast<size_t>(row) * y_row_bytes, plan_.dtype, sums, kFloat32, n);
      }
    }
  }

  static constexpr double kThreadedMacs = 2.0 * 1024 * 1024;

  const GroupedMatmulPlan& plan_;
  ProcessGroup* group_;
  ops::MatmulEngine& engine_;
  int threads_ = 1;
  Tensor partial_;
  std::vector<std::vector<float>> biases_;
  std::vector<float> converted_x_;
};

void run_plan(const GroupedMatmulPlan& plan, ProcessGroup* group, int64_t comm_turn) {
  device::run_ordered(Device::npu(plan.device),
                      [&] { GroupedMatmulRunner(plan, group).run(comm_turn); });
}

}  // namespace

std::vector<Tensor> npu_grouped_mat_mul_all_reduce(const std::vector<Tensor>& x,
                                                   const std::vector<Tensor>& weight,
                                                   const std::string& hcomm,
                                                   const GroupedMatmulAllReduceOptions& options) {
  constexpr const char* kOp = "npu_grouped_mat_mul_all_reduce";
  SHMCCL_CHECK_ARG(options.reduce_op == "sum", kOp, ": reduce_op [", options.reduce_op,
                   "] is not supported, which must be sum");
  SHMCCL_CHECK_ARG(options.comm_turn >= 0, kOp, ": comm_turn [", options.comm_turn,
                   "] is invalid, which must be 0 (the operator chooses) or a positive count of "
                   "communication rounds");
  ProcessGroupPtr group = group_from_comm_name(hcomm);
  GroupedMatmulPlan plan =
      ops::plan_grouped_matmul({kOp, x, weight, options.bias, options.group_list,
                                options.split_item, options.group_list_type});
  run_plan(plan, group.get(), options.comm_turn);
  return std::move(plan.outputs);
}

std::vector<Tensor> npu_grouped_matmul(const std::vector<Tensor>& x,
                                       const std::vector<Tensor>& weight,
                                       const GroupedMatmulOptions& options) {
  GroupedMatmulPlan plan =
      ops::plan_grouped_matmul({"npu_grouped_matmul", x, weight, options.bias, options.group_list,
                                options.split_item, options.group_list_type});
  run_plan(plan, nullptr, 0);
  return std::move(plan.outputs);
}

}  // namespace shmccl
