// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The flight recorder: its ring keeps the last N collectives with their state; a mismatch, a
// timeout or SIGUSR1 writes it to SHMCCL_TRACE_FILE.<rank>; SHMCCL_TRACE_BUFFER_SIZE=0 turns it
// off; a program's own SIGUSR1 handler is left alone.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "collectives/flight_recorder.h"
#include "collectives/trace_dumper.h"
#include "core/config.h"
#include "core/logging.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using collectives::TraceRecord;
using collectives::TraceRing;
using collectives::TraceState;
using testing::require;
using testing::str;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Waits (bounded) until `path` contains `needle`; the file's text.
std::string wait_for_text(const std::string& path, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string text = read_file(path);
  while (text.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    text = read_file(path);
  }
  return text;
}

class TraceDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 str("flight_recorder_test_", getpid(), "_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
    prefix_ = (directory_ / "trace").string();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::string file(int rank) const { return prefix_ + "." + std::to_string(rank); }

  std::filesystem::path directory_;
  std::string prefix_;
};

// In a forked rank: the recorder's settings, before the first group exists.
void configure(const std::string& prefix, const char* buffer_size = "2000") {
  setenv("SHMCCL_TRACE_FILE", prefix.c_str(), 1);
  setenv("SHMCCL_TRACE_BUFFER_SIZE", buffer_size, 1);
  setenv("SHMCCL_DEBUG", "NONE", 1);  // keep the test's output short
  config::reload();
  log::reload();
}

// An uneven all-gather's plan (OpPlan is not copyable: returned as a pointer).
std::unique_ptr<collectives::OpPlan> gather_plan(uint64_t sequence, const Tensor& input) {
  auto owned = std::make_unique<collectives::OpPlan>();
  collectives::OpPlan& plan = *owned;
  plan.kind = transport::OpKind::kAllGather;
  plan.name = "all_gather_into_tensor_uneven";
  plan.dtype = kInt32;
  plan.num_splits = 2;
  plan.splits[0] = 2;
  plan.splits[1] = 4;
  plan.sequence = sequence;
  plan.borrow_input(input);
  return owned;
}

// What the executor records of a small synchronous collective as it starts: an entry and a new
// run when its call differs from the one before (`new_call`), else nothing (a member of the open
// run is recorded when it completes: complete_inline()).
void record_inline(TraceRing& ring, const collectives::OpPlan& plan, bool new_call) {
  if (new_call) {
    ring.scheduled(plan, false);
    ring.start_run(plan.sequence);
  }
}

// ... and as it completes.
void complete_inline(TraceRing& ring, uint64_t sequence, bool new_call) {
  if (new_call) {
    ring.finished(sequence, true, false);
  } else {
    ring.run_member_completed(sequence);
  }
}

// Collectives 1..last of one small call, `async_sequence` among them asynchronous (what submit()
// and the executor record of it): a run from 1 with an entry of its own inside.
void record_run_around_async(TraceRing& ring, const Tensor& input, uint64_t last,
                             uint64_t async_sequence) {
  for (uint64_t sequence = 1; sequence <= last; ++sequence) {
    if (sequence == async_sequence) {
      ring.scheduled(*gather_plan(sequence, input), /*async_op=*/true);
      ring.started(sequence);
      ring.finished(sequence, true, true);
      continue;
    }
    record_inline(ring, *gather_plan(sequence, input), /*new_call=*/sequence == 1);
    complete_inline(ring, sequence, sequence == 1);
  }
}

std::vector<TraceRecord> sorted_snapshot(const TraceRing& ring) {
  std::vector<TraceRecord> records = ring.snapshot();
  std::sort(records.begin(), records.end(),
            [](const TraceRecord& a, const TraceRecord& b) { return a.sequence < b.sequence; });
  return records;
}

