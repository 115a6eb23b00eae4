// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// init_process_group with a store the caller plugs in (InitOptions::store, as torch hands a
// backend its c10d Store): ranks meet through it without a job id or a launcher's environment,
// at 2, 3, 4 and 8 ranks, sub-groups included; a rank taken twice and missing ranks are named;
// nothing is left in /dev/shm. The store is a directory of files (directory_store.h), so
// nothing of the job's own shared-memory store can stand in for it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "directory_store.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::DirectoryStore;
using testing::require;
using testing::StoreDirectory;
using testing::str;

// Nothing in the environment names the job: only the store can bring the ranks together.
void forget_the_job_environment() {
  for (const char* name :
       {"SHMCCL_JOB_ID", "SHMCCL_NAMESPACE", "SHMCCL_LOCK_FD", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    unsetenv(name);
  }
}

InitOptions options_with(const testing::RankContext& ctx, std::shared_ptr<Store> store,
                         int64_t timeout_ms = 30000) {
  InitOptions options;
  options.rank = ctx.rank;
  options.world_size = ctx.world;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.store = std::move(store);
  return options;
}

TEST(StoreRendezvous, RanksMeetThroughAGivenStoreWithoutAJobId) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const StoreDirectory directory;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      forget_the_job_environment();
      auto store = std::make_shared<DirectoryStore>(directory.path());
      npu::set_device(ctx.rank % 8);
      init_process_group(options_with(ctx, store));
      require(store->calls() > 0, "init did not use the given store");
      // Rank 0 drew the job's shared-memory namespace and published it in the store.
      const std::string ns = store->get("g1/namespace");
      require(default_group()->comm_name().find(":" + ns + ":") != std::string::npos,
              "comm_name " + default_group()->comm_name() + " does not carry namespace " + ns);
      require(testing::shm_entries("shmccl." + ns + ".store").empty(),
              "a store was made in /dev/shm besides the given one");

      Tensor sum = full({5}, static_cast<float>(ctx.rank + 1), kFloat32).npu();
      all_reduce(sum);
      const float expected = static_cast<float>(ctx.world * (ctx.world + 1) / 2);
      require(sum.cpu().to_vector<float>() == std::vector<float>(5, expected), "all_reduce");

      // Rank r contributes r + 1 rows of value r.
      std::vector<int64_t> splits(static_cast<size_t>(ctx.world));
      std::iota(splits.begin(), splits.end(), 1);
      const int64_t rows = std::accumulate(splits.begin(), splits.end(), int64_t{0});
      Tensor mine = full({ctx.rank + 1}, static_cast<double>(ctx.rank), kInt32).npu();
      Tensor gathered = zeros({rows}, kInt32).npu();
      all_gather_into_tensor_uneven(gathered, mine, splits);
      std::vector<int32_t> want;
      for (int r = 0; r < ctx.world; ++r)
        want.insert(want.end(), static_cast<size_t>(r + 1), r);
      require(gathered.cpu().to_vector<int32_t>() == want, "all_gather_into_tensor_uneven");

      // A sub-group is created through the same store.
      std::vector<int> even;
      for (int r = 0; r < ctx.world; r += 2)
        even.push_back(r);
      ProcessGroupPtr evens = new_group(even);
      if (ctx.rank % 2 == 0) {
        require(evens->is_member(), "no sub-group on an even rank");
        Tensor ones_sum = ones({3}, kInt32).npu();
        all_reduce(ones_sum, ReduceOp::SUM, evens);
        require(ones_sum.cpu().to_vector<int32_t>() ==
                    std::vector<int32_t>(3, static_cast<int32_t>(even.size())),
                "all_reduce on the sub-group");
      } else {
        require(!evens->is_member(), "a sub-group on an odd rank");
      }
      barrier();
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
    const std::string ns = DirectoryStore::read_key(directory.path(), "g1/namespace");
    EXPECT_EQ(ns.rfind("s", 0), 0u) << ns;
    EXPECT_TRUE(testing::shm_entries("shmccl." + ns).empty()) << "left in /dev/shm";
  }
}

TEST(StoreRendezvous, AJobIdStillNamesTheSharedMemory) {
  const StoreDirectory directory;
  const std::string job = testing::unique_job_id();
  auto results = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        forget_the_job_environment();
        auto store = std::make_shared<DirectoryStore>(directory.path());
        InitOptions options = options_with(ctx, store);
        options.job_id = ctx.job_id;
        init_process_group(options);
        require(!store->check({"g1/namespace"}), "ranks with a job id drew a namespace");
        require(default_group()->comm_name().find(":j") != std::string::npos,
                "comm_name " + default_group()->comm_name());
        Tensor t = ones({4}, kInt32).npu();
        all_reduce(t);
        require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, 2), "all_reduce");
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(job));
}

TEST(StoreRendezvous, ARankTakenTwiceIsAnError) {
  const StoreDirectory directory;
  auto results = testing::run_ranks(1, [&](const testing::RankContext& ctx) {
    forget_the_job_environment();
    auto store = std::make_shared<DirectoryStore>(directory.path());
    store->add("g1/rank/0", 1);  // another process of this job claimed rank 0
    try {
      init_process_group(options_with(ctx, store));
    } catch (const InvalidArgument& error) {
      const std::string text = error.what();
      require(text.find("rank 0") != std::string::npos &&
                  text.find("already taken by another process") != std::string::npos,
              text);
      return;
    }
    throw testing::RequirementFailed("init succeeded with its rank taken");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// Ranks other than `missing` init with a short timeout: each must get a TimeoutError naming it.
void expect_missing_rank_named(int world, int missing) {
  SCOPED_TRACE(str("rank ", missing, " of ", world, " missing"));
  const StoreDirectory directory;
  auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
    if (ctx.rank == missing) return;  // never joins
    forget_the_job_environment();
    auto store = std::make_shared<DirectoryStore>(directory.path());
    try {
      init_process_group(options_with(ctx, store, /*timeout_ms=*/500));
    } catch (const TimeoutError& error) {
      const std::string text = error.what();
      require(text.find(str("rank ", missing, " to join")) != std::string::npos, text);
      return;
    }
    throw testing::RequirementFailed(str("init succeeded without rank ", missing));
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  if (missing != 0) {
    const std::string ns = DirectoryStore::read_key(directory.path(), "g1/namespace");
    EXPECT_TRUE(testing::shm_entries("shmccl." + ns).empty()) << "left in /dev/shm";
  }
}

TEST(StoreRendezvous, MissingRanksAreNamedAfterTheTimeout) {
  expect_missing_rank_named(3, 0);  // the rank that draws the namespace
  expect_missing_rank_named(3, 2);
}

}  // namespace
}  // namespace shmccl
