// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The cost of the always-on diagnostics on the smallest collectives, in one run: blocks of kBlock
// collectives with a diagnostic active and suspended alternate in the same processes on the same
// buffers (the machine's drift hits both alike); the counters are the medians per collective, the
// slowest rank's, in microseconds, and the overhead in percent.
//   BM_RecorderOverhead: the flight recorder (the mismatch check on in both halves);
//   BM_MismatchCheckOverhead: the mismatch check's descriptor and fingerprint (recorder off in
//     both halves; suspended, every rank sends the same fingerprint);
//   BM_DiagnosticsOverhead: both together against neither;
//   BM_NoOverhead: an A/A run (both halves the same), the method's own noise.
// The ops: an uneven all-gather, an uneven reduce-scatter, an all-reduce (each repeating itself),
// and the first two in alternation (no call repeats the one before it).
// Each also runs "/phased": before each collective, every rank idles for a random 0-255
// iterations of an empty loop (its own sequence, the same in both halves). Back to back, two ranks
// run in lock-step, and a change of a nanosecond in one rank's path can move its arrival to the
// other side of the moment its peer polls, which costs a whole line transfer more or less: the
// plain rows measure that phase as much as the work. The phased rows average over the phase;
// their overhead_pct is the cost (cost_ns) over the plain call's time (call_us, measured by the
// same processes in a third block without the jitter).
//   SHMCCL_BENCH_RANKS=2 shmccl_recorder_overhead_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_launch.h"
#include "collectives/group_state.h"
#include "transport/control_block.h"

namespace shmccl::bench {
namespace {

enum class Op { kAllGatherUneven, kReduceScatterUneven, kAllReduce, kAlternating };
enum class Toggle { kRecorder, kMismatchCheck, kBoth, kNothing };

const char* toggle_name(Toggle toggle) {
  switch (toggle) {
    case Toggle::kRecorder:
      return "RecorderOverhead";
    case Toggle::kMismatchCheck:
      return "MismatchCheckOverhead";
    case Toggle::kBoth:
      return "DiagnosticsOverhead";
    case Toggle::kNothing:
      return "NoOverhead";
  }
  return "?";
}

// Sets the diagnostics for the active or the suspended half of a block pair.
void set_active(detail::GroupState& group, Toggle toggle, bool active) {
  switch (toggle) {
    case Toggle::kRecorder:
      group.set_trace_active(active);
      group.set_mismatch_check_active(true);
      break;
    case Toggle::kMismatchCheck:
      group.set_trace_active(false);
      group.set_mismatch_check_active(active);
      break;
    case Toggle::kBoth:
      group.set_trace_active(active);
      group.set_mismatch_check_active(active);
      break;
    case Toggle::kNothing:
      group.set_trace_active(true);
      group.set_mismatch_check_active(true);
      break;
  }
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllGatherUneven:
      return "AllGatherUneven";
    case Op::kReduceScatterUneven:
      return "ReduceScatterUneven";
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kAlternating:
      return "AllGatherThenReduceScatter";
  }
  return "?";
}

// Times `call` on every rank and returns the slowest rank's seconds. `warm_up` runs first,
// untimed: the barrier before is a different call, so the block's first collective is a new call
// (a new entry in the recorder, a new fingerprint), and each of the first kCallRing fills its
// entry of the slot's descriptor ring, which a loop of repeated calls does not pay.
template <typename WarmUp, typename Call>
double timed_max_over_ranks(WarmUp&& warm_up, Call&& call) {
  barrier();
  warm_up();
  const auto start = std::chrono::steady_clock::now();
  call();
  Tensor slowest = full({1}, seconds_since(start), kFloat64);
  all_reduce(slowest, ReduceOp::MAX);
  return slowest.data_ptr<double>()[0];
}

// The phased rows' idle time before a collective: an empty loop of 0-255 iterations, drawn
// from a per-rank xorshift sequence that restarts with `seed` (the same in both halves).
class PhaseJitter {
 public:
  void restart(uint64_t seed) { state_ = seed * 0x9E3779B97F4A7C15ull | 1; }
  void idle() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    for (uint64_t i = state_ & 255; i > 0; --i)
      asm volatile("");
  }

 private:
  uint64_t state_ = 1;
};

