// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A member of a new_group that dies before it joined the group: its peers know its process from
// the default group, so their new_group fails at once naming it (not after the group's 60 s
// timeout), and the group's control block is not left in /dev/shm, even when the member that
// died is the group's first rank and had made the block but not published its name. Each case
// runs at 2, 3, 4 and 8 ranks; the fault (SHMCCL_FAULT=<point>:<rank>:kill:2) hits the first
// group creation after the default group's.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "collectives/fault_injection.h"
#include "core/config.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::seconds_since;
using testing::str;
namespace fault = collectives::fault;

constexpr int64_t kTimeoutMs = 60000;
constexpr double kBoundSeconds = 5.0;

// The victim was killed, every other rank ended well, and nothing is left in /dev/shm.
void expect_only_the_victim_killed(const std::vector<testing::RankResult>& results, int victim,
                                   const testing::RunOptions& options) {
  for (const auto& result : results) {
    if (result.rank == victim) {
      EXPECT_EQ(result.signal, SIGKILL) << result.message;
    } else {
      EXPECT_TRUE(result.exit_code == 0 && result.signal == 0)
          << "rank " << result.rank << ": " << result.message;
    }
  }
  EXPECT_TRUE(testing::no_segments_left(options.job_id));
}

// Kills `victim(world)` at `point` of the first new_group; every other rank's new_group must fail
// within kBoundSeconds with a RemoteError holding each of `expected(victim)`.
void expect_new_group_fails(const char* point, int (*victim_of)(int world),
                            const std::vector<std::string>& expected) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const int victim = victim_of(world);
    testing::SurvivorBarrier survivors;  // a survivor that exits is news to a slower one
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          setenv("SHMCCL_FAULT", str(point, ":", victim, ":kill:2").c_str(), 1);
          config::reload();
          ctx.init(kTimeoutMs);
          std::vector<int> everyone;
          for (int r = 0; r < ctx.world; ++r)
            everyone.push_back(r);
          const auto start = std::chrono::steady_clock::now();
          std::string text = "new_group returned";
          double seconds = 0;
          try {
            new_group(everyone);
          } catch (const RemoteError& error) {
            seconds = seconds_since(start);
            text = error.what();
          }
          require(ctx.rank != victim, "the victim lived");
          survivors.arrive_and_wait(ctx.world - 1);
          require(seconds > 0, text);
          for (const std::string& part : expected)
            require(text.find(part) != std::string::npos, str("no '", part, "' in: ", text));
          require(text.find(str("rank ", victim, " (pid ")) != std::string::npos, text);
          require(seconds < kBoundSeconds, str("noticed after ", seconds, " s: ", text));
          std::printf("[group creation] %d ranks, rank %d: %.1f ms: %s\n", ctx.world, ctx.rank,
                      seconds * 1e3, text.c_str());
          std::fflush(stdout);
        },
        options);
    expect_only_the_victim_killed(results, victim, options);
  }
}

int last_rank(int world) {
  return world - 1;
}

int first_rank(int) {
  return 0;
}

TEST(GroupCreationTest, AMemberThatDiesBeforeJoiningIsNamedAtOnce) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_new_group_fails("joins_group", last_rank, {"exited before it joined group sub1"});
}

TEST(GroupCreationTest, AFirstRankThatDiesBeforeMakingTheBlockIsNamedAtOnce) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_new_group_fails("joins_group", first_rank,
                         {"exited before it joined group sub1", "its first rank"});
}

// The block exists under a name only the dead rank published (in the store, before it made it):
// the members remove it.
TEST(GroupCreationTest, AFirstRankThatDiesBeforePublishingTheBlockLeavesNothing) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_new_group_fails("publishes_group", first_rank,
                         {"exited before it joined group sub1", "its first rank"});
}

// A member that dies after it attached is seen by the group's own monitor, at its first
// collective; the others' new_group returns.
TEST(GroupCreationTest, AMemberThatDiesAfterJoiningFailsTheFirstCollective) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const int victim = world - 1;
    testing::SurvivorBarrier survivors;
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          setenv("SHMCCL_FAULT", str("rendezvous:", victim, ":kill:2").c_str(), 1);
          config::reload();
          ctx.init(kTimeoutMs);
          std::vector<int> everyone;
          for (int r = 0; r < ctx.world; ++r)
            everyone.push_back(r);
          ProcessGroupPtr group = new_group(everyone);
          require(ctx.rank != victim, "the victim lived");
          std::string text = "the barrier returned";
          try {
            barrier(group);
          } catch (const RemoteError& error) {
            text = error.what();
          }
          survivors.arrive_and_wait(ctx.world - 1);
          require(text.find(str("rank ", victim, " (pid ")) != std::string::npos &&
                      text.find("died") != std::string::npos,
                  text);
        },
        options);
    expect_only_the_victim_killed(results, victim, options);
  }
}

}  // namespace
}  // namespace shmccl
