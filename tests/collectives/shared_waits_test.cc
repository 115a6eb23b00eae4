// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Ranks that outnumber their cores publish, in their slots, that they wait in a synchronous
// collective's arrival (a shared wait: every rank waits for the same arrivals), so that a rank
// whose core-mates all wait there spins instead of yielding to them (transport/core_mates.h).
// Waits whose slots cannot show every rank that may share the core publish nothing: a sub-group
// of the job, an asynchronous call run by the stream's thread (the caller's thread may need the
// core; a Work::wait() that runs the call itself waits as a synchronous call does), and
// SHMCCL_MATE_SPIN_TIME=0.
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "collectives/group_state.h"
#include "core/config.h"
#include "multiprocess.h"
#include "sleepers.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;
using Clock = std::chrono::steady_clock;

// Every rank on the first CPU this process may use: the group is oversubscribed at any size.
void bind_all_to_one_cpu() {
  cpu_set_t allowed;
  require(sched_getaffinity(0, sizeof(allowed), &allowed) == 0, "sched_getaffinity");
  int first = 0;
  while (!CPU_ISSET(first, &allowed))
    ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  require(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
}

// Yields until `done()` (the ranks it waits for share its core), at most 20 s.
template <typename Done>
void await(Done&& done, const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!done()) {
    require(Clock::now() < deadline, "timed out waiting until " + what);
    sched_yield();
  }
}

const transport::GroupTransport& transport_of(const ProcessGroupPtr& group) {
  return group->state().transport();
}

TEST(SharedWaits, ASynchronousCollectivesArrivalWaitIsPublished) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      bind_all_to_one_cpu();
      npu::set_device(ctx.rank % 8);
      ctx.init();
      const ProcessGroupPtr group = default_group();
      const transport::GroupTransport& transport = transport_of(group);
      require(transport.oversubscribed(), "the ranks share one core");
      const int last = ctx.world - 1;
      for (int round = 0; round < 3; ++round) {
        Tensor tensor = full({4}, ctx.rank + 1, kFloat32).npu();
        if (ctx.rank == last) {
          // Every other rank sits in the all-reduce's arrival wait before this one arrives.
          std::vector<uint64_t> published(static_cast<size_t>(last));
          await(
              [&] {
                for (int r = 0; r < last; ++r) {
                  published[static_cast<size_t>(r)] = transport.slot(r).waits_in.load();
                  if (published[static_cast<size_t>(r)] == 0) return false;
                }
                return true;
              },
              "the other ranks wait in the all-reduce");
          // Asynchronous, for its Work's sequence number (a synchronous call's Work has none).
          const auto work = all_reduce(tensor, ReduceOp::SUM, nullptr, /*async_op=*/true);
          work->wait();
          for (int r = 0; r < last; ++r) {
            require(published[static_cast<size_t>(r)] == work->sequence(),
                    str("rank ", r, " published wait ", published[static_cast<size_t>(r)],
                        " for the all-reduce of sequence ", work->sequence()));
          }
        } else {
          all_reduce(tensor);
        }
        require(tensor.cpu().to_vector<float>() ==
                    std::vector<float>(4, static_cast<float>(ctx.world * (ctx.world + 1) / 2)),
                "all_reduce result");
        // A barrier's waits are not shared ones: once it is done, no rank is in the all-reduce.
        barrier();
        for (int r = 0; r < ctx.world; ++r) {
          require(transport.slot(r).waits_in.load() == 0,
                  str("rank ", r, " still shows a wait after the barrier"));
        }
        barrier();
      }
      destroy_process_group();
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
  }
}

// Ranks 0..world-2 call the all-reduce `call` makes; the last rank waits until they all sleep in
// it (past their yield budget), checks that none published a wait, then joins.
void expect_nothing_published(int world, bool async_op, bool sub_group, const char* mate_spin) {
  SCOPED_TRACE(str(world, " ranks, ", async_op ? "async" : "sync", sub_group ? ", sub-group" : "",
                   ", SHMCCL_MATE_SPIN_TIME=", mate_spin));
  auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
    bind_all_to_one_cpu();
    setenv("SHMCCL_YIELD_TIME", "0", 1);
    setenv("SHMCCL_MATE_SPIN_TIME", mate_spin, 1);
    config::reload();
    npu::set_device(ctx.rank % 8);
    ctx.init();
    // The sub-group leaves out rank 0, so its slots miss a rank that shares the core.
    std::vector<int> members;
    for (int r = sub_group ? 1 : 0; r < ctx.world; ++r)
      members.push_back(r);
    const ProcessGroupPtr group = sub_group ? new_group(members) : default_group();
    if (group->is_member()) {
      const transport::GroupTransport& transport = transport_of(group);
      const int last = group->size() - 1;
      Tensor tensor = full({4}, 1, kInt32).npu();
      if (group->rank() == last) {
        testing::await_sleepers(static_cast<uint32_t>(last),
                                "the other ranks sleep in the all-reduce", group);
        for (int r = 0; r < last; ++r) {
          require(transport.slot(r).waits_in.load() == 0,
                  str("rank ", r, " published a wait: ", transport.slot(r).waits_in.load()));
        }
      }
      // A wait with a timeout never runs the call on this thread: the stream's thread does.
      require(group->all_reduce(tensor, ReduceOp::SUM, async_op)->wait(std::chrono::minutes(1)),
              "all_reduce finished");
      require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, group->size()),
              "all_reduce result");
    }
    barrier();
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST(SharedWaits, AsynchronousCollectivesPublishNothing) {
  for (int world : {2, 3, 4, 8})
    expect_nothing_published(world, /*async_op=*/true, /*sub_group=*/false, "20us");
}

TEST(SharedWaits, SubGroupsOfTheJobPublishNothing) {
  for (int world : {3, 4, 8})
    expect_nothing_published(world, /*async_op=*/false, /*sub_group=*/true, "20us");
}

TEST(SharedWaits, NothingIsPublishedWithMateSpinningOff) {
  for (int world : {2, 4})
    expect_nothing_published(world, /*async_op=*/false, /*sub_group=*/false, "0");
}

}  // namespace
}  // namespace shmccl