void run_overhead(benchmark::State& state, Toggle toggle, Op op, int world, int rank, bool phased) {
  constexpr int kBlock = 200;
  constexpr int kWarmUp = transport::kCallRing + 2;  // a pass over the descriptor ring
  const int64_t count = std::max<int64_t>(8 / 4, world);
  const auto splits = linear_splits(count, world);
  const Device device = Device::npu(npu::current_device());
  Tensor gather_in = ones({splits[static_cast<size_t>(rank)]}, kFloat32, device);
  Tensor gather_out = zeros({count}, kFloat32, device);
  Tensor full_buffer = ones({count}, kFloat32, device);
  Tensor scatter_out = zeros({splits[static_cast<size_t>(rank)]}, kFloat32, device);
  bool gather_next = true;
  auto once = [&] {
    switch (op) {
      case Op::kAllGatherUneven:
        all_gather_into_tensor_uneven(gather_out, gather_in, splits);
        break;
      case Op::kReduceScatterUneven:
        reduce_scatter_tensor_uneven(scatter_out, full_buffer, splits);
        break;
      case Op::kAllReduce:
        all_reduce(full_buffer);
        break;
      case Op::kAlternating:  // no call repeats the one before (an FSDP-like loop)
        if (gather_next) {
          all_gather_into_tensor_uneven(gather_out, gather_in, splits);
        } else {
          reduce_scatter_tensor_uneven(scatter_out, full_buffer, splits);
        }
        gather_next = !gather_next;
        break;
    }
  };
  detail::GroupState& group = default_group()->state();
  std::vector<double> on, off, plain;
  PhaseJitter jitter;
  int64_t round = 0;
  for (int i = 0; i < 20; ++i)
    once();
  // One block's time per collective (us), each collective after the jitter's idle time if `idle`.
  auto time_block = [&](bool idle) {
    const double seconds = timed_max_over_ranks(
        [&] {
          for (int i = 0; i < kWarmUp; ++i)
            once();
        },
        [&] {
          for (int i = 0; i < kBlock; ++i) {
            if (idle) jitter.idle();
            once();
          }
        });
    return seconds / kBlock * 1e6;
  };
  for (auto _ : state) {
    double both = 0;
    // Alternate which half goes first, so that an order effect cancels out.
    const bool first = (round % 2) == 0;
    const uint64_t seed = static_cast<uint64_t>(round) * 1000003u + static_cast<uint64_t>(rank);
    ++round;
    for (bool active : {first, !first}) {
      set_active(group, toggle, active);
      jitter.restart(seed);
      const double us = time_block(phased);
      (active ? on : off).push_back(us);
      both += us;
    }
    // The plain call's time, with the diagnostic suspended (the phased rows' denominator).
    if (phased) plain.push_back(time_block(false));
    state.SetIterationTime(both * 1e-6 / 2);
  }
  set_active(group, Toggle::kNothing, true);
  state.counters["on_us"] = median(on);
  state.counters["off_us"] = median(off);
  state.counters["ranks"] = world;
  if (phased) {
    const double cost_us = median(on) - median(off);
    state.counters["cost_ns"] = cost_us * 1e3;
    state.counters["call_us"] = median(plain);
    state.counters["overhead_pct"] = cost_us / median(plain) * 100;
  } else {
    state.counters["overhead_pct"] = (median(on) / median(off) - 1) * 100;
  }
}

void register_all(const Options& /*options*/, int world, int rank) {
  for (Toggle toggle :
       {Toggle::kRecorder, Toggle::kMismatchCheck, Toggle::kBoth, Toggle::kNothing}) {
    for (Op op :
         {Op::kAllGatherUneven, Op::kReduceScatterUneven, Op::kAllReduce, Op::kAlternating}) {
      for (bool phased : {false, true}) {
        const std::string name = std::string("BM_") + toggle_name(toggle) + "/" + op_name(op) +
                                 "/npu/ranks:" + std::to_string(world) + "/bytes:8" +
                                 (phased ? "/phased" : "");
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) { run_overhead(state, toggle, op, world, rank, phased); })
            ->Iterations(400)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace shmccl::bench

int main(int argc, char** argv) {
  return shmccl::bench::run_multiprocess_benchmarks(argc, argv, shmccl::bench::register_all);
}
