// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A rank that sleeps in a collective (its spin budget spent) is woken by the arrival that it
// waits for, promptly: a lost wake-up would leave it asleep until its once-a-second re-check.
// Ranks with a core each that wait for one rank or none (a broadcast's, a reduce-scatter rank
// that receives nothing) arrive with a compiler barrier where the kernel has membarrier's global
// expedited command (transport/asymmetric_fence.h), so their sleeping peers make the barrier;
// ranks that outnumber their cores keep the full fence. Both must wake their peers every time.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "collectives/group_state.h"
#include "core/config.h"
#include "multiprocess.h"
#include "transport/asymmetric_fence.h"
#include "transport/control_block.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

constexpr int kCalls = 240;
// Far below the 1 s re-check a lost wake-up waits for, far above a slow wake-up in a VM.
constexpr double kWakeBoundSeconds = 0.3;

// The late rank of call i holds back ~300 us (past the others' spin budget of 0), so the others
// sleep; the slowest call must still end well within the bound. Rank r is bound to the r % cores
// th allowed CPU.
void expect_prompt_wakes(int world, size_t cores, bool expect_light) {
  SCOPED_TRACE(str(world, " ranks on ", cores, " cores"));
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(ctx.rank) % cores], &one);
    require(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
    setenv("SHMCCL_SPIN_TIME", "0", 1);
    setenv("SHMCCL_YIELD_TIME", "0", 1);
    config::reload();
    npu::set_device(ctx.rank % 8);
    ctx.init();
    const transport::GroupTransport& transport = default_group()->state().transport();
    require(
        transport.light_arrival_fence() == (expect_light && transport::asymmetric_fences_enabled()),
        str("rank ", ctx.rank, " uses the light arrival fence: ", transport.light_arrival_fence()));
    // Call i: rank late = i % world holds back, and the others sleep waiting for it: for its
    // broadcast (it is the root), its all-reduce, or a reduce-scatter in which it receives nothing
    // (it needs no one, so its arrival is the light one).
    Tensor tensor = ones({4}, kFloat32).npu();
    Tensor input = ones({4 * world - 4}, kFloat32).npu();
    double slowest = 0;
    for (int i = 0; i < kCalls; ++i) {
      const int late = i % world;
      const auto start = std::chrono::steady_clock::now();
      if (late == ctx.rank) {
        while (testing::seconds_since(start) < 300e-6) {
        }
      }
      switch (i / world % 3) {
        case 0: {
          tensor.fill_(late == ctx.rank ? 7.0 : 0.0);
          broadcast(tensor, late);
          require(tensor.cpu().to_vector<float>()[0] == 7.0f, "broadcast");
          break;
        }
        case 1: {
          tensor.fill_(1.0);
          all_reduce(tensor);
          require(tensor.cpu().to_vector<float>()[0] == static_cast<float>(world), "all_reduce");
          break;
        }
        default: {
          std::vector<int64_t> splits(static_cast<size_t>(world), 4);
          splits[static_cast<size_t>(late)] = 0;
          Tensor output = zeros({late == ctx.rank ? 0 : 4}, kFloat32).npu();
          reduce_scatter_tensor_uneven(output, input, splits);
          if (late != ctx.rank) {
            require(output.cpu().to_vector<float>()[0] == static_cast<float>(world),
                    "reduce_scatter");
          }
        }
      }
      slowest = std::max(slowest, testing::seconds_since(start));
    }
    require(slowest < kWakeBoundSeconds,
            str("rank ", ctx.rank, ": a call took ", slowest, " s (a lost wake-up?)"));
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

int allowed_cpu_count() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return 0;
  return CPU_COUNT(&allowed);
}

TEST(SleepingWaits, RanksWithACoreEachWakeEveryTime) {
  if (allowed_cpu_count() < 2) GTEST_SKIP() << "needs two CPUs";
  expect_prompt_wakes(2, 2, /*expect_light=*/true);
}

TEST(SleepingWaits, RanksThatOutnumberTheirCoresWakeEveryTime) {
  if (allowed_cpu_count() < 2) GTEST_SKIP() << "needs two CPUs";
  for (int world : {3, 4, 8})
    expect_prompt_wakes(world, 2, /*expect_light=*/false);
}

// Ranks that outnumber their cores yield while they wait, so that a core-mate can run. A yield
// that runs no one else (nothing else is runnable on the core, or the scheduler will not run it
// yet) only burns the core: past a few tens of microseconds of such yields the rank sleeps, even
// with a yield budget of a minute. Here both ranks share one CPU and rank 1 arrives only once it
// sees rank 0 asleep (it sleeps meanwhile, so rank 0's yields find no one; other programs' tasks
// on that CPU only delay the moment).
TEST(SleepingWaits, ARankWhoseYieldsRunNoOneSleepsBeforeItsYieldBudgetIsSpent) {
  constexpr double kBoundSeconds = 20;
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    testing::run_on_one_cpu();
    setenv("SHMCCL_YIELD_TIME", "60s", 1);
    config::reload();
    npu::set_device(ctx.rank);
    ctx.init();  // 30 s: rank 0's wait outlasts rank 1's 20 s bound
    Tensor tensor = ones({4}, kFloat32).npu();
    if (ctx.rank == 1) {
      const transport::ControlHeader& header = default_group()->state().transport().header();
      const auto start = std::chrono::steady_clock::now();
      while (header.sleepers.load() == 0) {
        require(testing::seconds_since(start) < kBoundSeconds,
                str("rank 0 still had not slept after ", kBoundSeconds,
                    " s of waiting for rank 1 (it yields to no one until its yield budget ends)"));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    all_reduce(tensor);
    require(tensor.cpu().to_vector<float>()[0] == 2.0f, "all_reduce");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

}  // namespace
}  // namespace shmccl
