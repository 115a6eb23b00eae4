// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// CoreBalance: a waiting rank whose core holds two of the job's ranks more than another core it
// may run on moves itself there; only the highest rank on the crowded core moves, never out of
// its own affinity, and at most once per kMoveInterval.
#include "transport/core_balance.h"

#include <sched.h>

#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace shmccl::transport {
namespace {

cpu_set_t cpus(std::initializer_list<int> list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : list)
    CPU_SET(cpu, &set);
  return set;
}

TEST(CrowdedCoreTarget, TheHighestOfThreeRanksOnACoreMovesToTheCoreWithOne) {
  const std::vector<uint32_t> placed{0, 0, 1, 0};
  EXPECT_EQ(crowded_core_target(placed, 3, cpus({0, 1})), 1);
  // Its core-mates stay: only one of them moves.
  EXPECT_EQ(crowded_core_target(placed, 0, cpus({0, 1})), -1);
  EXPECT_EQ(crowded_core_target(placed, 1, cpus({0, 1})), -1);
  // The rank alone on its core has nowhere better to go.
  EXPECT_EQ(crowded_core_target(placed, 2, cpus({0, 1})), -1);
}

TEST(CrowdedCoreTarget, AMoveThatWouldOnlySwapTheImbalanceIsNotMade) {
  // 2 + 1: moving one would make it 1 + 2.
  EXPECT_EQ(crowded_core_target({0, 1, 0}, 2, cpus({0, 1})), -1);
  // 2 + 2 at 4 ranks, 4 + 4 at 8: balanced.
  EXPECT_EQ(crowded_core_target({0, 1, 0, 1}, 3, cpus({0, 1})), -1);
  EXPECT_EQ(crowded_core_target({0, 1, 0, 1, 0, 1, 0, 1}, 7, cpus({0, 1})), -1);
  // 5 + 3 at 8 ranks is worth a move; two ranks on one core and none on the other too.
  EXPECT_EQ(crowded_core_target({1, 0, 0, 1, 0, 1, 0, 0}, 7, cpus({0, 1})), 1);
  EXPECT_EQ(crowded_core_target({0, 0}, 1, cpus({0, 1})), 1);
}

TEST(CrowdedCoreTarget, ItMovesOnlyWithinItsAffinityToTheCoreWithFewestRanks) {
  const std::vector<uint32_t> placed{2, 2, 2, 2, 1, 3, 3};
  EXPECT_EQ(crowded_core_target(placed, 3, cpus({1, 2, 3})), 1);
  EXPECT_EQ(crowded_core_target(placed, 3, cpus({0, 1, 2, 3})), 0);
  EXPECT_EQ(crowded_core_target(placed, 3, cpus({2, 3})), 3);
  EXPECT_EQ(crowded_core_target(placed, 3, cpus({2})), -1);  // bound: the binding holds
}

TEST(CrowdedCoreTarget, RanksNotSeenOnAnyCpuAreNotCounted) {
  // A slot's CPU as published is a hint; one out of range (corrupt or from a larger machine)
  // counts nowhere.
  EXPECT_EQ(crowded_core_target({0, 0, CPU_SETSIZE + 5u, 0}, 3, cpus({0, 1})), 1);
  EXPECT_EQ(crowded_core_target({0, 0, 0, CPU_SETSIZE + 5u}, 3, cpus({0, 1})), -1);
}

class CoreBalanceTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 3;

  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof(saved_), &saved_), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) allowed_.push_back(cpu);
    }
    if (allowed_.size() < 2) GTEST_SKIP() << "needs two CPUs";
    slots_.reset(new RankSlot[kRanks]());
  }
  void TearDown() override { sched_setaffinity(0, sizeof(saved_), &saved_); }

  // Puts this thread on `cpu` (bound, then unbound again, as the balance itself does).
  void start_on(int cpu) {
    const cpu_set_t one = cpus({cpu});
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    ASSERT_EQ(sched_getcpu(), cpu);
  }
  void expect_mask_restored() {
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&now, &saved_));
  }

  cpu_set_t saved_;
  std::vector<int> allowed_;
  std::unique_ptr<RankSlot[]> slots_;
};

