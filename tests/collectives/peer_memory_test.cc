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

#include "collectives/group_state.h"
#include "core/config.h"
#include "multiprocess.h"
#include "peer_buffers.h"
#include "transport/control_block.h"
#include "transport/group_transport.h"

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

// A peer's buffer descriptor comes from shared memory every rank can write: resolve() maps it
// only when it names a member, fits in the member's arena and starts on an element (a reduce
// kernel loads whole elements; a corrupt offset must be an error, not a misaligned load).
TEST(PeerMemory, ResolveMapsAPeersBufferOnlyWhenItsDescriptorHolds) {
  auto results = testing::run_ranks(2, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    Tensor mine = full({1000}, 10 + ctx.rank, kInt64).npu();
    const std::vector<transport::BufferRef> refs = testing::exchange_buffer_refs(mine);
    const transport::BufferRef own = refs[static_cast<size_t>(ctx.rank)];
    const transport::BufferRef peer = refs[static_cast<size_t>(1 - ctx.rank)];
    const transport::GroupTransport& transport = default_group()->state().transport();

    const auto* values = reinterpret_cast<const int64_t*>(transport.resolve(peer, 8000, 8));
    require(values[0] == 11 - ctx.rank && values[999] == 11 - ctx.rank,
            str("the peer's tensor reads ", values[0], ", ", values[999]));
    auto refused = [&](transport::BufferRef ref, uint64_t bytes, const std::string& text) {
      try {
        transport.resolve(ref, bytes, 8);
      } catch (const RemoteError& error) {
        require(std::string(error.what()).find(text) != std::string::npos, error.what());
        return;
      }
      require(false, str("resolve() accepted a descriptor that should fail with: ", text));
    };
    for (const transport::BufferRef& base : {own, peer}) {
      const int owner = base.arena.pid == own.arena.pid ? ctx.rank : 1 - ctx.rank;
      transport::BufferRef misaligned = base;
      misaligned.offset += 3;
      misaligned.bytes -= 8;
      refused(misaligned, 7992,
              str("rank ", owner, " (pid ", base.arena.pid, ") described a buffer at offset ",
                  misaligned.offset, ", not a multiple of the element size (8 bytes)"));
      refused(base, 8008,
              str("rank ", owner, " (pid ", base.arena.pid, ") described a buffer of 8000 bytes"));
      transport::BufferRef beyond = base;
      beyond.offset = base.arena.capacity - 8;
      refused(beyond, 8000, "bytes were needed");
      transport::BufferRef stranger = base;
      stranger.arena.pid = 1;
      refused(stranger, 8000, "names process 1, which is not a member of this group");
    }
    barrier();  // a rank maps its peer's arena from the live peer: both stay until both are done
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

}  // namespace
}  // namespace shmccl
