// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Work handles and stream order at their edges: a synchronous call behind busy stream work while
// another thread makes an asynchronous one, timeouts too large for the clock, synchronize() when
// the collective's device is not the current one, a synchronous call behind an asynchronous one
// while the group's stream worker polls, and an asynchronous call that cannot be queued. Real
// ranks, at several world sizes; a late rank is late by a sleep (its lateness is the point).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "core/config.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;
using Clock = std::chrono::steady_clock;
constexpr auto kLate = std::chrono::milliseconds(300);

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void run_at(std::initializer_list<int> worlds,
            const std::function<void(const testing::RankContext&)>& body) {
  for (int world : worlds) {
    SCOPED_TRACE(str(world, " ranks"));
    testing::RunOptions options;
    auto results = testing::run_ranks(world, body, options);
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
    EXPECT_TRUE(testing::no_segments_left(options.job_id));
  }
}

// A synchronous call made while the caller's stream is busy takes its number at once, in call
// order. It used to take it when the stream came to it: an asynchronous call of another thread
// made meanwhile got the earlier number but was ordered after the stream's work, so each waited
// for the other, with no timeout.
TEST(WorkTest, ASyncCallBehindStreamWorkAndAnotherThreadsAsyncCallBothComplete) {
  run_at({2, 3, 4, 8}, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % 8);
    ctx.init(60000);
    npu::detail::StreamImpl& stream = device::current_stream_impl(ctx.rank % 8);
    Tensor a = full({16}, 1, kInt64).npu();
    Tensor b = full({16}, 2, kInt64).npu();
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    stream.enqueue([opened] { opened.wait(); });  // stream work that outlasts both calls
    std::thread sync_caller([&] {
      npu::set_device(ctx.rank % 8);  // the same (default) stream
      all_reduce(a);
    });
    // The synchronous call is in: it queued a task behind the stream's work (the old code: the
    // call itself; now: the event the group's stream waits for), after taking its number.
    while (stream.pending() < 2)
      std::this_thread::yield();
    std::shared_ptr<Work> work = all_reduce(b, ReduceOp::SUM, nullptr, /*async_op=*/true);
    gate.set_value();
    sync_caller.join();
    require(work->wait(std::chrono::seconds(30)), "the asynchronous call did not complete");
    require(a.cpu().to_vector<int64_t>() == std::vector<int64_t>(16, ctx.world) &&
                b.cpu().to_vector<int64_t>() == std::vector<int64_t>(16, 2 * ctx.world),
            "the results");
  });
}

// milliseconds::max() (a common "forever") and 300 years used to overflow the clock: wait()
// returned false at once, and a group timeout that large failed its collective at once.
TEST(WorkTest, HugeTimeoutsWaitAsLongAsItTakes) {
  run_at({2, 3}, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % 8);
    ctx.init(60000);
    for (const std::chrono::milliseconds huge :
         {std::chrono::milliseconds::max(),
          std::chrono::milliseconds(std::chrono::hours(24 * 365 * 300))}) {
      Tensor t = full({16}, 1, kInt64).npu();
      if (ctx.rank == ctx.world - 1) std::this_thread::sleep_for(kLate);
      std::shared_ptr<Work> work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
      require(work->wait(huge) && work->is_completed(),
              str("wait(", huge.count(), " ms) returned before the collective completed"));
      default_group()->set_timeout(huge);
      if (ctx.rank == ctx.world - 1) std::this_thread::sleep_for(kLate);
      all_reduce(t);
      require(t.cpu().to_vector<int64_t>() == std::vector<int64_t>(16, ctx.world * ctx.world),
              str("the all_reduce with a group timeout of ", huge.count(), " ms"));
      default_group()->set_timeout(std::chrono::seconds(60));
    }
    for (const int64_t bad : {0, -1}) {
      try {
        default_group()->set_timeout(std::chrono::milliseconds(bad));
        throw testing::RequirementFailed(str("set_timeout(", bad, " ms) was accepted"));
      } catch (const InvalidArgument& error) {
        require(std::string(error.what()).find("must be > 0 ms") != std::string::npos,
                error.what());
      }
    }
  });
}