TEST(TraceRingTest, KeepsTheLastCollectivesWithTheirStates) {
  TraceRing ring("g", 0, 2, 4);
  Tensor input = zeros({6}, kInt32);
  for (uint64_t sequence = 1; sequence <= 6; ++sequence) {
    ring.scheduled(*gather_plan(sequence, input), /*async_op=*/sequence == 6);
    if (sequence <= 4) ring.finished(sequence, /*success=*/sequence != 4, /*timed=*/true);
  }
  ring.started(6);
  std::vector<TraceRecord> records = sorted_snapshot(ring);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].sequence, 3u);
  EXPECT_EQ(records[0].state, TraceState::kCompleted);
  EXPECT_EQ(records[1].state, TraceState::kFailed);
  EXPECT_EQ(records[2].state, TraceState::kStarted);  // synchronous: started when scheduled
  EXPECT_EQ(records[3].state, TraceState::kStarted);
  EXPECT_TRUE(records[3].async_op);
  EXPECT_NE(records[3].started_at, 0u);
  EXPECT_EQ(records[3].finished_at, 0u);
  EXPECT_EQ(records[3].splits, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(records[3].input_numel, 6);
  EXPECT_STREQ(records[3].name, "all_gather_into_tensor_uneven");
  // A state change of a collective whose entry was reused is dropped.
  ring.finished(2, true, true);
  EXPECT_EQ(ring.snapshot().size(), 4u);
}

TEST(TraceRingTest, ConcurrentDumpsSeeConsistentEntries) {
  TraceRing ring("g", 0, 1, 8);
  Tensor input = zeros({4}, kFloat32);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const TraceRecord& r : ring.snapshot()) {
        ASSERT_EQ(r.input_numel, static_cast<int64_t>(r.sequence % 1000));
      }
    }
  });
  for (uint64_t sequence = 1; sequence <= 200000; ++sequence) {
    Tensor sized = zeros({static_cast<int64_t>(sequence % 1000)}, kFloat32);
    collectives::OpPlan plan;
    plan.kind = transport::OpKind::kAllReduce;
    plan.name = "all_reduce";
    plan.dtype = kFloat32;
    plan.sequence = sequence;
    plan.borrow_input(sized);
    ring.scheduled(plan, false);
    ring.finished(sequence, true, true);
  }
  stop.store(true);
  reader.join();
}

