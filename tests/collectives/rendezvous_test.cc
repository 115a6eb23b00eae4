// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// init_process_group() with no arguments finds its peers from the environment of each launcher:
// shmrun's, torchrun's env:// (MASTER_ADDR/MASTER_PORT), Open MPI's and MPICH's.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;

struct Launcher {
  const char* name;
  const char* rank_variable;
  const char* size_variable;
};

class RendezvousFromEnvironment : public ::testing::TestWithParam<Launcher> {};

TEST_P(RendezvousFromEnvironment, InitWithoutArgumentsFindsThePeers) {
  const Launcher launcher = GetParam();
  const std::string job = testing::unique_job_id();
  const std::string port = std::to_string(20000 + getpid() % 20000);
  auto results = testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        unsetenv("SHMCCL_JOB_ID");
        unsetenv("SHMCCL_NAMESPACE");
        setenv(launcher.rank_variable, std::to_string(ctx.rank).c_str(), 1);
        setenv(launcher.size_variable, std::to_string(ctx.world).c_str(), 1);
        if (std::string(launcher.name) == "torchrun") {
          setenv("MASTER_ADDR", "127.0.0.1", 1);
          setenv("MASTER_PORT", port.c_str(), 1);
        } else if (std::string(launcher.name) == "shmrun") {
          setenv("SHMCCL_JOB_ID", ctx.job_id.c_str(), 1);
        } else if (std::string(launcher.name) == "openmpi") {
          setenv("OMPI_MCA_ess_base_jobid", ctx.job_id.c_str(), 1);
        }
        // MPICH: the job is the parent process (the launcher's proxy), the test harness here.
        npu::set_device(ctx.rank);
        init_process_group();
        require(get_rank() == ctx.rank && get_world_size() == ctx.world, "rank and size");
        Tensor t = ones({4}, kInt32).npu();
        all_reduce(t);
        require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, 3), "all_reduce result");
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::shm_entries("shmccl.jtorch-127_0_0_1-" + port).empty());
}

INSTANTIATE_TEST_SUITE_P(Launchers, RendezvousFromEnvironment,
                         ::testing::Values(Launcher{"shmrun", "RANK", "WORLD_SIZE"},
                                           Launcher{"torchrun", "RANK", "WORLD_SIZE"},
                                           Launcher{"openmpi", "OMPI_COMM_WORLD_RANK",
                                                    "OMPI_COMM_WORLD_SIZE"},
                                           Launcher{"mpich", "PMI_RANK", "PMI_SIZE"}),
                         [](const auto& info) { return std::string(info.param.name); });

// torchrun's job id is "torch-<MASTER_ADDR>-<MASTER_PORT>"; a cluster's service names make it
// longer than a namespace may be (64 characters). Such a job still meets, and leaves nothing.
TEST(Rendezvous, ALongMasterAddressStillNamesAValidNamespace) {
  const std::string address =
      "llama-pretrain-master-0.llama-pretrain.ml-team.svc.cluster.local";  // 64 characters
  const std::string port = std::to_string(20000 + getpid() % 20000);
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    unsetenv("SHMCCL_JOB_ID");
    unsetenv("SHMCCL_NAMESPACE");
    setenv("RANK", std::to_string(ctx.rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(ctx.world).c_str(), 1);
    setenv("MASTER_ADDR", address.c_str(), 1);
    setenv("MASTER_PORT", port.c_str(), 1);
    npu::set_device(ctx.rank);
    init_process_group();
    Tensor t = ones({4}, kInt32).npu();
    all_reduce(t);
    require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, 2), "all_reduce result");
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::shm_entries("shmccl.jtorch-llama-pretrain").empty());
}

// A program run by shmrun that starts jobs of its own, with job ids of its own, gets a namespace
// per job: shmrun's SHMCCL_NAMESPACE is for the job shmrun started. Here ranks 0-1 and 2-3 are
// two jobs of 2 ranks under one launcher's environment; in one namespace they would meet.
TEST(Rendezvous, JobsWithTheirOwnIdsUnderShmrunMeetOnlyTheirOwnRanks) {
  const std::string launcher_job = testing::unique_job_id();
  const std::string launcher_namespace = "ns-" + launcher_job;
  auto results = testing::run_ranks(4, [&](const testing::RankContext& ctx) {
    setenv("SHMCCL_JOB_ID", launcher_job.c_str(), 1);
    setenv("SHMCCL_NAMESPACE", launcher_namespace.c_str(), 1);
    const int job = ctx.rank / 2;
    InitOptions options;
    options.rank = ctx.rank % 2;
    options.world_size = 2;
    options.job_id = ctx.job_id + "-sub" + std::to_string(job);
    options.timeout = std::chrono::seconds(10);
    npu::set_device(ctx.rank % 2);
    init_process_group(options);
    Tensor t = full({4}, job + 1, kInt32).npu();
    all_reduce(t);
    require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, 2 * (job + 1)),
            "all_reduce over this job's ranks only");
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::shm_entries("shmccl." + launcher_namespace).empty());
}

// A program that makes a group per step (and lets it go) never fills the job's store: each
// group's key goes once its members attached. 1100 groups: past the store's 1024 keys.
TEST(Rendezvous, GroupsMadeInALoopNeverFillTheStore) {
  auto results = testing::run_ranks(2, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    for (int i = 0; i < 1100; ++i) {
      ProcessGroupPtr pair = new_group({0, 1});
      Tensor t = ones({2}, kInt32);
      all_reduce(t, ReduceOp::SUM, pair);
      require(t.to_vector<int32_t>() == std::vector<int32_t>(2, 2),
              "all_reduce on group " + std::to_string(i));
      pair->shutdown();
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

}  // namespace
}  // namespace shmccl
