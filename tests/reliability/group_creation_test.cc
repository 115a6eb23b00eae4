// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A member of a group that dies before it joined the group: its peers know its process (from the
// default group in new_group, from the pid it left in the store as it claimed its rank in
// init_process_group), so their call fails at once naming it (not after the group's 60 s
// timeout), and the group's control block is not left in /dev/shm, even when the member that
// died is the group's first rank and had made the block but not published its name. Each case
// runs at 2, 3, 4 and 8 ranks; the fault is SHMCCL_FAULT=<point>:<rank>:kill:<group creation>.
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

// In init_process_group, the victim dies only once every other rank has claimed its rank in the
// job's store: a store whose every user has exited is replaced by the next rank that opens it,
// and a rank that opened it just before that would wait in the old one (docs/reliability.md).
namespace staged {
const testing::TokenPipe* g_claimed = nullptr;
bool g_victim = false;
fault::Point g_point = fault::Point::kJoinsGroup;
int g_others = 0;

void hook(fault::Point point, uint64_t creation) {
  if (creation != 1) return;
  if (!g_victim && point == fault::Point::kJoinsGroup) {
    g_claimed->post(1);
  } else if (g_victim && point == g_point) {
    require(g_claimed->wait(g_others), "the others did not claim their ranks");
  }
}
}  // namespace staged

// Kills `victim(world)` at `point` of group creation number `creation` (1: the default group's,
// in init_process_group; 2: the first new_group after it); every other rank's call must fail
// within kBoundSeconds with a RemoteError holding each of `expected`.
void expect_group_creation_fails(const char* point, int creation, int (*victim_of)(int world),
                                 const std::vector<std::string>& expected) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const int victim = victim_of(world);
    testing::SurvivorBarrier survivors;  // a survivor that exits is news to a slower one
    const testing::TokenPipe claimed;
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          setenv("SHMCCL_FAULT", str(point, ":", victim, ":kill:", creation).c_str(), 1);
          config::reload();
          staged::g_claimed = &claimed;
          staged::g_victim = ctx.rank == victim;
          staged::g_point = fault::parse(str(point, ":0")).point;
          staged::g_others = ctx.world - 1;
          fault::set_hook(staged::hook);
          std::vector<int> everyone;
          for (int r = 0; r < ctx.world; ++r)
            everyone.push_back(r);
          if (creation > 1) ctx.init(kTimeoutMs);
          const auto start = std::chrono::steady_clock::now();
          std::string text = "the group was made";
          double seconds = 0;
          try {
            if (creation > 1) {
              new_group(everyone);
            } else {
              ctx.init(kTimeoutMs);
            }
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
  expect_group_creation_fails("joins_group", 2, last_rank, {"exited before it joined group sub1"});
}

TEST(GroupCreationTest, AFirstRankThatDiesBeforeMakingTheBlockIsNamedAtOnce) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_group_creation_fails("joins_group", 2, first_rank,
                              {"exited before it joined group sub1", "its first rank"});
}

// The block exists under a name only the dead rank published (in the store, before it made it):
// the members remove it.
TEST(GroupCreationTest, AFirstRankThatDiesBeforePublishingTheBlockLeavesNothing) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_group_creation_fails("publishes_group", 2, first_rank,
                              {"exited before it joined group sub1", "its first rank"});
}

// The same in init_process_group: the ranks leave their pid in the job's store as they claim
// their rank, so the others' init names a rank that dies before it joins the default group.
TEST(GroupCreationTest, ARankThatDiesInInitBeforeJoiningIsNamedAtOnce) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_group_creation_fails("joins_group", 1, last_rank, {"exited before it joined group world"});
}

TEST(GroupCreationTest, AFirstRankThatDiesInInitBeforePublishingTheBlockLeavesNothing) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  expect_group_creation_fails("publishes_group", 1, first_rank,
                              {"exited before it joined group world", "its first rank"});
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
