// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Work handles and stream order at their edges: a synchronous call behind busy stream work while
// another thread makes an asynchronous one, timeouts too large for the clock, synchronize() when
// the collective's device is not the current one, a synchronous call behind an asynchronous one
// while the group's stream worker polls, and an asynchronous call that cannot be queued. Real
// ranks, at several world sizes. A late rank calls once the others sleep in the call (the group's
// sleeper count), so a wait that returned too early cannot pass for one that waited.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "collectives/group_state.h"
#include "core/config.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "multiprocess.h"
#include "sleepers.h"
#include "transport/group_transport.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Waits go to sleep at once: a rank asleep in a call is one that waits in it.
void sleep_at_once() {
  setenv("SHMCCL_SPIN_TIME", "0", 1);
  setenv("SHMCCL_YIELD_TIME", "0", 1);
  config::reload();
}

// The last rank is late: it calls once every other rank sleeps in a wait of the default group.
void be_late_if_last(const testing::RankContext& ctx) {
  if (ctx.rank == ctx.world - 1)
    testing::await_sleepers(static_cast<uint32_t>(ctx.world - 1),
                            "the other ranks never slept in the call");
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
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (stream.pending() < 2) {
      if (Clock::now() >= deadline) {
        gate.set_value();  // lets the caller finish, so the failure is reported, not a hang
        sync_caller.join();
        require(false, "the synchronous call never queued behind the stream's work");
      }
      std::this_thread::yield();
    }
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
    sleep_at_once();
    npu::set_device(ctx.rank % 8);
    ctx.init(60000);
    for (const std::chrono::milliseconds huge :
         {std::chrono::milliseconds::max(),
          std::chrono::milliseconds(std::chrono::hours(24 * 365 * 300))}) {
      Tensor t = full({16}, 1, kInt64).npu();
      be_late_if_last(ctx);
      std::shared_ptr<Work> work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
      require(work->wait(huge) && work->is_completed(),
              str("wait(", huge.count(), " ms) returned before the collective completed"));
      default_group()->set_timeout(huge);
      be_late_if_last(ctx);
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
// another thread lets it go. That thread waits until every rank has made its barrier call, then
// until this rank's barrier returns or 300 ms pass. A barrier that ran at once (it used to)
// returns with the gate shut: every rank had called it, and nothing else held it back.
TEST(WorkTest, ABarrierComesAfterTheCurrentStreamsWork) {
  struct Calls {
    std::atomic<int> made[2];
  };
  void* memory =
      mmap(nullptr, sizeof(Calls), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  for (int world : {2, 3, 4, 8}) {
    auto* calls = new (memory) Calls{};
    run_at({world}, [calls](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % npu::device_count());
      ctx.init(60000);
      barrier();
      for (bool async_op : {false, true}) {
        std::atomic<int>& made = calls->made[async_op];
        std::atomic<bool> released{false};
        std::atomic<bool> returned{false};
        std::promise<void> gate;
        std::shared_future<void> opened = gate.get_future().share();
        device::current_stream_impl(-1).enqueue([opened] { opened.wait(); });
        std::thread releaser([&] {
          auto deadline = Clock::now() + std::chrono::seconds(20);
          while (made.load() < ctx.world && Clock::now() < deadline)
            std::this_thread::yield();
          deadline = Clock::now() + std::chrono::milliseconds(300);
          while (!returned.load() && Clock::now() < deadline)
            std::this_thread::yield();
          released = true;
          gate.set_value();
        });
        std::shared_ptr<Work> work;
        if (async_op) {
          work = barrier(nullptr, /*async_op=*/true);
          made.fetch_add(1);
        } else {
          made.fetch_add(1);  // just before: the call blocks
          work = barrier();
        }
        work->wait();
        const bool after = released.load();
        returned = true;
        releaser.join();
        require(after, str(async_op ? "an asynchronous" : "a synchronous",
                           " barrier finished before the work queued on the current stream"));
      }
    });
  }
  munmap(memory, sizeof(Calls));
}

// wait(timeout) of a collective that cannot finish yet (the last rank has not called it) returns
// false after the timeout, and the handle says pending: not completed, no success, no error. The
// last rank calls once every other rank has seen that; then the same handle completes.
TEST(WorkTest, WaitWithATimeoutReturnsFalseWhileTheCollectiveCannotFinish) {
  std::atomic<int>* timed_out =
      static_cast<std::atomic<int>*>(mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(static_cast<void*>(timed_out), MAP_FAILED);
  for (int world : {2, 3, 4, 8}) {
    new (timed_out) std::atomic<int>(0);
    run_at({world}, [timed_out](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(60000);
      Tensor t = full({4096}, ctx.rank + 1, kInt32).npu();
      const int32_t sum = ctx.world * (ctx.world + 1) / 2;
      if (ctx.rank == ctx.world - 1) {
        const auto deadline = Clock::now() + std::chrono::seconds(20);
        while (timed_out->load() < ctx.world - 1) {
          require(Clock::now() < deadline, "the other ranks' waits never returned false");
          std::this_thread::yield();
        }
        all_reduce(t);
      } else {
        std::shared_ptr<Work> work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
        const Clock::time_point start = Clock::now();
        require(!work->wait(std::chrono::milliseconds(50)),
                "wait(50 ms) returned true before the last rank called");
        require(ms_since(start) >= 50, str("wait(50 ms) returned after ", ms_since(start), " ms"));
        require(!work->is_completed() && !work->is_success() && work->exception() == nullptr,
                "a pending work must be neither completed nor successful, with no error");
        timed_out->fetch_add(1);
        require(work->wait(std::chrono::seconds(30)), "the collective did not finish");
        require(work->is_completed() && work->is_success() && work->exception() == nullptr,
                "a finished work must be completed and successful, with no error");
      }
      require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(4096, sum), "the result");
    });
  }
  munmap(timed_out, sizeof(std::atomic<int>));
}

// The collective's tensors are on another device than the current one: synchronize() orders that
// device's current stream (as it orders the call after it), and npu::synchronize of that device
// waits for the collective.
TEST(WorkTest, SynchronizeOrdersTheStreamOfTheCollectivesDevice) {
  run_at({2, 3, 4}, [](const testing::RankContext& ctx) {
    const int current = 2 * ctx.rank;
    const int tensors = 2 * ctx.rank + 1;
    sleep_at_once();
    npu::set_device(current);
    ctx.init(60000);
    for (bool device_synchronize : {false, true}) {
      Tensor t = full({1024}, 1, kFloat32).npu(tensors);
      be_late_if_last(ctx);
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

// A synchronous call that goes through the group's stream (behind an asynchronous call the
// stream's worker ran and a wait just saw end) returns only once the stream has counted it done.
// The asynchronous call's end wakes its waiter before the worker counts it: a synchronous call
// made at once found the stream busy and queued itself behind a call that was over, and so did
// the next, call after call (a thread hand-off each: 0.5 us calls took 6-7 us, for hundreds of
// calls). Now every synchronous call leaves the stream idle, and the next one runs on the caller.
TEST(WorkTest, SynchronousCallsAfterAnAsyncOneLeaveTheGroupsStreamIdle) {
  run_at({2, 3, 4, 8}, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % 8);
    ctx.init(60000);
    detail::GroupState& state = default_group()->state();
    Tensor t = full({16}, ctx.rank, kInt64).npu();
    int busy_after_a_call = 0;
    for (int round = 0; round < 50; ++round) {
      // A wait with a deadline has the worker run the call, not the waiting thread.
      require(
          all_reduce(t, ReduceOp::MAX, nullptr, /*async_op=*/true)->wait(std::chrono::seconds(30)),
          "the asynchronous call did not complete");
      for (int call = 0; call < 20; ++call) {
        all_reduce(t, ReduceOp::MAX);
        if (!state.comm_stream().idle()) ++busy_after_a_call;
      }
    }
    require(busy_after_a_call == 0, str("the group's stream was busy after ", busy_after_a_call,
                                        " of 1000 synchronous calls"));
    require(t.cpu().to_vector<int64_t>()[0] == ctx.world - 1, "the result");
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

// A child forked while rank 0's asynchronous all-reduce waits for the last rank has no thread to
// run it: its wait() and synchronize() there are errors, not hangs. The parent's completes once
// the last rank comes.
TEST(WorkTest, AWorkPendingAtForkIsAnErrorToWaitForInTheChild) {
  const testing::TokenPipe child_done;
  run_at({2, 3, 4, 8}, [&](const testing::RankContext& ctx) {
    npu::set_device(0);
    ctx.init(60000);
    Tensor t = full({16}, 1, kInt64).npu();
    if (ctx.rank == ctx.world - 1) {
      require(child_done.wait(1), "rank 0's child did not finish");
      all_reduce(t);
    } else {
      std::shared_ptr<Work> work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
      if (ctx.rank == 0) {
        const pid_t child = fork();
        require(child >= 0, "fork");
        if (child == 0) {
          int code = 0;
          for (int step = 1; step <= 2; ++step) {
            try {
              step == 1 ? (void)work->wait() : work->synchronize();
              code = step;
            } catch (const InvalidArgument& error) {
              if (std::string(error.what()).find("made before fork()") == std::string::npos)
                code = 10 + step;
            }
            if (code != 0) break;
          }
          _exit(code);
        }
        const int code = testing::exit_code_within(child, std::chrono::seconds(10));
        require(code == 0, str("the child's waits: ", code,
                               " (1, 2: one returned; 11, 12: wrong text; -1: one hung)"));
        child_done.post();
      }
      work->wait();
    }
    require(t.cpu().to_vector<int64_t>() == std::vector<int64_t>(16, ctx.world), "the result");
  });
}

// A task on the caller's stream waits for a later collective of the group (a host tensor's
// all-reduce, which orders after no stream), queued behind an asynchronous call that must come
// after that very task: a cycle. The call's wait for its caller's stream is bounded by the
// group's timeout (1 s here): it fails the call and the group, the later collective fails with
// it, and the stream's task ends. Before, each rank hung for good.
TEST(WorkTest, ACallWhoseCallersStreamWaitsForALaterCollectiveTimesOut) {
  run_at({2, 3, 4, 8}, [](const testing::RankContext& ctx) {
    npu::set_device(0);
    ctx.init(/*timeout_ms=*/1000);
    Tensor t = full({4}, 1, kInt32).npu();
    Tensor host = full({4}, 1, kInt32);
    std::promise<std::shared_ptr<Work>> later;
    npu::default_stream().impl()->enqueue([queued = later.get_future().share()] {
      queued.get()->wait();  // throws once the group failed
    });
    const auto start = Clock::now();
    std::shared_ptr<Work> first = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
    later.set_value(all_reduce(host, ReduceOp::SUM, nullptr, /*async_op=*/true));
    std::string text = "the call completed";
    try {
      require(first->wait(std::chrono::seconds(20)), "the call never ended");
    } catch (const TimeoutError& error) {
      text = error.what();
    }
    require(text.find("waited 1000 ms (the group's timeout) for the work queued before it on its "
                      "caller's current stream") != std::string::npos,
            text);
    require(ms_since(start) < 10000, str("the call failed after ", ms_since(start), " ms"));
    try {
      npu::synchronize();  // the stream's task ended; it rethrows the later collective's error
    } catch (const Error&) {
    }
  });
}

}  // namespace
}  // namespace shmccl
