// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A rank that outlives its peers (a driver or service that forms a group with new workers job
// after job) meets each job's new workers, and keeps none of their NPU memory once its groups
// are gone: a peer's arena stays mapped only while a group that reads it lives.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

// Mappings of NPU `device`'s arena (this process's or a peer's) in this process.
int arena_mappings(int device) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = str("memfd:shmccl-npu", device, " ");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) != std::string::npos) ++count;
  }
  return count;
}

TEST(PeerMemory, ARankThatOutlivesItsPeersKeepsNoneOfTheirMemory) {
  constexpr int kJobs = 3;
  auto results = testing::run_ranks(2, [](const testing::RankContext& ctx) {
    // A broadcast's receivers read the root's tensor from its arena (pull broadcast; at 2 ranks
    // the work pool would split the copies, and rank 0 might take none of them).
    setenv("SHMCCL_PULL_BROADCAST_RANKS", "2", 1);
    config::reload();
    auto options = [&](int job, int rank) {
      InitOptions init;
      init.rank = rank;
      init.world_size = 2;
      init.job_id = str(ctx.job_id, "-", job);
      init.timeout = std::chrono::seconds(30);
      return init;
    };
    if (ctx.rank == 1) {
      // Starts a new worker per job; it has never used the library itself.
      for (int job = 0; job < kJobs; ++job) {
        const pid_t worker = fork();
        if (worker == 0) {
          int code = 0;
          try {
            npu::set_device(1);
            init_process_group(options(job, 1));
            Tensor t = full({1 << 20}, 2, kInt32).npu();
            broadcast(t, /*src=*/1);
            destroy_process_group();
          } catch (const std::exception& error) {
            std::fprintf(stderr, "worker of job %d: %s\n", job, error.what());
            code = 1;
          }
          _exit(code);
        }
        int status = 0;
        require(worker > 0 && waitpid(worker, &status, 0) == worker && WIFEXITED(status) &&
                    WEXITSTATUS(status) == 0,
                str("worker of job ", job, " failed"));
      }
      return;
    }
    npu::set_device(0);
    for (int job = 0; job < kJobs; ++job) {
      init_process_group(options(job, 0));
      Tensor t = full({1 << 20}, 1, kInt32).npu();
      broadcast(t, /*src=*/1);  // a receiver reads the root's tensor in the root's arena
      require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(1 << 20, 2),
              str("broadcast of job ", job));
      require(arena_mappings(1) == 1, str("job ", job, ": the worker's arena is not mapped"));
      destroy_process_group();
      require(arena_mappings(1) == 0,
              str("after job ", job, ": ", arena_mappings(1), " mappings of workers' arenas"));
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

}  // namespace
}  // namespace shmccl