// A barrier has no tensors, yet comes after the work queued on the current stream of the current
// device (as torch's, an all-reduce on that device): here a task that holds the stream until
// another thread lets it go, 50 ms on. A barrier that ran at once (it used to) returns before.
TEST(WorkTest, ABarrierComesAfterTheCurrentStreamsWork) {
  run_at({2, 3, 4, 8}, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init(60000);
    barrier();
    for (bool async_op : {false, true}) {
      std::atomic<bool> released{false};
      std::promise<void> gate;
      std::shared_future<void> opened = gate.get_future().share();
      device::current_stream_impl(-1).enqueue([opened] { opened.wait(); });
      std::thread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the span checked
        released = true;
        gate.set_value();
      });
      std::shared_ptr<Work> work = barrier(nullptr, async_op);
      work->wait();
      const bool after = released.load();
      releaser.join();
      require(after, str(async_op ? "an asynchronous" : "a synchronous",
                         " barrier finished before the work queued on the current stream"));
    }
  });
}

// The collective's tensors are on another device than the current one: synchronize() orders that
// device's current stream (as it orders the call after it), and npu::synchronize of that device
// waits for the collective.
TEST(WorkTest, SynchronizeOrdersTheStreamOfTheCollectivesDevice) {
  run_at({2, 3, 4}, [](const testing::RankContext& ctx) {
    const int current = 2 * ctx.rank;
    const int tensors = 2 * ctx.rank + 1;
    npu::set_device(current);
    ctx.init(60000);
    for (bool device_synchronize : {false, true}) {
      Tensor t = full({1024}, 1, kFloat32).npu(tensors);
      if (ctx.rank == ctx.world - 1) std::this_thread::sleep_for(kLate);
      std::shared_ptr<Work> work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
      if (device_synchronize) {
        npu::synchronize(tensors);
        require(work->is_completed(), "npu::synchronize of the tensors' device returned first");
      } else {
        work->synchronize();
        Tensor doubled = t + t;  // on npu:<tensors>'s current stream
        require(doubled.cpu().to_vector<float>()[0] == 2.0f * static_cast<float>(ctx.world),
                "work queued on the tensors' device after synchronize() ran before the call");
      }
      work->wait();
    }
  });
}

// After waits that ran the group's calls on the waiting thread, the stream's idle worker polls
// (SHMCCL_HELPED_POLL_TIME) instead of sleeping until woken. A synchronous call behind an
// asynchronous one that nobody waited for used to wait for the poll's end: here 30 s after the
// helped waits, which end milliseconds before the call, so a regression far exceeds the bound.
TEST(WorkTest, ASyncCallBehindAnAsyncOneDoesNotWaitForThePoll) {
  run_at({2, 3, 4, 8}, [](const testing::RankContext& ctx) {
    setenv("SHMCCL_HELPED_POLL_TIME", "30s", 1);
    config::reload();
    npu::set_device(ctx.rank % 8);
    ctx.init(60000);
    Tensor t = full({16}, 1, kInt64).npu();
    Tensor u = full({16}, 1, kInt64).npu();
    for (int i = 0; i < 3; ++i)
      all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();  // helped
    barrier();
    std::shared_ptr<Work> queued = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
    const auto start = Clock::now();
    all_reduce(u);
    const double took = ms_since(start);
    queued->wait();
    require(took < 1500, str("the synchronous call took ", took, " ms"));
    require(u.cpu().to_vector<int64_t>()[0] == ctx.world, "the synchronous call's result");
  });
}

// An asynchronous call whose queuing fails (its caller's stream was made before fork()) fails on
// its rank alone, before it takes a number: the next call is the same call on every rank. It used
// to take one first, so the ranks' numbers differed from then on.
TEST(WorkTest, AnAsyncCallThatCannotBeQueuedLeavesTheGroupInStep) {
  npu::Stream made_before_fork(0);
  made_before_fork.synchronize();
  run_at({2, 3, 4, 8}, [&](const testing::RankContext& ctx) {
    npu::set_device(0);
    ctx.init(60000);
    Tensor t = full({16}, 1, kInt64).npu();
    if (ctx.rank == 0) {
      npu::set_stream(made_before_fork);
      try {
        all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
        throw testing::RequirementFailed("a stream made before fork() queued a collective");
      } catch (const InvalidArgument& error) {
        require(std::string(error.what()).find("before fork()") != std::string::npos, error.what());
      }
      npu::set_stream(npu::default_stream(0));
    }
    all_reduce(t);
    require(t.cpu().to_vector<int64_t>() == std::vector<int64_t>(16, ctx.world), "the result");
  });
}

}  // namespace
}  // namespace shmccl
