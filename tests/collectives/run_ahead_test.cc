// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Ranks that finish a small collective early (a broadcast's ranks, a reduce-scatter rank that
// receives nothing) run ahead of the others by up to a slot's ring of calls
// (collectives/early_finish.h): every call's data stays intact until the slowest rank has read
// it, a rank at the end of the ring waits, and a mismatch reaches every rank, a few calls late.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <random>
#include <vector>

#include "multiprocess.h"
#include "transport/control_block.h"

namespace shmccl {
namespace {

using testing::require;
using testing::seconds_since;
using testing::str;

std::vector<int32_t> values(int64_t count, int call) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = call * 1000 + static_cast<int32_t>(i);
  return out;
}

// The root makes as many broadcasts as the ring allows before any receiver has called one (it
// tells them so through a pipe), for payloads in the arrival line (16 B), a small inline area
// (1 KiB) and a large one (4 KiB); the receivers then get each call's own data. Without run-ahead
// the root would wait in its second call for receivers that wait for it.
TEST(RunAheadTest, ABroadcastRootRunsAheadOfItsReceiversAsFarAsTheRing) {
  for (int world : {2, 3, 4, 8}) {
    const testing::TokenPipe tokens;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(10000);
      struct Part {
        int calls;
        int64_t elements;
      };
      for (const Part part :
           {Part{transport::kCallRing - 1, 4}, Part{transport::kCallRing - 1, 256},
            Part{transport::kInlineRing - 1, 1024}}) {
        barrier();  // every rank is here: the ring is free
        if (ctx.rank != 0) {
          require(tokens.wait(1), "the root did not finish its broadcasts alone");
        }
        for (int call = 0; call < part.calls; ++call) {
          Tensor tensor = ctx.rank == 0 ? from_vector<int32_t>(values(part.elements, call)).npu()
                                        : zeros({part.elements}, kInt32).npu();
          broadcast(tensor, 0);
          if (ctx.rank != 0) {
            require(tensor.cpu().to_vector<int32_t>() == values(part.elements, call),
                    str("rank ", ctx.rank, " got the wrong data in call ", call, " of ",
                        part.elements, " elements"));
          }
        }
        if (ctx.rank == 0) tokens.post(ctx.world - 1);
      }
      barrier();
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// One call past the ring, the root waits for the receivers' arrival at its first call, and its
// timeout names them.
TEST(RunAheadTest, ARootAtTheEndOfTheRingWaitsForTheReceivers) {
  for (int world : {2, 4}) {
    const testing::TokenPipe tokens;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(1000);
      barrier();
      if (ctx.rank != 0) {
        require(tokens.wait(1), "the root did not report");
        return;
      }
      Tensor tensor = from_vector<int32_t>({1, 2, 3, 4}).npu();
      for (int call = 0; call < transport::kCallRing - 1; ++call)
        broadcast(tensor, 0);
      try {
        broadcast(tensor, 0);
        tokens.post(ctx.world - 1);
      } catch (const TimeoutError& error) {
        tokens.post(ctx.world - 1);
        const std::string text = error.what();
        require(text.find("before broadcast") != std::string::npos, text);
        require(text.find(ctx.world == 2
                              ? "rank 1 has not called collective"
                              : "ranks 1, 2, 3 have not called collective") != std::string::npos,
                text);
        return;
      }
      throw testing::RequirementFailed("the root went past the end of the ring");
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// The last rank calls one of the others' broadcasts with another size (the third of six, or one
// in the ring's last entries, after the others ran ahead as far as it goes), after the others have
// finished them all (they need only the root, the root nobody). It sees the mismatch at once (it
// checks the root's call); the others see it in the barrier after their last, naming both calls.
TEST(RunAheadTest, AMismatchReachesRanksThatRanAheadInTheirNextWait) {
  for (int world : {3, 4}) {
    for (int bad : {2, transport::kCallRing - 4}) {
      const int calls = std::min(bad + 4, transport::kCallRing - 1);
      const testing::TokenPipe ahead;
      const testing::TokenPipe done;
      auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
        npu::set_device(ctx.rank % 8);
        ctx.init(10000);
        const int last = ctx.world - 1;
        if (ctx.rank == last) {
          require(ahead.wait(ctx.world - 1), "the others did not run ahead");
          for (int call = 0; call <= bad; ++call) {
            Tensor tensor = zeros({call == bad ? 5 : 4}, kInt32).npu();
            try {
              broadcast(tensor, 0);
            } catch (const RemoteError& error) {
              require(call == bad, error.what());
              require(std::string(error.what()).find("collective mismatch in broadcast") !=
                          std::string::npos,
                      error.what());
              require(done.wait(ctx.world - 1), "the others did not see it");
              return;
            }
          }
          throw testing::RequirementFailed("no mismatch on the rank that differs");
        }
        for (int call = 0; call < calls; ++call) {
          Tensor tensor = zeros({4}, kInt32).npu();
          broadcast(tensor, 0);
        }
        ahead.post(1);
        try {
          barrier();
        } catch (const RemoteError& error) {
          done.post(1);
          const std::string text = error.what();
          require(text.find("collective mismatch in an earlier collective") != std::string::npos,
                  text);
          require(text.find(str("sequence=", bad + 1, ",")) != std::string::npos &&
                      text.find("input_numel=4") != std::string::npos &&
                      text.find(str("rank ", last, " called broadcast")) != std::string::npos &&
                      text.find("input_numel=5") != std::string::npos,
                  text);
          return;
        }
        done.post(1);
        throw testing::RequirementFailed("no mismatch");
      });
      EXPECT_TRUE(testing::all_ranks_succeeded(results))
          << world << " ranks, mismatch in call " << bad;
    }
  }
}

// A long random mix, the same on every rank: broadcasts from every root (in the arrival line, the
// inline area and the arenas), reduce-scatters where some ranks receive nothing, all-reduces,
// all-gathers, sync and async; every result checked. The rings wrap many times, with ranks
// running ahead and falling back.
TEST(RunAheadTest, ARandomMixOfEarlyAndWaitingCollectivesStaysCorrect) {
  for (int world : {2, 3, 4, 8}) {
    auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(30000);
      std::mt19937 rng(1234);  // the same calls on every rank
      // The arrival line, a small and a large inline area, the arenas.
      const int64_t sizes[] = {3, 300, 2000, 20000};
      for (int call = 0; call < 600; ++call) {
        const int kind = static_cast<int>(rng() % 4);
        const int64_t elements = sizes[rng() % 4];
        const int root = static_cast<int>(rng() % static_cast<unsigned>(ctx.world));
        const bool async_op = rng() % 4 == 0;
        const std::string where = str("call ", call, " (kind ", kind, ", ", elements, ")");
        if (kind == 0) {
          Tensor tensor = ctx.rank == root ? from_vector<int32_t>(values(elements, call)).npu()
                                           : zeros({elements}, kInt32).npu();
          broadcast(tensor, root, nullptr, async_op)->wait();
          require(tensor.cpu().to_vector<int32_t>() == values(elements, call), where);
        } else if (kind == 1) {
          // Only `root` receives rows: the others finish early.
          std::vector<int64_t> splits(static_cast<size_t>(ctx.world), 0);
          splits[static_cast<size_t>(root)] = elements;
          Tensor input = full({elements}, ctx.rank + call, kInt32).npu();
          Tensor output = zeros({splits[static_cast<size_t>(ctx.rank)]}, kInt32).npu();
          reduce_scatter_tensor_uneven(output, input, splits, ReduceOp::SUM, nullptr, async_op)
              ->wait();
          if (ctx.rank == root) {
            const int32_t sum = ctx.world * (ctx.world - 1) / 2 + ctx.world * call;
            for (int32_t value : output.cpu().to_vector<int32_t>())
              require(value == sum, where);
          }
        } else if (kind == 2) {
          Tensor tensor = full({elements}, ctx.rank + 1, kInt32).npu();
          all_reduce(tensor, ReduceOp::SUM, nullptr, async_op)->wait();
          const int32_t sum = ctx.world * (ctx.world + 1) / 2;
          require(tensor.cpu().to_vector<int32_t>()[static_cast<size_t>(elements - 1)] == sum,
                  where);
        } else {
          Tensor input = full({elements}, ctx.rank * 7 + call, kInt32).npu();
          Tensor output = zeros({elements * ctx.world}, kInt32).npu();
          all_gather_into_tensor(output, input, nullptr, async_op)->wait();
          const std::vector<int32_t> got = output.cpu().to_vector<int32_t>();
          for (int r = 0; r < ctx.world; ++r)
            require(got[static_cast<size_t>(r * elements)] == r * 7 + call, where);
        }
      }
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// The victim died of SIGKILL, every other rank succeeded, and nothing of the job is left.
void expect_only_the_victim_killed(const std::vector<testing::RankResult>& results, int victim,
                                   const std::string& job) {
  const size_t world = results.size();
  for (const auto& result : results) {
    if (result.rank == victim) {
      EXPECT_EQ(result.signal, SIGKILL) << world << " ranks: " << result.message;
    } else {
      EXPECT_EQ(result.exit_code, 0)
          << world << " ranks, rank " << result.rank << ": " << result.message;
    }
  }
  EXPECT_TRUE(testing::no_segments_left(job)) << world << " ranks";
}

// A receiver is killed while the root is a ring ahead of it. The root's wait at the end of the
// ring names the dead rank within a second (not after the 60 s timeout); the other receivers
// get the calls the root published, each with its own data, and their first call that needs the
// dead rank names it. Nothing is left in /dev/shm.
TEST(RunAheadTest, AReceiverKilledWhileTheRootIsAheadIsNamedByEveryone) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    const testing::TokenPipe ahead;
    const testing::TokenPipe reported;
    testing::SurvivorBarrier survivors;
    testing::RunOptions options;
    options.job_id = job;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init(/*timeout_ms=*/60000);
          const int64_t elements = 256;  // a small inline area
          barrier();
          if (ctx.rank == 1) {
            require(ahead.wait(1), "the root did not run ahead");
            raise(SIGKILL);
          }
          if (ctx.rank == 0) {
            for (int call = 0; call < transport::kCallRing - 1; ++call) {
              Tensor tensor = from_vector<int32_t>(values(elements, call)).npu();
              broadcast(tensor, 0);
            }
            ahead.post(1);
            Tensor tensor = from_vector<int32_t>(values(elements, 99)).npu();
            const auto start = std::chrono::steady_clock::now();
            try {
              broadcast(tensor, 0);
            } catch (const RemoteError& error) {
              const double seconds = seconds_since(start);
              reported.post(ctx.world - 2);
              survivors.arrive_and_wait(ctx.world - 1);
              require(testing::names_death(error.what(), 1), error.what());
              require(seconds < 1.0, str("noticed after ", seconds, " s"));
              return;
            }
            reported.post(ctx.world - 2);
            throw testing::RequirementFailed("the root went past the ring of a dead receiver");
          }
          require(reported.wait(1), "the root did not report");
          std::string text = "no error";
          try {
            for (int call = 0; call < transport::kCallRing - 1; ++call) {
              Tensor tensor = zeros({elements}, kInt32).npu();
              broadcast(tensor, 0);
              require(tensor.cpu().to_vector<int32_t>() == values(elements, call),
                      str("rank ", ctx.rank, " got the wrong data in call ", call));
            }
            barrier();
          } catch (const RemoteError& error) {
            text = error.what();
          }
          survivors.arrive_and_wait(ctx.world - 1);
          require(testing::names_death(text, 1), text);
        },
        options);
    expect_only_the_victim_killed(results, /*victim=*/1, job);
  }
}

// The root is killed after it ran ten broadcasts ahead of its receivers. The receivers still get
// what it published before it died (every call's data is complete before its arrival is), and
// the first call it never made names it within a second.
TEST(RunAheadTest, ARootKilledAfterRunningAheadLeavesItsCallsAndIsNamedInTheNext) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    const testing::TokenPipe ahead;
    testing::SurvivorBarrier survivors;
    testing::RunOptions options;
    options.job_id = job;
    constexpr int kPublished = 10;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init(/*timeout_ms=*/60000);
          const int64_t elements = 4;  // the arrival line
          barrier();
          if (ctx.rank == 0) {
            for (int call = 0; call < kPublished; ++call) {
              Tensor tensor = from_vector<int32_t>(values(elements, call)).npu();
              broadcast(tensor, 0);
            }
            ahead.post(ctx.world - 1);
            raise(SIGKILL);
          }
          require(ahead.wait(1), "the root did not run ahead");
          for (int call = 0; call <= kPublished; ++call) {
            Tensor tensor = zeros({elements}, kInt32).npu();
            const auto start = std::chrono::steady_clock::now();
            try {
              broadcast(tensor, 0);
            } catch (const RemoteError& error) {
              const double seconds = seconds_since(start);
              survivors.arrive_and_wait(ctx.world - 1);
              require(testing::names_death(error.what(), 0), error.what());
              require(
                  call == kPublished,
                  str("call ", call, " failed, though the root had published it: ", error.what()));
              require(seconds < 1.0, str("noticed after ", seconds, " s"));
              return;
            }
            require(call < kPublished, "a call the dead root never made returned");
            require(tensor.cpu().to_vector<int32_t>() == values(elements, call),
                    str("rank ", ctx.rank, " got the wrong data in call ", call));
          }
        },
        options);
    expect_only_the_victim_killed(results, /*victim=*/0, job);
  }
}

}  // namespace
}  // namespace shmccl
