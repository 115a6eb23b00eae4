// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// CoreMates, the decision of a waiting rank that shares its core: spin only while every other
// rank last seen on its CPU waits in the same shared wait (they cannot progress before it can),
// yield otherwise. And what it publishes for the others to decide by.
#include "transport/core_mates.h"

#include <sched.h>

#include <memory>

#include <gtest/gtest.h>

namespace shmccl::transport {
namespace {

class CoreMatesTest : public ::testing::Test {
 protected:
  static constexpr int kRanks = 4;
  static constexpr uint64_t kWait = 7;

  // The thread is bound to one CPU, so what sched_getcpu() says holds for the whole test.
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof(saved_), &saved_), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) allowed_.push_back(cpu);
    }
    ASSERT_FALSE(allowed_.empty());
    bind(allowed_[0]);
    cpu_ = static_cast<uint32_t>(allowed_[0]);
    other_cpu_ = cpu_ + 1;
    slots_.reset(new RankSlot[kRanks]());
  }
  void TearDown() override { sched_setaffinity(0, sizeof(saved_), &saved_); }

  static void bind(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  }
  // Rank `rank` last seen on `cpu`, in shared wait `wait` (0: in none).
  void place(int rank, uint32_t cpu, uint64_t wait) {
    slots_[rank].wait_cpu.store(cpu);
    slots_[rank].waits_in.store(wait);
  }

  cpu_set_t saved_;
  std::vector<int> allowed_;
  uint32_t cpu_ = 0;
  uint32_t other_cpu_ = 0;
  std::unique_ptr<RankSlot[]> slots_;
};

TEST_F(CoreMatesTest, PublishesItsCpuAndWaitUntilItLeaves) {
  place(0, other_cpu_, 0);
  {
    CoreMates mates(slots_.get(), 0, kRanks, kWait);
    EXPECT_EQ(slots_[0].wait_cpu.load(), cpu_);
    EXPECT_EQ(slots_[0].waits_in.load(), kWait);
  }
  EXPECT_EQ(slots_[0].waits_in.load(), 0u);
  EXPECT_EQ(slots_[0].wait_cpu.load(), cpu_);  // kept: where it last ran
}

TEST_F(CoreMatesTest, PublishCpuWritesWhereTheThreadRuns) {
  place(2, other_cpu_, 0);
  EXPECT_EQ(publish_cpu(slots_[2]), cpu_);
  EXPECT_EQ(slots_[2].wait_cpu.load(), cpu_);
  EXPECT_EQ(slots_[2].waits_in.load(), 0u);
}

TEST_F(CoreMatesTest, AWaitThatIsNotSharedPublishesOnlyItsCpuAndNeverSpins) {
  place(0, other_cpu_, 0);
  for (int r = 1; r < kRanks; ++r)
    place(r, cpu_, kWait);
  CoreMates mates(slots_.get(), 0, kRanks, 0);
  EXPECT_FALSE(mates.all_wait_here());
  EXPECT_EQ(slots_[0].waits_in.load(), 0u);
  EXPECT_EQ(slots_[0].wait_cpu.load(), cpu_);  // for core_balance.h
}

TEST_F(CoreMatesTest, SpinsOnlyWhileEveryRankOnItsCpuWaitsInTheSameWait) {
  place(1, cpu_, kWait);
  place(2, other_cpu_, 0);  // runs on the other core: not this core's business
  place(3, other_cpu_, 3);
  CoreMates mates(slots_.get(), 0, kRanks, kWait);
  EXPECT_TRUE(mates.all_wait_here());

  place(1, cpu_, kWait - 1);  // an earlier wait: its collective is done, it needs the core
  EXPECT_FALSE(mates.all_wait_here());
  place(1, cpu_, 0);  // not waiting: it computes, or is about to call
  EXPECT_FALSE(mates.all_wait_here());
  place(2, cpu_, kWait);
  place(1, other_cpu_, 0);  // moved away
  EXPECT_TRUE(mates.all_wait_here());
  place(3, cpu_, 0);
  EXPECT_FALSE(mates.all_wait_here());
}

TEST_F(CoreMatesTest, ARankAloneOnItsCpuSpins) {
  for (int r = 1; r < kRanks; ++r)
    place(r, other_cpu_, r == 1 ? 0 : kWait);
  CoreMates mates(slots_.get(), 0, kRanks, kWait);
  EXPECT_TRUE(mates.all_wait_here());
}

TEST_F(CoreMatesTest, PublishesTheCpuItMovedTo) {
  if (allowed_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  CoreMates mates(slots_.get(), 0, kRanks, kWait);
  EXPECT_EQ(slots_[0].wait_cpu.load(), cpu_);
  bind(allowed_[1]);
  mates.refresh_cpu();
  EXPECT_EQ(slots_[0].wait_cpu.load(), static_cast<uint32_t>(allowed_[1]));
  // Rank 1 waits here on the new CPU; the old one is no longer this rank's.
  place(1, static_cast<uint32_t>(allowed_[1]), 0);
  place(2, cpu_, 0);
  EXPECT_FALSE(mates.all_wait_here());
  place(1, static_cast<uint32_t>(allowed_[1]), kWait);
  EXPECT_TRUE(mates.all_wait_here());
}

}  // namespace
}  // namespace shmccl::transport