// A small synchronous call repeated in a loop extends one entry's run; a dump shows every one of
// its collectives (at most a ring's worth), and a different call ends the run.
TEST(TraceRingTest, RepeatedSmallCollectivesAreRecordedAsRuns) {
  TraceRing ring("g", 0, 2, 8);
  Tensor input = zeros({2}, kInt32);
  for (uint64_t sequence = 1; sequence <= 20; ++sequence) {
    record_inline(ring, *gather_plan(sequence, input), /*new_call=*/sequence == 1);
    complete_inline(ring, sequence, sequence == 1);
  }
  Tensor other = zeros({3}, kInt32);
  record_inline(ring, *gather_plan(21, other), /*new_call=*/true);
  std::vector<TraceRecord> records = sorted_snapshot(ring);
  // Collective 1's entry, the members of its run among the newest 8 collectives (14-20), and
  // collective 21.
  ASSERT_EQ(records.size(), 9u);
  EXPECT_EQ(records[0].sequence, 1u);
  for (size_t i = 1; i <= 7; ++i) {
    EXPECT_EQ(records[i].sequence, 13 + i);
    EXPECT_EQ(records[i].state, TraceState::kCompleted);
    EXPECT_EQ(records[i].input_numel, 2);
    EXPECT_EQ(records[i].splits, (std::vector<int64_t>{2, 4}));
    EXPECT_STREQ(records[i].name, "all_gather_into_tensor_uneven");
  }
  EXPECT_EQ(records[8].sequence, 21u);
  EXPECT_EQ(records[8].input_numel, 3);
  EXPECT_EQ(records[8].state, TraceState::kStarted);

  // The open run: 22 completes, 23 is still running when it starts to sleep (a precise stamp:
  // it gets an entry of its own), 24 fails (an entry of its own, failed).
  complete_inline(ring, 21, true);
  record_inline(ring, *gather_plan(22, other), false);
  complete_inline(ring, 22, false);
  record_inline(ring, *gather_plan(23, other), false);
  EXPECT_FALSE(ring.has(23));
  ring.waiting(23, collectives::trace_clock::precise());
  EXPECT_TRUE(ring.has(23));
  complete_inline(ring, 23, false);
  record_inline(ring, *gather_plan(24, other), false);
  EXPECT_FALSE(ring.has(24));
  ring.scheduled(*gather_plan(24, other), false);  // what the executor does for a failure
  ring.finished(24, false, true);
  records = sorted_snapshot(ring);
  ASSERT_GE(records.size(), 4u);
  const TraceRecord* by_sequence[25] = {};
  for (const TraceRecord& r : records)
    if (r.sequence < 25) by_sequence[r.sequence] = &r;
  for (uint64_t sequence = 21; sequence <= 24; ++sequence) {
    ASSERT_NE(by_sequence[sequence], nullptr) << sequence;
    EXPECT_EQ(by_sequence[sequence]->input_numel, 3) << sequence;
  }
  EXPECT_EQ(by_sequence[22]->state, TraceState::kCompleted);
  EXPECT_EQ(by_sequence[23]->state, TraceState::kCompleted);
  EXPECT_NE(by_sequence[23]->started_at, 0u);
  EXPECT_EQ(by_sequence[23]->splits, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(by_sequence[24]->state, TraceState::kFailed);
}

// A run goes on around collectives recorded on their own (an asynchronous call of the same call),
// which a dump shows from their entries; an asynchronous call that differs starts a run of its
// own, whose members are synchronous.
TEST(TraceRingTest, RunsGoOnAroundEntriesOfTheirOwn) {
  TraceRing ring("g", 0, 2, 16);
  record_run_around_async(ring, zeros({2}, kInt32), 6, 4);
  Tensor other = zeros({3}, kInt32);
  ring.scheduled(*gather_plan(7, other), /*async_op=*/true);
  ring.started(7);
  ring.start_run(7);  // a new call
  ring.finished(7, true, true);
  record_inline(ring, *gather_plan(8, other), false);
  complete_inline(ring, 8, false);
  std::vector<uint64_t> sequences;
  for (const TraceRecord& r : sorted_snapshot(ring)) {
    sequences.push_back(r.sequence);
    EXPECT_EQ(r.state, TraceState::kCompleted) << r.sequence;
    EXPECT_EQ(r.async_op, r.sequence == 4 || r.sequence == 7) << r.sequence;
    EXPECT_EQ(r.input_numel, r.sequence <= 6 ? 2 : 3) << r.sequence;
    EXPECT_EQ(r.started_at != 0, r.sequence == 4 || r.sequence == 7) << r.sequence;
  }
  EXPECT_EQ(sequences, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// Asynchronous calls queued further ahead than the ring holds overwrite the entries of older
// ones, also of one inside a run: the dump shows a ring's worth of the newest collectives, so
// such a call is never mistaken for one of the run's synchronous members.
TEST(TraceRingTest, AsynchronousCallsQueuedBeyondTheRingHideNoOlderCallInARun) {
  TraceRing ring("g", 0, 2, 8);
  Tensor input = zeros({2}, kInt32);
  record_run_around_async(ring, input, 10, 5);
  for (uint64_t sequence = 11; sequence <= 13; ++sequence)  // queued; 13 overwrites 5's entry
    ring.scheduled(*gather_plan(sequence, input), /*async_op=*/true);
  std::vector<uint64_t> sequences;
  for (const TraceRecord& r : sorted_snapshot(ring)) {
    sequences.push_back(r.sequence);
    EXPECT_EQ(r.async_op, r.sequence >= 11) << r.sequence;
    EXPECT_EQ(r.state, r.sequence >= 11 ? TraceState::kScheduled : TraceState::kCompleted)
        << r.sequence;
  }
  // The run's head keeps its entry; its members from 6 on are within the newest 8 collectives.
  EXPECT_EQ(sequences, (std::vector<uint64_t>{1, 6, 7, 8, 9, 10, 11, 12, 13}));
}

// Dumps while runs start and end see each collective with its own call's fields.
TEST(TraceRingTest, ConcurrentDumpsSeeConsistentRuns) {
  TraceRing ring("g", 0, 1, 16);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      for (const TraceRecord& r : ring.snapshot()) {
        ASSERT_EQ(r.input_numel, static_cast<int64_t>(r.sequence / 10 % 1000)) << r.sequence;
      }
    }
  });
  for (uint64_t sequence = 1; sequence <= 200000; ++sequence) {
    Tensor sized = zeros({static_cast<int64_t>(sequence / 10 % 1000)}, kFloat32);
    collectives::OpPlan plan;
    plan.kind = transport::OpKind::kAllReduce;
    plan.name = "all_reduce";
    plan.dtype = kFloat32;
    plan.sequence = sequence;
    plan.borrow_input(sized);
    const bool new_call = sequence == 1 || sequence % 10 == 0;
    record_inline(ring, plan, new_call);
    if (sequence % 97 == 0) ring.waiting(sequence, collectives::trace_clock::precise());
    complete_inline(ring, sequence, new_call);
  }
  stop.store(true);
  reader.join();
}

