// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Pull broadcasts (collectives/pull_broadcast.h): a receiver needs the root alone, the root
// returns only once every receiver has read its tensor, and ranks that disagree on the path get
// a mismatch instead of a hang. (Results for every placement: host_staging_test.cc; faults:
// reliability/fault_injection_test.cc.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

constexpr int64_t kElements = 256 * 1024;  // 1 MiB of int32: far past the inline sizes

std::vector<int32_t> pattern(int salt) {
  std::vector<int32_t> values(static_cast<size_t>(kElements));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<int32_t>(i * 7 + static_cast<size_t>(salt));
  return values;
}

// The last rank calls the broadcast only after every other receiver has returned from it: they
// must not wait for it. The root returns only after the last rank has read its tensor: it
// overwrites the tensor at once, and the last rank must still receive the original.
TEST(PullBroadcastTest, ReceiversDoNotWaitForEachOtherAndTheRootWaitsForAll) {
  for (int world : {3, 4, 8}) {
    const testing::TokenPipe done;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init();
      const int last = ctx.world - 1;
      Tensor tensor =
          ctx.rank == 0 ? from_vector<int32_t>(pattern(1)).npu() : zeros({kElements}, kInt32).npu();
      if (ctx.rank == last) {
        require(done.wait(ctx.world - 2),
                "the other receivers did not finish before the last rank called the broadcast");
      }
      broadcast(tensor, 0);
      if (ctx.rank == 0) {
        tensor.fill_(-1);
      } else {
        require(tensor.cpu().to_vector<int32_t>() == pattern(1),
                str("rank ", ctx.rank, " received wrong data"));
        if (ctx.rank != last) done.post();
      }
      barrier();
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// Repeated pulls from every root into NPU and host outputs, async and not, with other
// collectives in between (a receiver's early finish is settled by the next collective).
TEST(PullBroadcastTest, EveryRootRepeatedlyWithOtherCollectivesBetween) {
  for (int world : {3, 4, 8}) {
    auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init();
      int salt = 0;
      for (int round = 0; round < 3; ++round) {
        for (int root = 0; root < ctx.world; ++root) {
          ++salt;
          const bool host = (ctx.rank + round) % 3 == 0 && ctx.rank != root;
          Tensor tensor =
              ctx.rank == root
                  ? from_vector<int32_t>(pattern(salt)).npu()
                  : zeros({kElements}, kInt32, host ? Device::cpu() : Device::npu(ctx.rank % 8));
          broadcast(tensor, root, nullptr, salt % 2 == 0)->wait();
          require(tensor.cpu().to_vector<int32_t>() == pattern(salt),
                  str("broadcast from ", root, " round ", round, " on rank ", ctx.rank));
          if (root % 2 == 1) {
            Tensor sum = full({4}, 1, kInt32).npu();
            all_reduce(sum);
            require(sum.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, ctx.world),
                    "all_reduce between broadcasts");
          }
        }
      }
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// Rank 0 is configured not to pull: every rank gets a mismatch naming the two paths (the ranks
// that need only the root and agree with it, from their next collective).
TEST(PullBroadcastTest, RanksConfiguredDifferentlyGetAMismatch) {
  for (int world : {3, 4, 8}) {
    auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
      if (ctx.rank == 0) setenv("SHMCCL_PULL_BROADCAST_RANKS", "0", 1);
      config::reload();
      npu::set_device(ctx.rank);
      ctx.init();
      Tensor tensor = zeros({kElements}, kInt32).npu();
      try {
        broadcast(tensor, 1);
        barrier();
      } catch (const RemoteError& error) {
        const std::string text = error.what();
        require(text.find("collective mismatch") != std::string::npos &&
                    text.find(", pull)") != std::string::npos,
                "unexpected error: " + text);
        return;
      }
      throw testing::RequirementFailed("no mismatch error");
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// A pull's receiver copies while the root fails the call: rank 1 is stopped (SIGSTOP, by fault
// injection) after the first chunk of its copy; then rank 2 calls with another size (the root
// sees a mismatch) or never calls (the root times out). The root overwrites its tensor before it
// resumes rank 1 (SIGCONT), and rank 1 must report the failure, not return a copy that is part
// old data and part new.
// Whether process `pid` is (or within 20 s gets) stopped by a signal.
bool stopped(pid_t pid) {
  for (int i = 0; i < 20000; ++i) {
    std::ifstream stat(str("/proc/", pid, "/stat"));
    std::string number, name, state;
    stat >> number >> name >> state;
    if (state == "T") return true;
    usleep(1000);
  }
  return false;
}

void expect_no_torn_copy_when_the_root_fails(bool rank2_differs) {
  int pid_pipe[2];
  ASSERT_EQ(pipe(pid_pipe), 0);
  const testing::TokenPipe resumed;
  auto results = testing::run_ranks(3, [&](const testing::RankContext& ctx) {
    setenv("SHMCCL_FAULT", "mid_copy:1:stop:2", 1);  // sequence 1 is the barrier
    config::reload();
    npu::set_device(ctx.rank);
    ctx.init();
    pid_t copier = 0;
    if (ctx.rank == 1) {
      copier = getpid();
      for (int reader = 0; reader < 2; ++reader)
        require(write(pid_pipe[1], &copier, sizeof(copier)) == sizeof(copier), "pid pipe");
    } else {
      require(read(pid_pipe[0], &copier, sizeof(copier)) == sizeof(copier), "pid pipe");
    }
    barrier();
    if (ctx.rank == 2) {
      if (!rank2_differs) {
        require(resumed.wait(1), "rank 1 did not finish");
        return;
      }
      require(stopped(copier), "rank 1 did not stop mid-copy");  // comes once it has
      Tensor tensor = zeros({kElements / 2}, kInt32).npu();
      try {
        broadcast(tensor, 0);
      } catch (const RemoteError& error) {
        require(std::string(error.what()).find("collective mismatch") != std::string::npos,
                error.what());
        return;
      }
      throw testing::RequirementFailed("no mismatch on the rank that differs");
    }
    Tensor tensor =
        ctx.rank == 0 ? from_vector<int32_t>(pattern(1)).npu() : zeros({kElements}, kInt32).npu();
    if (ctx.rank == 0) {
      if (!rank2_differs) default_group()->set_timeout(std::chrono::milliseconds(300));
      try {
        broadcast(tensor, 0);
      } catch (const Error& error) {
        tensor.fill_(-1);  // the caller may reuse its tensor once it has the error
        npu::synchronize();
        require(stopped(copier), "rank 1 did not stop mid-copy");
        require(kill(copier, SIGCONT) == 0, "SIGCONT");
        require(resumed.wait(1), "rank 1 did not finish");
        const std::string text = error.what();
        require(text.find(rank2_differs ? "collective mismatch" : "rank 2 has not called it") !=
                    std::string::npos,
                text);
        return;
      }
      require(kill(copier, SIGCONT) == 0, "SIGCONT");
      throw testing::RequirementFailed("the root went on without rank 2");
    }
    try {
      broadcast(tensor, 0);
    } catch (const RemoteError& error) {
      resumed.post(rank2_differs ? 1 : 2);
      const std::string text = error.what();
      require(text.find(rank2_differs ? "collective mismatch in broadcast"
                                      : "rank 0, its source, failed the call while this rank "
                                        "copied its tensor") != std::string::npos &&
                  text.find(rank2_differs ? "rank 2 called broadcast"
                                          : "rank 2 has not called it") != std::string::npos,
              text);
      return;
    }
    resumed.post(rank2_differs ? 1 : 2);
    const std::vector<int32_t> got = tensor.cpu().to_vector<int32_t>();
    throw testing::RequirementFailed(str("the broadcast returned, with ",
                                         std::count(got.begin(), got.end(), -1), " of ", kElements,
                                         " elements from the overwritten tensor"));
  });
  close(pid_pipe[0]);
  close(pid_pipe[1]);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// The receivers time out waiting for a late root (300 ms) and give up on the broadcast; the root
// then comes and finds everyone arrived. It must fail at once, naming a receiver that gave up,
// not wait its own timeout (10 s) for copies that never come.
TEST(PullBroadcastTest, ALateRootFailsAtOnceWhenItsReceiversGaveUp) {
  for (int world : {3, 4, 8}) {
    const testing::TokenPipe gave_up;
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init();
          Tensor tensor = from_vector<int32_t>(pattern(ctx.rank)).npu();
          if (ctx.rank != 0) {
            default_group()->set_timeout(std::chrono::milliseconds(300));
            try {
              broadcast(tensor, 0);
              throw testing::RequirementFailed("the broadcast completed without its root");
            } catch (const TimeoutError&) {
            }
            gave_up.post();
            return;
          }
          default_group()->set_timeout(std::chrono::seconds(10));
          require(gave_up.wait(ctx.world - 1), "the receivers did not time out");
          const auto start = std::chrono::steady_clock::now();
          std::string text = "the broadcast completed";
          try {
            broadcast(tensor, 0);
          } catch (const TimeoutError& error) {
            text = error.what();
          }
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          require(text.find("from rank 0 before it read the root's tensor") != std::string::npos,
                  text);
          require(seconds < 5, str("the root failed after ", seconds, " s: ", text));
        },
        options);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(options.job_id)) << world << " ranks";
  }
}

TEST(PullBroadcastTest, AReceiverWhoseRootSawAMismatchMidCopyReportsItNotTornData) {
  expect_no_torn_copy_when_the_root_fails(/*rank2_differs=*/true);
}

TEST(PullBroadcastTest, AReceiverWhoseRootTimedOutMidCopyReportsItNotTornData) {
  expect_no_torn_copy_when_the_root_fails(/*rank2_differs=*/false);
}

}  // namespace
}  // namespace shmccl
