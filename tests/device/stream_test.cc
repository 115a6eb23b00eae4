// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Streams and events: ordering, inline run_sync, error propagation, cross-stream event waits,
// re-recorded events, timing, destruction. Races are closed with promises and latches; the only
// timed waits are bounded probes that something has NOT happened yet.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "multiprocess.h"
#include "shmccl/error.hpp"
#include "shmccl/npu.hpp"
#include "shmccl/tensor.hpp"

namespace shmccl::npu {
namespace {

using detail::StreamImpl;
using namespace std::chrono_literals;

// How long a probe waits before concluding that something did not happen. A broken
// implementation would usually be caught well within it.
constexpr auto kProbe = 20ms;

std::shared_ptr<StreamImpl> make_impl(uint64_t id = 1) {
  return std::make_shared<StreamImpl>(0, id);
}

Stream make_stream(uint64_t id = 1) {
  return Stream(make_impl(id));
}

// Blocks a stream until open() is called. Opening twice is harmless.
class Gate {
 public:
  Gate() : future_(promise_.get_future().share()) {}
  ~Gate() { open(); }
  std::function<void()> task() {
    return [future = future_] { future.wait(); };
  }
  void open() {
    if (!opened_.exchange(true)) promise_.set_value();
  }
  bool is_open() const { return opened_.load(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_;
  std::atomic<bool> opened_{false};
};

TEST(StreamImplTest, RunsTasksFromManyProducersInOrder) {
  static constexpr int kProducers = 4;
  static constexpr int kPerProducer = 2500;  // 10k tasks per stream
  std::vector<std::shared_ptr<StreamImpl>> streams = {make_impl(1), make_impl(2)};
  // Written only by the stream's worker (tasks run one at a time), read after synchronize().
  std::vector<std::vector<int>> seen(streams.size());
  std::latch start(kProducers * static_cast<int>(streams.size()));
  std::vector<std::thread> producers;
  for (size_t s = 0; s < streams.size(); ++s) {
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&, s, p] {
        start.arrive_and_wait();
        for (int i = 0; i < kPerProducer; ++i) {
          streams[s]->enqueue(
              [&seen, s, value = p * kPerProducer + i] { seen[s].push_back(value); });
        }
      });
    }
  }
  for (auto& producer : producers)
    producer.join();
  for (size_t s = 0; s < streams.size(); ++s) {
    streams[s]->synchronize();
    EXPECT_TRUE(streams[s]->idle());
    ASSERT_EQ(seen[s].size(), static_cast<size_t>(kProducers * kPerProducer));
    std::vector<int> last(kProducers, -1);
    for (int value : seen[s]) {
      const int producer = value / kPerProducer;
      EXPECT_GT(value, last[producer]) << "producer " << producer << " reordered";
      last[producer] = value;
    }
  }
}

TEST(StreamImplTest, QueuedTasksRunWithTheStreamsDeviceCurrent) {
  // Allocations made by queued work (the staging buffers of an asynchronous host-tensor
  // collective) belong on the stream's device, not on device 0 of the worker thread.
  auto stream = std::make_shared<StreamImpl>(/*device=*/3, /*id=*/1);
  int seen = -1;
  stream->enqueue([&seen] { seen = current_device(); });
  stream->synchronize();
  EXPECT_EQ(seen, 3);
}

TEST(StreamImplTest, RunSyncOnIdleStreamRunsOnCallerThread) {
  auto stream = make_impl();
  std::thread::id ran_on;
  stream->run_sync([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(stream->idle());

  // Also after the worker exists and has gone idle again.
  stream->enqueue([] {});
  stream->synchronize();
  stream->run_sync([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(StreamImplTest, RunSyncQueuesBehindPendingWork) {
  auto stream = make_impl();
  Gate gate;
  std::vector<char> order;  // appended by tasks, which the stream runs one at a time
  stream->enqueue(gate.task());
  stream->enqueue([&] { order.push_back('a'); });
  std::thread::id ran_on;
  std::thread caller([&] {
    stream->run_sync([&] {
      ran_on = std::this_thread::get_id();
      order.push_back('s');
    });
  });
  const std::thread::id caller_id = caller.get_id();
  // Open the gate only once run_sync has queued its task (gate, 'a', run_sync's wrapper).
  while (stream->pending() < 3)
    std::this_thread::yield();
  gate.open();
  caller.join();
  EXPECT_EQ(order, (std::vector<char>{'a', 's'}));
  EXPECT_NE(ran_on, caller_id);
}

TEST(StreamImplTest, WorkQueuedDuringInlineRunSyncWaitsForIt) {
  auto stream = make_impl();
  std::promise<void> other_ran;
  auto other_ran_future = other_ran.get_future();
  std::vector<char> order;
  stream->run_sync([&] {
    // Another thread queues work while the inline task runs: it must stay behind us.
    std::thread([&] {
      stream->enqueue([&] {
        order.push_back('o');
        other_ran.set_value();
      });
    }).join();
    EXPECT_FALSE(stream->idle());
    EXPECT_EQ(other_ran_future.wait_for(kProbe), std::future_status::timeout);
    order.push_back('i');
  });
  stream->synchronize();
  EXPECT_EQ(order, (std::vector<char>{'i', 'o'}));
}

// Many threads mixing run_sync (inline on an idle stream, queued on a busy one) and enqueue: the
// tasks never overlap and all of them run (`total` is a plain int: only the stream's ordering
// protects it, which ThreadSanitizer checks).
TEST(StreamImplTest, InlineAndQueuedTasksNeverOverlap) {
  auto stream = make_impl();
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  int total = 0;
  auto body = [&] {
    if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
    ++total;
    // Long enough (a few microseconds) for other threads to queue work while it runs.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(3);
    while (std::chrono::steady_clock::now() < until) {
    }
    running.fetch_sub(1);
  };
  constexpr int kThreads = 4;
  constexpr int kTasks = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        if ((i + t) % 3 == 0) {
          stream->enqueue(body);
        } else {
          stream->run_sync(body);
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  stream->synchronize();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(total, kThreads * kTasks);
  EXPECT_TRUE(stream->idle());
}

TEST(StreamImplTest, SynchronizeWaitsForInlineRunSync) {
  auto stream = make_impl();
  std::promise<void> entered;
  Gate gate;
  std::atomic<bool> finished{false};
  std::thread runner([&] {
    stream->run_sync([&] {
      entered.set_value();
      gate.task()();
      finished = true;
    });
  });
  entered.get_future().wait();
  EXPECT_FALSE(stream->synchronize_for(kProbe));
  gate.open();
  stream->synchronize();
  EXPECT_TRUE(finished);
  runner.join();
}

TEST(StreamImplTest, RunSyncNestedInOwnTaskRunsAtOnce) {
  auto stream = make_impl();
  int value = 0;
  stream->enqueue([&] { stream->run_sync([&] { value = 1; }); });
  stream->run_sync([&] { stream->run_sync([&] { value += 1; }); });  // inline, nested
  stream->synchronize();
  EXPECT_EQ(value, 2);
  // synchronize() from its own task would wait for itself: refused, stored as the task's error.
  stream->enqueue([&] { stream->synchronize(); });
  EXPECT_THROW(stream->synchronize(), InvalidArgument);
}

TEST(StreamImplTest, ErrorIsStoredRethrownAtSynchronizeAndCleared) {
  auto stream = make_impl();
  bool later_ran = false;
  stream->enqueue([] { throw std::runtime_error("first"); });
  stream->enqueue([] { throw std::runtime_error("second"); });
  stream->enqueue([&] { later_ran = true; });
  try {
    stream->synchronize();
    ADD_FAILURE() << "synchronize() did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_TRUE(later_ran);
  EXPECT_NO_THROW(stream->synchronize());
}

TEST(StreamImplTest, RunSyncPropagatesItsOwnErrorOnly) {
  auto stream = make_impl();
  // Inline.
  EXPECT_THROW(stream->run_sync([] { throw std::logic_error("inline"); }), std::logic_error);
  EXPECT_NO_THROW(stream->synchronize());
  // Queued behind pending work.
  Gate gate;
  stream->enqueue(gate.task());
  std::thread opener([&] {
    while (stream->pending() < 2)
      std::this_thread::yield();  // run_sync has queued its task
    gate.open();
  });
  EXPECT_THROW(stream->run_sync([] { throw std::logic_error("queued"); }), std::logic_error);
  opener.join();
  EXPECT_NO_THROW(stream->synchronize());
  // A stored error of earlier work stays stored for synchronize().
  stream->enqueue([] { throw std::runtime_error("stored"); });
  EXPECT_NO_THROW(stream->run_sync([] {}));
  EXPECT_THROW(stream->synchronize(), std::runtime_error);
}

// npu::synchronize(device) waits for every stream of the device, also past one whose work
// failed: its caller may free the tensors of the others once it throws.
TEST(StreamImplTest, DeviceSynchronizeWaitsForEveryStreamPastAFailedOne) {
  Stream failing(0);  // created first: synchronized first
  Stream busy(0);
  failing.impl()->enqueue([] { throw std::runtime_error("failed task"); });
  failing.impl()->enqueue([] {});
  Gate gate;
  busy.impl()->enqueue(gate.task());
  std::future<void> synchronized = std::async(std::launch::async, [] { synchronize(0); });
  EXPECT_EQ(synchronized.wait_for(kProbe), std::future_status::timeout)
      << "synchronize() returned while another stream still ran";
  gate.open();
  EXPECT_THROW(synchronized.get(), std::runtime_error);
  EXPECT_TRUE(busy.query());
}

// npu::synchronize() throws one stream's error; another's stays stored: the next call (or that
// stream's own synchronize()) throws it. None is lost, none is thrown twice.
TEST(StreamImplTest, DeviceSynchronizeKeepsTheOtherStreamsErrors) {
  Stream first(0);
  Stream second(0);
  first.impl()->enqueue([] { throw std::runtime_error("first failed"); });
  second.impl()->enqueue([] { throw std::runtime_error("second failed"); });
  std::vector<std::string> thrown;
  for (int call = 0; call < 2; ++call) {
    try {
      synchronize(0);
      ADD_FAILURE() << "call " << call << " of synchronize() threw nothing";
    } catch (const std::runtime_error& error) {
      thrown.emplace_back(error.what());
    }
  }
  std::sort(thrown.begin(), thrown.end());
  EXPECT_EQ(thrown, (std::vector<std::string>{"first failed", "second failed"}));
  EXPECT_NO_THROW(synchronize(0));
  EXPECT_NO_THROW(first.synchronize());
  EXPECT_NO_THROW(second.synchronize());
}

// A blocking read of device memory by the host (.cpu(), item(), to_vector()) is a synchronisation
// of the current stream: an error of work queued there is thrown there, once, instead of the
// values the failed work left behind.
TEST(StreamImplTest, AHostReadThrowsTheErrorOfFailedStreamWork) {
  set_device(0);
  shmccl::Tensor tensor = shmccl::full({4}, 1, shmccl::kInt32).npu();
  for (int read = 0; read < 3; ++read) {
    current_stream().impl()->enqueue([] { throw std::runtime_error("the update failed"); });
    try {
      if (read == 0) tensor.cpu();
      if (read == 1) tensor.item_as_double(0);
      if (read == 2) tensor.to_vector<int32_t>();
      ADD_FAILURE() << "read " << read << " returned the tensor";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "the update failed");
    }
    EXPECT_NO_THROW(current_stream().synchronize()) << "thrown twice";
    EXPECT_EQ(tensor.cpu().to_vector<int32_t>(), std::vector<int32_t>(4, 1));
  }
}

TEST(StreamImplTest, SynchronizeForTimesOut) {
  auto stream = make_impl();
  EXPECT_TRUE(stream->synchronize_for(0ns));
  Gate gate;
  stream->enqueue(gate.task());
  EXPECT_FALSE(stream->synchronize_for(kProbe));
  EXPECT_FALSE(stream->idle());
  gate.open();
  EXPECT_TRUE(stream->synchronize_for(std::chrono::nanoseconds::max()));
  EXPECT_TRUE(stream->idle());
}

TEST(StreamImplTest, DestructionDrainsPendingWork) {
  static constexpr int kTasks = 1000;
  std::atomic<int> ran{0};
  Gate gate;
  std::latch destroying(1);
  std::thread opener([&] {
    destroying.wait();
    gate.open();
  });
  {
    auto stream = make_impl();
    stream->enqueue(gate.task());
    for (int i = 0; i < kTasks; ++i)
      stream->enqueue([&] { ran.fetch_add(1); });
    destroying.count_down();
  }  // the destructor waits for the gate, then for every task
  EXPECT_EQ(ran.load(), kTasks);
  opener.join();
}

TEST(StreamImplTest, LastHandleDroppedByOwnTask) {
  Gate gate;
  std::promise<void> drained;
  auto drained_future = drained.get_future();
  {
    Stream stream = make_stream();
    // The first task holds a handle; the second must still run after that handle, the last,
    // is released on the worker thread.
    stream.impl()->enqueue([keep = stream, task = gate.task()] { task(); });
    stream.impl()->enqueue([&] { drained.set_value(); });
  }
  gate.open();
  drained_future.wait();
}

TEST(StreamImplTest, ManyStreams) {
  static constexpr size_t kStreams = 32;
  static constexpr int kTasks = 200;
  std::vector<Stream> streams;
  // counts[i] is written by stream i's tasks and read by stream i + 1's after the event wait.
  std::vector<int> counts(kStreams, 0);
  for (size_t i = 0; i < kStreams; ++i)
    streams.push_back(make_stream(i + 1));
  // A chain: each stream starts its work only after the previous stream's work is done.
  Gate gate;
  streams[0].impl()->enqueue(gate.task());
  for (size_t i = 0; i < kStreams; ++i) {
    if (i > 0) streams[i].wait_event(streams[i - 1].record_event());
    for (int t = 0; t < kTasks; ++t) {
      streams[i].impl()->enqueue([&counts, i] {
        if (i > 0) {
          EXPECT_EQ(counts[i - 1], kTasks);
        }
        ++counts[i];
      });
    }
  }
  gate.open();
  for (auto& stream : streams)
    stream.synchronize();
  for (int count : counts)
    EXPECT_EQ(count, kTasks);
}

// A thread that needs a queued task done runs it itself when no one has started it (Work::wait
// of an asynchronous collective). Whether the worker, woken by the enqueue, takes it first is up
// to the scheduler, so the test repeats until the helper wins once (almost always the first try;
// never, without helping) and checks that run.
TEST(StreamImplTest, HelperRunsATaskNoOneStartedOnItsThreadWithTheStreamsDevice) {
  set_device(0);
  auto impl = std::make_shared<StreamImpl>(/*device=*/3, /*id=*/1);
  Stream stream(impl);
  bool helped = false;
  for (int attempt = 0; attempt < 10000 && !helped; ++attempt) {
    // Atomic: when the worker takes the task, it writes while this thread checks. The other
    // results are read only when this thread wrote them.
    std::atomic<bool> ran_here{false};
    int device_seen = -1;
    bool stream_busy_inside = false;
    const std::thread::id caller = std::this_thread::get_id();
    std::function<void(bool)> help = impl->enqueue_helpable([&] {
      if (std::this_thread::get_id() != caller) return;
      device_seen = current_device();
      stream_busy_inside = !impl->idle();
      ran_here = true;
    });
    Event done;
    done.record(stream);  // a marker right behind the task: the helper completes it too
    help(true);
    if (!ran_here) {
      stream.synchronize();  // the worker took it; try again
      continue;
    }
    helped = true;
    EXPECT_EQ(device_seen, 3);
    EXPECT_EQ(current_device(), 0);  // the caller's device is back
    EXPECT_TRUE(stream_busy_inside);
    EXPECT_TRUE(done.query());
    EXPECT_TRUE(impl->idle());
    stream.synchronize();
  }
  EXPECT_TRUE(helped) << "the helper never ran the task in 10000 tries";
}

TEST(StreamImplTest, HelpedTaskErrorIsStoredLikeAQueuedOne) {
  auto impl = make_impl();
  bool helped = false;
  for (int attempt = 0; attempt < 10000 && !helped; ++attempt) {
    std::thread::id ran_on;
    std::function<void(bool)> help = impl->enqueue_helpable([&] {
      ran_on = std::this_thread::get_id();
      throw std::runtime_error("helped task failed");
    });
    EXPECT_NO_THROW(help(true));  // the task's error is the stream's, as on the worker
    try {
      impl->synchronize();
      ADD_FAILURE() << "synchronize() did not rethrow";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "helped task failed");
    }
    helped = ran_on == std::this_thread::get_id();  // after synchronize: the task is done
  }
  EXPECT_TRUE(helped);
  EXPECT_NO_THROW(impl->synchronize());
}

// Queues helpable tasks and helps each until the caller, not the worker, ran one (whether the
// worker takes a task first is up to the scheduler). False if that never happened.
bool help_until_helped(StreamImpl& impl) {
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::thread::id ran_on;
    impl.enqueue_helpable([&] { ran_on = std::this_thread::get_id(); })(true);
    impl.synchronize();
    if (ran_on == std::this_thread::get_id()) return true;
  }
  return false;
}

// A stream whose idle worker polls once an hour (SHMCCL_HELPED_POLL_TIME) and is polling now: it
// takes a helpable task only when woken for it. worker_polls() is false if it never got there.
std::shared_ptr<StreamImpl> make_hourly_polling_impl() {
  setenv("SHMCCL_HELPED_POLL_TIME", "1h", 1);
  config::reload();
  auto impl = make_impl();
  unsetenv("SHMCCL_HELPED_POLL_TIME");
  config::reload();
  if (!help_until_helped(*impl)) return impl;
  // The worker polls from its next idle moment on.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!impl->worker_polls() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  return impl;
}

// Once waiters run its tasks, the idle worker polls (here every 20 ms) instead of being woken
// for each helpable task. A task no one waits for must still run on its own within a poll or so,
// and a marker behind it complete. Each round helps a task first, so the worker is polling (not
// asleep until woken) when the task comes: a poll period read wrongly (seconds for milliseconds)
// misses the 1 s bound.
TEST(StreamImplTest, HelpableTaskNoOneWaitsForRunsOnItsOwnAfterHelpedOnes) {
  setenv("SHMCCL_HELPED_POLL_TIME", "20ms", 1);
  config::reload();
  auto impl = make_impl();
  unsetenv("SHMCCL_HELPED_POLL_TIME");
  config::reload();
  Stream stream(impl);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(help_until_helped(*impl));
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!impl->worker_polls() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    ASSERT_TRUE(impl->worker_polls()) << "call " << i << ": the idle worker does not poll";
    std::promise<std::thread::id> ran_on;
    auto ran_on_future = ran_on.get_future();
    (void)impl->enqueue_helpable([&] { ran_on.set_value(std::this_thread::get_id()); });
    Event done;
    done.record(stream);
    // No helper, no synchronize: only the worker can run it, at its next poll.
    ASSERT_EQ(ran_on_future.wait_for(1s), std::future_status::ready) << "call " << i;
    EXPECT_NE(ran_on_future.get(), std::this_thread::get_id());
    done.synchronize();  // blocks without waking the worker: its poll completes the marker
  }
}

// A thread that waits with a deadline, or orders another stream after the task, asks the
// polling worker to start it now (run_here = false). With an hour-long poll, only that can.
TEST(StreamImplTest, StartNowWakesAPollingWorker) {
  std::shared_ptr<StreamImpl> impl = make_hourly_polling_impl();
  ASSERT_TRUE(impl->worker_polls());
  std::promise<void> ran;
  auto ran_future = ran.get_future();
  std::function<void(bool)> help = impl->enqueue_helpable([&] { ran.set_value(); });
  EXPECT_EQ(ran_future.wait_for(kProbe), std::future_status::timeout);  // not woken for it
  help(false);
  ASSERT_EQ(ran_future.wait_for(10s), std::future_status::ready);
  impl->synchronize();
}

// A helped task that holds the stream's last handle drops it on the helper's thread, while the
// worker waits for that task's ticket to run the next one. The stream must not join the worker
// then (it would wait for itself): the worker drains the queue once the helped task is counted.
// With an hour-long poll the worker never takes the helpable task, so the helper runs it.
TEST(StreamImplTest, HelpedTaskDroppingTheLastHandleLetsTheWorkerDrainTheQueue) {
  std::shared_ptr<StreamImpl> impl = make_hourly_polling_impl();
  ASSERT_TRUE(impl->worker_polls());
  // Shared: if the helper hangs, the test returns while its thread and the worker still run.
  struct Observed {
    std::atomic<std::thread::id> helped_ran_on;
    std::promise<std::thread::id> helper;
    std::promise<std::thread::id> next_ran_on;
  };
  auto observed = std::make_shared<Observed>();
  auto helper_future = observed->helper.get_future();
  auto next_ran_on_future = observed->next_ran_on.get_future();
  std::function<void(bool)> help = impl->enqueue_helpable([observed, last_handle = impl] {
    observed->helped_ran_on = std::this_thread::get_id();
    // Queued behind this task: the worker wakes and waits for this task's ticket.
    last_handle->enqueue(
        [observed] { observed->next_ran_on.set_value(std::this_thread::get_id()); });
  });
  impl.reset();  // the task's capture is the stream's last handle now
  // The helper would block for good in a join: run it where a hang is observable.
  std::thread([help = std::move(help), observed] {
    help(true);
    observed->helper.set_value(std::this_thread::get_id());
  }).detach();
  ASSERT_EQ(helper_future.wait_for(10s), std::future_status::ready)
      << "the helper hangs in the stream's destructor";
  EXPECT_EQ(observed->helped_ran_on.load(), helper_future.get()) << "the worker ran the task";
  ASSERT_EQ(next_ran_on_future.wait_for(10s), std::future_status::ready)
      << "the task queued behind the helped one never ran";
  EXPECT_NE(next_ran_on_future.get(), std::this_thread::get_id());
}

// A child forked while an event's record is pending has no thread to run the record's marker: a
// wait for it there (on the host, or by a stream made in the child) is an error, not a hang.
TEST(StreamImplTest, AnEventPendingAtForkIsAnErrorToWaitForInTheChild) {
  auto impl = make_impl();
  Stream stream(impl);
  Gate gate;
  std::promise<void> gate_reached;
  impl->enqueue([&, task = gate.task()] {
    gate_reached.set_value();
    task();
  });
  Event pending;
  pending.record(stream);
  // Fork only once the worker waits at the gate: a worker still starting (setting its device,
  // reading settings) may hold a lock the child then needs (a new stream reads settings too).
  gate_reached.get_future().wait();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      pending.synchronize();
      code = 1;
    } catch (const InvalidArgument& error) {
      if (std::string(error.what()).find("recorded before fork()") == std::string::npos) code = 2;
    }
    try {
      Stream made_here(make_impl(2));
      pending.wait(made_here);
      code = code != 0 ? code : 3;
    } catch (const InvalidArgument&) {
    }
    _exit(code);
  }
  EXPECT_EQ(testing::exit_code_within(child, 10s), 0)
      << "1: the wait returned, 2: wrong text, 3: stream wait, "
         "-1: it hung";
  gate.open();
  pending.synchronize();  // in this process the record completes as ever
  EXPECT_TRUE(pending.query());
}

TEST(StreamImplTest, HelperNeverRunsATaskBeforeOneTheWorkerRuns) {
  auto impl = make_impl();
  Gate gate;
  std::promise<void> gate_started;
  impl->enqueue([&, task = gate.task()] {
    gate_started.set_value();
    task();
  });
  gate_started.get_future().wait();  // the worker is inside the first task
  std::thread::id ran_on;
  std::function<void(bool)> help =
      impl->enqueue_helpable([&] { ran_on = std::this_thread::get_id(); });
  help(true);  // must return at once: the task is behind one running elsewhere
  EXPECT_EQ(ran_on, std::thread::id());
  EXPECT_FALSE(impl->idle());
  gate.open();
  impl->synchronize();
  EXPECT_NE(ran_on, std::thread::id());
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(StreamImplTest, HelperOfAFinishedTaskOrADestroyedStreamDoesNothing) {
  std::function<void(bool)> help;
  int runs = 0;
  {
    auto impl = make_impl();
    help = impl->enqueue_helpable([&] { ++runs; });
    impl->synchronize();
    EXPECT_EQ(runs, 1);
    help(true);  // already done
    EXPECT_EQ(runs, 1);
  }
  help(true);  // the stream is gone (the helper holds it weakly)
  EXPECT_EQ(runs, 1);
}

TEST(StreamImplTest, HelperInsideTheStreamsOwnTaskDoesNotWaitForItself) {
  auto impl = make_impl();
  bool later_ran = false;
  std::function<void(bool)> help_later;
  std::promise<void> helped;
  impl->enqueue([&] {
    help_later = impl->enqueue_helpable([&] { later_ran = true; });
    help_later(true);  // a later task of this stream: it cannot run before this one ends
    EXPECT_FALSE(later_ran);
    helped.set_value();
  });
  helped.get_future().wait();
  impl->synchronize();
  EXPECT_TRUE(later_ran);
}

TEST(StreamTest, WrapsImpl) {
  auto impl = std::make_shared<StreamImpl>(3, 42);
  Stream stream(impl);
  EXPECT_EQ(stream.device(), 3);
  EXPECT_EQ(stream.id(), 42u);
  EXPECT_TRUE(stream.query());
  EXPECT_EQ(stream, Stream(impl));
  EXPECT_NE(stream, make_stream(43));
  Gate gate;
  impl->enqueue(gate.task());
  EXPECT_FALSE(stream.query());
  gate.open();
  stream.synchronize();
  EXPECT_TRUE(stream.query());
}

TEST(StreamTest, NewStreamsOnDevice) {
  Stream first(0);
  Stream second(0);
  EXPECT_EQ(first.device(), 0);
  EXPECT_NE(first.id(), second.id());
  EXPECT_NE(first, second);
  EXPECT_TRUE(first.query());
}

// Collectives and copies find the caller's stream through a per-thread cache: it must follow
// set_stream, guards and the current device, per thread.
TEST(StreamTest, CurrentStreamLookupFollowsSetStreamAndGuards) {
  auto current = [](int device) { return &device::current_stream_impl(device); };
  set_device(0);
  StreamImpl* default0 = default_stream(0).impl().get();
  StreamImpl* default1 = default_stream(1).impl().get();
  EXPECT_EQ(current(0), default0);
  EXPECT_EQ(current(-1), default0);
  EXPECT_EQ(current(1), default1);

  Stream first(0);
  Stream second(0);
  set_stream(first);
  EXPECT_EQ(current(0), first.impl().get());
  EXPECT_EQ(current(-1), first.impl().get());
  EXPECT_EQ(current(1), default1);  // other devices keep theirs
  {
    StreamGuard guard(second);
    EXPECT_EQ(current(0), second.impl().get());
  }
  EXPECT_EQ(current(0), first.impl().get());
  std::thread([&] { EXPECT_EQ(current(0), default0); }).join();  // per thread
  set_device(1);
  EXPECT_EQ(current(-1), default1);
  set_device(0);
  set_stream(default_stream(0));
  EXPECT_EQ(current(0), default0);
  EXPECT_THROW(current(1000), Error);
}

// As torch's set_stream and c10::StreamGuard: the stream's device becomes the current device, so an
// event recorded (and a stream taken) without naming one is on the stream's device; the guard
// gives the previous device and stream back.
TEST(StreamImplTest, SetStreamAndTheGuardMakeTheStreamsDeviceCurrent) {
  set_device(0);
  Stream on_one(1);
  Gate gate;
  on_one.impl()->enqueue(gate.task());
  Event event;
  {
    StreamGuard guard(on_one);
    EXPECT_EQ(current_device(), 1);
    EXPECT_EQ(current_stream(), on_one);
    event.record();
  }
  EXPECT_EQ(current_device(), 0);
  EXPECT_EQ(current_stream(1), default_stream(1));
  EXPECT_FALSE(event.query()) << "recorded on device 0's stream instead of the guard's";
  gate.open();
  on_one.synchronize();
  EXPECT_TRUE(event.query());

  set_stream(on_one);
  EXPECT_EQ(current_device(), 1);
  EXPECT_EQ(current_stream(), on_one);
  set_stream(default_stream(1));
  set_device(0);
}

TEST(EventTest, RecordWithoutStreamUsesCurrentStream) {
  Stream stream(0);
  Gate gate;
  stream.impl()->enqueue(gate.task());
  Event event;
  {
    StreamGuard guard(stream);
    event.record();
  }
  EXPECT_FALSE(event.query());  // queued behind the gate on `stream`, not on the default stream
  gate.open();
  stream.synchronize();
  EXPECT_TRUE(event.query());
}

TEST(EventTest, NeverRecordedCountsAsCompleted) {
  Event event;
  EXPECT_TRUE(event.query());
  event.synchronize();
  Stream stream = make_stream();
  event.wait(stream);  // nothing to wait for
  EXPECT_TRUE(stream.query());
}

TEST(EventTest, QueryAndSynchronize) {
  Stream stream = make_stream();
  // On an idle stream the record completes at once.
  Event idle_event = stream.record_event();
  EXPECT_TRUE(idle_event.query());

  Gate gate;
  stream.impl()->enqueue(gate.task());
  Event event = stream.record_event();
  EXPECT_FALSE(event.query());
  std::thread opener([&] { gate.open(); });
  event.synchronize();
  EXPECT_TRUE(event.query());
  opener.join();
}

TEST(EventTest, SynchronizeRethrowsErrorsOfEarlierWork) {
  Stream stream = make_stream();
  stream.impl()->enqueue([] { throw std::runtime_error("boom"); });
  Event event = stream.record_event();
  EXPECT_THROW(event.synchronize(), std::runtime_error);
  EXPECT_THROW(stream.synchronize(), std::runtime_error);  // still stored in the stream
  Event clean = stream.record_event();
  EXPECT_NO_THROW(clean.synchronize());
}

TEST(EventTest, CrossStreamWaitBlocksUntilRecordCompletes) {
  Stream a = make_stream(1);
  Stream b = make_stream(2);
  Gate gate;
  std::atomic<bool> b_ran{false};
  bool b_saw_gate_open = false;
  a.impl()->enqueue(gate.task());
  Event event = a.record_event();
  b.wait_event(event);
  b.impl()->enqueue([&] {
    b_saw_gate_open = gate.is_open();
    b_ran = true;
  });
  EXPECT_FALSE(b.impl()->synchronize_for(kProbe));
  EXPECT_FALSE(b_ran);
  EXPECT_FALSE(event.query());
  gate.open();
  b.synchronize();
  EXPECT_TRUE(b_ran);
  EXPECT_TRUE(b_saw_gate_open);
  EXPECT_TRUE(event.query());
}

TEST(EventTest, ReRecordDoesNotAffectEarlierWait) {
  Stream a = make_stream(1);
  Stream b = make_stream(2);
  Stream c = make_stream(3);
  Gate gate_a;
  Gate gate_b;
  Gate gate_c;
  a.impl()->enqueue(gate_a.task());
  c.impl()->enqueue(gate_c.task());
  // b's wait runs only after the re-record below: it must still wait for generation 1 (the one
  // current at the wait_event call), not read the event's generation when it runs.
  b.impl()->enqueue(gate_b.task());
  Event event;
  event.record(a);  // generation 1, pending on a
  b.wait_event(event);
  std::atomic<bool> b_ran{false};
  b.impl()->enqueue([&] { b_ran = true; });
  event.record(c);  // generation 2, pending on c
  EXPECT_FALSE(event.query());
  gate_b.open();

  // Generation 2 completing does not release the wait on generation 1.
  gate_c.open();
  c.synchronize();
  EXPECT_TRUE(event.query());
  EXPECT_FALSE(b.impl()->synchronize_for(kProbe));
  EXPECT_FALSE(b_ran);

  // Generation 1's marker completing late does not disturb the event's state either.
  gate_a.open();
  b.synchronize();
  EXPECT_TRUE(b_ran);
  a.synchronize();
  EXPECT_TRUE(event.query());
}

TEST(EventTest, WaitCapturesGenerationAtCallTime) {
  Stream a = make_stream(1);
  Stream b = make_stream(2);
  Event event;
  Gate gate_b;
  b.impl()->enqueue(gate_b.task());  // whatever wait_event queues runs after the re-record
  event.record(a);                   // completes at once: a is idle
  b.wait_event(event);               // nothing to wait for
  Gate gate;
  a.impl()->enqueue(gate.task());
  event.record(a);  // a later record must not block the earlier wait
  std::promise<void> ran;
  b.impl()->enqueue([&] { ran.set_value(); });
  gate_b.open();
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready)
      << "b waited for the record made after its wait_event";
  EXPECT_FALSE(event.query());
  gate.open();
  event.synchronize();
  b.synchronize();
}

TEST(EventTest, ElapsedTimeCoversWork) {
  Stream stream = make_stream();
  Event start(true);
  Event end(true);
  std::chrono::steady_clock::duration work{};
  start.record(stream);
  stream.impl()->enqueue([&] {
    const auto begin = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(5ms);  // the work being timed
    work = std::chrono::steady_clock::now() - begin;
  });
  end.record(stream);
  end.synchronize();
  const float work_ms = std::chrono::duration<float, std::milli>(work).count();
  const float elapsed = start.elapsed_time(end);
  EXPECT_GE(elapsed, work_ms * 0.999f);
  EXPECT_GE(elapsed, 5.0f * 0.999f);
  EXPECT_LT(elapsed, 5000.0f);
  EXPECT_FLOAT_EQ(start.elapsed_time(start), 0.0f);
}

TEST(EventTest, ElapsedTimeErrors) {
  Stream stream = make_stream();
  Event timed(true);
  Event untimed;
  Event never_recorded(true);
  timed.record(stream);
  untimed.record(stream);
  stream.synchronize();
  EXPECT_THROW(timed.elapsed_time(untimed), InvalidArgument);
  EXPECT_THROW(untimed.elapsed_time(timed), InvalidArgument);
  EXPECT_THROW(timed.elapsed_time(never_recorded), InvalidArgument);
  try {
    never_recorded.elapsed_time(timed);
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("never recorded"), std::string::npos) << e.what();
  }

  Gate gate;
  stream.impl()->enqueue(gate.task());
  Event pending(true);
  pending.record(stream);
  try {
    timed.elapsed_time(pending);
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not completed"), std::string::npos) << e.what();
  }
  gate.open();
  pending.synchronize();
  EXPECT_GE(timed.elapsed_time(pending), 0.0f);
}

}  // namespace
}  // namespace shmccl::npu
