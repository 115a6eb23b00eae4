// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// init_process_group retried after a timeout meets the rank that was late for the first attempt:
// the failed attempt removed the job's store, the retry makes a fresh one under the same
// generation of keys, and the late rank, on its first attempt, finds it. At 2, 3, 4 and 8 ranks;
// the last rank comes only once every other rank's first attempt has timed out.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

TEST(InitRetry, ARetryAfterATimeoutMeetsTheLateRank) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const testing::TokenPipe timed_out;
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          const int late = ctx.world - 1;
          npu::set_device(ctx.rank % 8);
          if (ctx.rank == late) {
            require(timed_out.wait(ctx.world - 1), "the others' first attempt did not time out");
          } else {
            std::string text = "init succeeded without the late rank";
            try {
              ctx.init(/*timeout_ms=*/300);
            } catch (const TimeoutError& error) {
              text = error.what();
            }
            require(text.find(str("rank ", late, " to join")) != std::string::npos, text);
            timed_out.post(1);
          }
          ctx.init(/*timeout_ms=*/60000);
          Tensor sum = full({4}, ctx.rank + 1, kInt32).npu();
          all_reduce(sum);
          require(sum.cpu().to_vector<int32_t>() ==
                      std::vector<int32_t>(4, ctx.world * (ctx.world + 1) / 2),
                  "the all_reduce after the retry");
          // A second generation after the retried one: every rank counts the same inits.
          destroy_process_group();
          ctx.init(/*timeout_ms=*/60000);
          barrier();
          destroy_process_group();
        },
        options);
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
    EXPECT_TRUE(testing::no_segments_left(options.job_id));
  }
}

}  // namespace
}  // namespace shmccl