TEST_F(TraceDirectory, AMismatchWritesEveryRanksRecorder) {
  const std::string job = testing::unique_job_id();
  auto results = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        configure(prefix_);
        npu::set_device(ctx.rank);
        ctx.init();
        Tensor t = ones({8}, kFloat32).npu();
        all_reduce(t);
        Tensor other = ones({ctx.rank == 0 ? 8 : 9}, kFloat32).npu();
        try {
          all_reduce(other);
        } catch (const RemoteError&) {
        }
        // Written before the error reached the caller.
        const std::string text = read_file(file(ctx.rank));
        require(text.find(str("shmccl flight recorder: rank ", ctx.rank, ", pid ", getpid())) !=
                    std::string::npos,
                text);
        require(text.find("collective mismatch") != std::string::npos, text);
        require(text.find("seq=1 op=all_reduce state=completed dtype=float32 reduce=sum in=8") !=
                    std::string::npos,
                text);
        require(text.find(str("seq=2 op=all_reduce state=failed dtype=float32 reduce=sum in=",
                              ctx.rank == 0 ? 8 : 9)) != std::string::npos,
                text);
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(job));
}

TEST_F(TraceDirectory, ATimeoutNamesTheCollectiveThatWaited) {
  const std::string job = testing::unique_job_id();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  auto results = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        configure(prefix_);
        npu::set_device(ctx.rank);
        ctx.init();
        Tensor t = ones({1000}, kFloat32).npu();
        std::vector<int64_t> splits{400, 600};
        Tensor output = zeros({1000}, kFloat32).npu();
        Tensor mine = ones({splits[static_cast<size_t>(ctx.rank)]}, kFloat32).npu();
        all_gather_into_tensor_uneven(output, mine, splits);
        if (ctx.rank == 1) {  // never makes the second call; leaves once rank 0 gave up
          char c;
          [[maybe_unused]] ssize_t n = read(pipe_fds[0], &c, 1);
          return;
        }
        default_group()->set_timeout(std::chrono::milliseconds(200));
        try {
          all_reduce(t, ReduceOp::MAX);
        } catch (const TimeoutError&) {
        }
        [[maybe_unused]] ssize_t n = write(pipe_fds[1], "x", 1);
        const std::string text = read_file(file(0));
        require(text.find("timed out in all_reduce (sequence 2, timeout 200 ms): rank 1 has not "
                          "called it") != std::string::npos,
                text);
        require(text.find("seq=1 op=all_gather_into_tensor_uneven state=completed dtype=float32 "
                          "in=400 out=1000 splits=[400,600] row=1") != std::string::npos,
                text);
        const size_t failed =
            text.find("seq=2 op=all_reduce state=failed dtype=float32 reduce=max");
        require(failed != std::string::npos, text);
        // It slept while it waited: stamped then, so its time is exact (the 200 ms it waited).
        const std::string line = text.substr(failed, text.find('\n', failed) - failed);
        require(line.find(" time=") != std::string::npos && line.find("ms") != std::string::npos,
                line);
      },
      std::chrono::seconds(60), job);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(job));
}

