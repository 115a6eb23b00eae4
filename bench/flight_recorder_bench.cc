// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What the flight recorder adds to every collective, in isolation: the entry written when a
// small synchronous collective is scheduled and the state change when it finishes (a coarse clock
// read and one or two cache lines of stores), with 0, 2 and 8 split sizes. Compare with the time of
// a small collective (bench/diagnostics_overhead.sh measures the cost against the collectives).
#include <benchmark/benchmark.h>

#include "collectives/flight_recorder.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::collectives {
namespace {

void BM_FlightRecorder(benchmark::State& state) {
  const int splits = static_cast<int>(state.range(0));
  TraceRing ring("bench", 0, splits, 2048);
  Tensor input = zeros({2}, kFloat32);
  OpPlan plan;
  plan.kind = transport::OpKind::kAllGather;
  plan.name = "all_gather_into_tensor_uneven";
  plan.dtype = kFloat32;
  plan.num_splits = splits;
  for (int r = 0; r < splits; ++r)
    plan.splits[static_cast<size_t>(r)] = 1;
  plan.borrow_input(input);
  plan.borrow_output(input);
  uint64_t sequence = 0;
  for (auto _ : state) {
    plan.sequence = ++sequence;
    ring.scheduled(plan, /*async_op=*/false);
    ring.finished(plan.sequence, /*success=*/true, /*timed=*/false);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlightRecorder)->Arg(0)->Arg(2)->Arg(8);

}  // namespace
}  // namespace shmccl::collectives

BENCHMARK_MAIN();
