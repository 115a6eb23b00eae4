// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The fused grouped matmul + all-reduce. Each rank computes every group's partial product
// (float32 accumulation), adds the bias if it is the group's rank 0 (so the bias counts once),
// and rounds it once to x's dtype, into y itself. Every group's y lives in one storage (y_flat),
// so one all-reduce in that dtype (float32 accumulation across ranks, one more rounding) finishes
// them all, zero-copy through the peers' device memory. These are the reference's numerics (its
// HCCL all-reduce sums the x-dtype outputs) and npu_grouped_matmul + all_reduce's, with half the
// bytes of a float32 all-reduce (a small call stays inline: one cache-line exchange, not the work
// pool). The rows are cut into rounds (comm_turn); each round's all-reduce runs on the group's
// communication stream while the GEMMs of the next round run here.
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "collectives/fault_injection.h"
#include "collectives/group_state.h"
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
  const int64_t rounds = plan.output_elements / (4 * kMinRoundElements);
  return static_cast<int>(std::clamp<int64_t>(rounds, 1, kMaxAutoRounds));
}

// Cuts the groups' rows into `count` rounds of about equal elements, at row boundaries.
std::vector<Round> make_rounds(const GroupedMatmulPlan& plan, int64_t count) {
  const int64_t total = plan.output_elements;
  count = std::max<int64_t>(1, std::min<int64_t>(count, std::max<int64_t>(total, 1)));
  const int64_t target = (total + count - 1) / count;
  std::vector<Round> rounds(1);
  int64_t position = 0;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const MatmulGroup& group = plan.groups[g];
    // No output: nothing to compute or send. (Its rows, taken one at a time since they move the
    // position by nothing, would be m units of nothing: 2^31 of them for a [2^31, 0] x.)
    if (group.n == 0) continue;
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

// The least CPU share among the ranks of `group`, agreed with one small all-reduce the first time
// a group asks (every rank asks at the same call: the first fused call with comm_turn 0 on it)
// and kept in the group's state.
int least_cpu_share(ProcessGroup& group, int mine) {
  detail::GroupState& state = group.state();
  if (const int agreed = state.agreed_cpu_share(); agreed > 0) [[likely]]
    return agreed;
  Tensor share = from_vector<int32_t>({mine});
  group.all_reduce(share, ReduceOp::MIN);
  const int least = share.to_vector<int32_t>()[0];
  state.set_agreed_cpu_share(least);
  return least;
}

class GroupedMatmulRunner {
 public:
  GroupedMatmulRunner(const GroupedMatmulPlan& plan, ProcessGroup* group)
      : plan_(plan), group_(group), engine_(ops::MatmulEngine::instance()) {}

  void run(int64_t comm_turn) {
    if (plan_.output_elements == 0) return;
    const bool communicate = group_ != nullptr && group_->size() > 1;
    add_bias_ = !communicate || group_->rank() == 0;  // the bias counts once in the sum
    std::deque<std::shared_ptr<Work>> in_flight;
    std::vector<Round> rounds;
    size_t r = 0;
    // What this rank computes on its own (biases, rounds, GEMMs) may fail (out of memory) while
    // its peers are on their way into the operator's all-reduces: it then fails the group.
    const auto locally = [&](auto&& compute) {
      try {
        compute();
      } catch (const std::exception& error) {
        if (communicate) give_up(error, r, rounds.size(), in_flight);
        throw;
      }
    };
    locally([&] { prepare_biases(); });
    // Communication is CPU work here: it overlaps the GEMMs only on a CPU of its own. Without
    // one (a rank per core or more), rounds would just take turns with the GEMMs on the same
    // core, so the operator sends everything in one all-reduce after the GEMMs.
    const int cpus = ops::cpu_share();
    int64_t count = comm_turn;
    // The rounds are collectives, so every rank must cut the same ones: the choice goes by the
    // group's least share, not this rank's (ranks bound to unequal sets of CPUs differ).
    if (count == 0)
      count = communicate && least_cpu_share(*group_, cpus) >= 2 ? auto_rounds(plan_) : 1;
    threads_ = ops::gemm_threads(communicate && count > 1 && cpus >= 2 ? cpus - 1 : cpus);
    locally([&] { rounds = make_rounds(plan_, count); });
    // The all-reduce of round r runs on the communication stream while round r+1's GEMMs run
    // here.
    for (; r < rounds.size(); ++r) {
      const Round& round = rounds[r];
      locally([&] {
        if (communicate) {
          collectives::fault::point(
              collectives::fault::Point::kGemm,
              group_->state().global_ranks()[static_cast<size_t>(group_->rank())], r + 1);
        }
        for (const Unit& unit : round.units)
          gemm(unit);
      });
      if (!communicate) continue;
      Tensor slice = plan_.y_flat.narrow(0, round.begin, round.end - round.begin);
      if (rounds.size() == 1) {
        group_->all_reduce(slice);  // nothing to overlap: no hand-off to the stream's thread
        continue;
      }
      in_flight.push_back(collectives::all_reduce_unordered(*group_, slice));
      // Keep one round in flight: wait for the previous one while this one communicates.
      while (in_flight.size() > 1)
        wait_oldest(in_flight);
    }
    while (!in_flight.empty())
      wait_oldest(in_flight);
  }

 private:
  // This rank cannot make the operator's remaining all-reduces, which its peers make or will make:
  // the group fails on every rank now, naming why, instead of leaving them waiting for the
  // timeout. The rounds already in flight end (they fail with the group or complete) before y
  // is handed back.
  void give_up(const std::exception& error, size_t round, size_t rounds,
               std::deque<std::shared_ptr<Work>>& in_flight) noexcept {
    try {
      // Peers read "the group was aborted by rank <r>: " before it.
      group_->abort(detail::concat(
          "npu_grouped_mat_mul_all_reduce could not compute its products",
          rounds > 1 ? detail::concat(" of round ", round + 1, " of ", rounds) : std::string(),
          ": ", error.what()));
    } catch (...) {
      // No memory for the reason: the group fails all the same (the first abort's reason wins).
      try {
        group_->abort("npu_grouped_mat_mul_all_reduce failed");
      } catch (...) {
      }
    }
    wait_all_quietly(in_flight);
  }

  // Waits for every work still in flight, whatever it ends with, so that none outlives y.
  static void wait_all_quietly(std::deque<std::shared_ptr<Work>>& in_flight) noexcept {
    for (const std::shared_ptr<Work>& work : in_flight) {
      try {
        work->wait();
      } catch (...) {
      }
    }
    in_flight.clear();
  }

  static void wait_oldest(std::deque<std::shared_ptr<Work>>& in_flight) {
    std::shared_ptr<Work> work = std::move(in_flight.front());
    in_flight.pop_front();
    try {
      work->wait();
    } catch (...) {
      wait_all_quietly(in_flight);  // later rounds fail with the group
      throw;
    }
  }

  void prepare_biases() {
    biases_.assign(plan_.groups.size(), {});
    if (!add_bias_) return;
    for (size_t g = 0; g < plan_.groups.size(); ++g) {
      const MatmulGroup& group = plan_.groups[g];
      if (!group.bias.defined()) continue;
      biases_[g].resize(static_cast<size_t>(group.n));
      kernels::cast(biases_[g].data(), kFloat32, group.bias.data_ptr(), group.bias.dtype(),
                    biases_[g].size());
    }
  }

  // One unit's GEMM in float32, plus the bias, rounded once to y's dtype into y (a float32 y is
  // written by the GEMM itself). Where the GEMM needs float32 room of its own (a float32 result to
  // round, float16 rows of x to widen), the unit's rows go through it in blocks that fit
  // kScratchFloats: the results stay in cache until rounded. The scratch is kept per thread for
  // the next call up to that size; a block wider (kMinBlockRows rows of more than 16384 columns)
  // gives its room back after use, so no thread holds more than 4 MiB between calls.
  void gemm(const Unit& unit) {
    const MatmulGroup& group = plan_.groups[unit.group];
    const int64_t rows = unit.row_end - unit.row_begin;
    if (plan_.dtype == kFloat32) {
      gemm_rows(unit.group, unit.row_begin, rows);
      return;
    }
    const int64_t widest =
        std::max<int64_t>({group.n, widen_x_ ? group.k : int64_t{1}, int64_t{1}});
    const int64_t block = std::max(kMinBlockRows, kScratchFloats / widest);
    for (int64_t row = unit.row_begin; row < unit.row_end; row += block)
      gemm_rows(unit.group, row, std::min(block, unit.row_end - row));
  }

  // Rows [row_begin, row_begin + rows) of group `index`.
  void gemm_rows(size_t index, int64_t row_begin, int64_t rows) {
    const MatmulGroup& group = plan_.groups[index];
    const size_t element = element_size(plan_.dtype);
    const auto* x = static_cast<const std::byte*>(group.x.data_ptr()) +
                    static_cast<size_t>(row_begin * group.k) * element;
    const int64_t first = group.offset + row_begin * group.n;  // in y_flat, in elements
    auto* y =
        static_cast<std::byte*>(plan_.y_flat.data_ptr()) + static_cast<size_t>(first) * element;
    const size_t count = static_cast<size_t>(rows * group.n);
    float* c = reinterpret_cast<float*>(y);
    thread_local std::vector<float> scratch, converted_x;
    if (plan_.dtype != kFloat32) {
      if (scratch.size() < count) scratch.resize(count);
      c = scratch.data();
    }
    const void* a = x;
    if (widen_x_) {
      // No matmul of this dtype on this ISA: widen these rows of x to float32.
      const size_t x_count = static_cast<size_t>(rows * group.k);
      if (converted_x.size() < x_count) converted_x.resize(x_count);
      kernels::cast(converted_x.data(), kFloat32, x, plan_.dtype, x_count);
      a = converted_x.data();
    }
    // Small GEMMs lose more to threading than they gain (measured 1.5-2.5x slower on 2 threads).
    const double macs =
        static_cast<double>(rows) * static_cast<double>(group.k) * static_cast<double>(group.n);
    const int threads = macs < kThreadedMacs ? 1 : threads_;
    engine_.matmul(ops::MatmulShape{rows, group.k, group.n, plan_.dtype}, a, group.k, group.weight,
                   c, threads);
    const std::vector<float>& bias = biases_[index];
    if (!bias.empty()) {
      const size_t n = static_cast<size_t>(group.n);
      for (int64_t row = 0; row < rows; ++row) {
        float* sums = c + static_cast<size_t>(row) * n;
        kernels::binary(kernels::BinaryOp::kAdd, kFloat32, sums, sums, bias.data(), n);
      }
    }
    if (plan_.dtype != kFloat32) kernels::cast(y, plan_.dtype, c, kFloat32, count);
    for (std::vector<float>* room : {&scratch, &converted_x}) {
      if (room->size() > static_cast<size_t>(kScratchFloats)) std::vector<float>().swap(*room);
    }
  }

  // 4 MiB of float32 per block (a GEMM of 64 rows or more keeps oneDNN's kernels busy; the
  // issue's shapes fit in one block: an MoE group's 256 x 1024 results are 1 MiB).
  static constexpr int64_t kScratchFloats = int64_t{1} << 20;
  static constexpr int64_t kMinBlockRows = 64;
  static constexpr double kThreadedMacs = 2.0 * 1024 * 1024;

  const GroupedMatmulPlan& plan_;
  ProcessGroup* group_;
  ops::MatmulEngine& engine_;
  const bool widen_x_ = ops::MatmulEngine::operand_dtype(plan_.dtype) != plan_.dtype;
  int threads_ = 1;
  bool add_bias_ = true;
  std::vector<std::vector<float>> biases_;
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
  GroupedMatmulPlan plan;
  try {
    plan = ops::plan_grouped_matmul({kOp, x, weight, options.bias, options.group_list,
                                     options.split_item, options.group_list_type});
  } catch (const InvalidArgument&) {
    throw;  // the caller's arguments: reported here alone, as a collective's are
  } catch (const std::exception& error) {
    // No memory for y on this rank: its peers would wait for its all-reduces until the timeout.
    // It fails the group at once, as a failed GEMM does.
    if (group != nullptr && group->size() > 1) {
      group->abort(detail::concat(kOp, " could not make its output: ", error.what()));
    }
    throw;
  }
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