TEST_F(TraceDirectory, Sigusr1DumpsOnDemandIncludingAsyncWork) {
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    configure(prefix_);
    ctx.init();
    Tensor t = ones({4}, kFloat32);
    all_reduce(t);
    barrier();
    all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();
    require(collectives::TraceDumper::signal_handler_installed(), "handler installed");
    raise(SIGUSR1);
    const std::string text = wait_for_text(file(ctx.rank), "seq=3");
    require(text.find(": SIGUSR1; 3 collectives") != std::string::npos, text);
    require(text.find("seq=2 op=barrier state=completed") != std::string::npos, text);
    require(text.find("seq=3 op=all_reduce state=completed async") != std::string::npos, text);
    require(text.find(" start=+") != std::string::npos, text);
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// Through the library: repeated small calls (runs), asynchronous calls of the same and of another
// call between them, and a call that differs; a dump shows every collective once, with its own
// call and whether it was asynchronous.
TEST_F(TraceDirectory, RunsAndAsyncCallsInterleavedShowEveryCollectiveOnce) {
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    configure(prefix_);
    npu::set_device(ctx.rank);
    ctx.init();
    Tensor t = ones({4}, kFloat32).npu();
    // The op of each collective, and whether it is asynchronous.
    std::vector<std::pair<std::string, bool>> calls;
    auto call = [&](const std::string& op, bool async_op) {
      (op == "broadcast" ? broadcast(t, 1, nullptr, async_op)
                         : all_reduce(t, ReduceOp::MAX, nullptr, async_op))
          ->wait();
      calls.emplace_back(op, async_op);
    };
    auto reduce = [&](bool async_op) { call("all_reduce", async_op); };
    auto cast = [&](bool async_op) { call("broadcast", async_op); };
    for (int i = 0; i < 5; ++i)
      reduce(false);
    reduce(true);
    for (int i = 0; i < 3; ++i)
      reduce(false);
    cast(true);
    for (int i = 0; i < 2; ++i)
      cast(false);
    reduce(false);
    const std::string text = collectives::FlightRecorder::instance().format("check");
    for (size_t i = 0; i < calls.size(); ++i) {
      const std::string line = str(" seq=", i + 1, " op=", calls[i].first, " state=completed",
                                   calls[i].second ? " async" : "", " dtype=float32");
      size_t at = text.find(line);
      require(at != std::string::npos, str("no line with \"", line, "\" in\n", text));
      require(text.find(str(" seq=", i + 1, " "), at + 1) == std::string::npos,
              str("collective ", i + 1, " shown twice:\n", text));
    }
    require(text.find(str(" seq=", calls.size() + 1, " ")) == std::string::npos, text);
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// The threads shmccl starts (peer monitor, dump thread, stream workers) block the application's
// signals: a SIGUSR1 or SIGTERM sent to the process is taken by one of its own threads.
TEST_F(TraceDirectory, LibraryThreadsLeaveSignalsToTheApplication) {
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    configure(prefix_);
    npu::set_device(ctx.rank);
    ctx.init();
    Tensor t = ones({4}, kFloat32).npu();
    all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();  // a stream worker too
    const std::string main_task = std::to_string(gettid());
    int library_threads = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      if (task.path().filename() == main_task) continue;
      std::ifstream status(task.path() / "status");
      std::string line;
      uint64_t blocked = 0;
      while (std::getline(status, line)) {
        if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
      }
      for (int signal : {SIGUSR1, SIGTERM, SIGINT}) {
        require((blocked >> (signal - 1) & 1) != 0,
                str("thread ", task.path().filename().string(), " does not block signal ", signal,
                    " (SigBlk ", blocked, ")"));
      }
      ++library_threads;
    }
    require(library_threads >= 3, str("only ", library_threads, " library threads found"));
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

std::atomic<int> g_user_signals{0};

TEST_F(TraceDirectory, AProgramsOwnSigusr1HandlerIsKept) {
  auto results = testing::run_ranks(1, [&](const testing::RankContext& ctx) {
    configure(prefix_);
    signal(SIGUSR1, [](int) { g_user_signals.fetch_add(1); });
    ctx.init();
    Tensor t = ones({4}, kFloat32);
    all_reduce(t);
    require(!collectives::TraceDumper::signal_handler_installed(), "shmccl took SIGUSR1");
    raise(SIGUSR1);
    require(g_user_signals.load() == 1, "the program's handler did not run");
    require(!std::filesystem::exists(file(0)), "dumped on a program's signal");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_F(TraceDirectory, ABufferSizeOfZeroTurnsTheRecorderOff) {
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    configure(prefix_, "0");
    npu::set_device(ctx.rank);
    ctx.init();
    Tensor other = ones({ctx.rank == 0 ? 8 : 9}, kFloat32);
    bool mismatched = false;  // the failure that would have made an enabled recorder write
    try {
      all_reduce(other);
    } catch (const RemoteError& error) {
      mismatched = std::string(error.what()).find("mismatch") != std::string::npos;
    }
    require(mismatched, "the mismatched all_reduce did not fail with a mismatch");
    require(!std::filesystem::exists(file(ctx.rank)), "a disabled recorder wrote a file");
    require(!collectives::TraceDumper::signal_handler_installed(), "handler installed");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

}  // namespace
}  // namespace shmccl