TEST_F(CoreBalanceTest, ACrowdingSeenTwiceMovesTheRankAndKeepsItsAffinity) {
  const int crowded = allowed_[0];
  const int empty = allowed_[1];
  start_on(crowded);
  // Rank 2 (this thread) shares its CPU with ranks 0 and 1; its mask is the two CPUs.
  saved_ = cpus({crowded, empty});
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved_), &saved_), 0);
  slots_[0].wait_cpu.store(static_cast<uint32_t>(crowded));
  slots_[1].wait_cpu.store(static_cast<uint32_t>(crowded));
  CoreBalance balance(slots_.get(), 2, kRanks);
  const auto now = CoreBalance::Clock::now();
  EXPECT_FALSE(balance.maybe_move(static_cast<uint32_t>(crowded), now));  // seen once
  EXPECT_FALSE(balance.maybe_move(static_cast<uint32_t>(crowded), now));  // no look yet
  EXPECT_TRUE(balance.maybe_move(static_cast<uint32_t>(crowded), now + CoreBalance::kLookInterval));
  expect_mask_restored();

  // No look within kMoveInterval of a move, however crowded the view.
  const auto moved = now + CoreBalance::kLookInterval;
  EXPECT_FALSE(
      balance.maybe_move(static_cast<uint32_t>(crowded), moved + CoreBalance::kMoveInterval / 2));
  EXPECT_FALSE(
      balance.maybe_move(static_cast<uint32_t>(crowded), moved + CoreBalance::kMoveInterval));
  EXPECT_TRUE(balance.maybe_move(static_cast<uint32_t>(crowded),
                                 moved + CoreBalance::kMoveInterval + CoreBalance::kLookInterval));
  expect_mask_restored();
}

TEST_F(CoreBalanceTest, ACrowdingGoneByTheNextLookMovesNothing) {
  const int cpu = allowed_[0];
  start_on(cpu);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved_), &saved_), 0);
  slots_[0].wait_cpu.store(static_cast<uint32_t>(cpu));
  slots_[1].wait_cpu.store(static_cast<uint32_t>(cpu));
  CoreBalance balance(slots_.get(), 2, kRanks);
  const auto now = CoreBalance::Clock::now();
  EXPECT_FALSE(balance.maybe_move(static_cast<uint32_t>(cpu), now));
  // By the next look rank 1 is seen elsewhere: the crowding was a stale view.
  slots_[1].wait_cpu.store(static_cast<uint32_t>(allowed_[1]));
  EXPECT_FALSE(balance.maybe_move(static_cast<uint32_t>(cpu), now + CoreBalance::kLookInterval));
  // Crowded again: it must be seen twice anew.
  slots_[1].wait_cpu.store(static_cast<uint32_t>(cpu));
  const auto later = now + 2 * CoreBalance::kLookInterval;
  EXPECT_FALSE(balance.maybe_move(static_cast<uint32_t>(cpu), later));
  EXPECT_TRUE(balance.maybe_move(static_cast<uint32_t>(cpu), later + CoreBalance::kLookInterval));
  expect_mask_restored();
}

TEST_F(CoreBalanceTest, ABoundRankNeverMoves) {
  const int cpu = allowed_[0];
  start_on(cpu);  // bound to one CPU from here on
  slots_[0].wait_cpu.store(static_cast<uint32_t>(cpu));
  slots_[1].wait_cpu.store(static_cast<uint32_t>(cpu));
  CoreBalance balance(slots_.get(), 2, kRanks);
  const auto now = CoreBalance::Clock::now();
  for (int look = 0; look < 3; ++look)
    EXPECT_FALSE(
        balance.maybe_move(static_cast<uint32_t>(cpu), now + look * CoreBalance::kLookInterval));
  EXPECT_EQ(sched_getcpu(), cpu);
}

}  // namespace
}  // namespace shmccl::transport
