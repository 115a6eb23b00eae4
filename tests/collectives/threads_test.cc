// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Several threads of a rank calling collectives on one group at once, synchronous and
// asynchronous: the calls take turns in the order of their sequence numbers (each rank's threads
// interleave differently, so every call has the same op and shape, and the same value on every
// thread of a rank: any pairing across ranks then has one right result).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

class ThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadsTest, ThreadsSharingAGroupTakeTurns) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    // Small chunks: the large calls run the work pool, whose chunk numbers the calls share.
    setenv("SHMCCL_CHUNK_BYTES", "4096", 1);
    setenv("SHMCCL_INLINE_BYTES", "1024", 1);
    config::reload();
    const int device = ctx.rank % npu::device_count();
    npu::set_device(device);
    ctx.init();
    const int calls = ctx.world > 4 ? 40 : 150;
    const int64_t expected = int64_t{ctx.world} * (ctx.world + 1) / 2;
    for (int64_t rows : {int64_t{5}, int64_t{3000}}) {  // the inline path, then the work pool
      std::mutex failure_mutex;
      std::string failure;
      auto caller = [&](int thread) {
        try {
          npu::set_device(device);
          for (int i = 0; i < calls; ++i) {
            Tensor t = full({rows}, int64_t{ctx.rank} + 1, kInt64);
            if (thread % 2 == 1) t = t.npu();
            if (thread >= 2) {
              all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();
            } else {
              all_reduce(t);
            }
            require(equal(t.cpu(), full({rows}, expected, kInt64)),
                    str("thread ", thread, " call ", i, " of ", rows, " rows"));
          }
        } catch (const std::exception& error) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (failure.empty()) failure = error.what();
        }
      };
      std::vector<std::thread> threads;
      for (int thread = 0; thread < 3; ++thread)
        threads.emplace_back(caller, thread);
      for (std::thread& thread : threads)
        thread.join();
      require(failure.empty(), failure);
      barrier();
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadsTest, ::testing::Values(2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace shmccl
