// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// futex_wait / futex_wake on words in shared memory: timeouts, value changes, signals, and wakes
// that cross process boundaries (and mapping addresses).
#include "transport/futex.h"

#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include <gtest/gtest.h>

#include "transport/multiprocess.h"
#include "transport/segment_names.h"
#include "transport/shm_segment.h"

namespace shmccl::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::NamespaceTest;

class FutexTest : public NamespaceTest {
 protected:
  // Two futex words in a fresh shared segment, inherited by forked children.
  void SetUp() override {
    segment_.emplace(ShmSegment::create(segment_name(ns_, "futex"), 4096));
    words_ = static_cast<std::atomic<uint32_t>*>(segment_->data());
  }
  void TearDown() override {
    segment_.reset();
    NamespaceTest::TearDown();
  }

  std::optional<ShmSegment> segment_;
  std::atomic<uint32_t>* words_ = nullptr;
};

TEST_F(FutexTest, TimesOutWhenNobodyWakes) {
  const auto start = Clock::now();
  EXPECT_EQ(futex_wait(&words_[0], 0, 20ms), FutexResult::kTimedOut);
  EXPECT_GE(Clock::now() - start, 20ms);

  const auto deadline = Clock::now() + 20ms;
  EXPECT_EQ(futex_wait_until(&words_[0], 0, deadline), FutexResult::kTimedOut);
  EXPECT_GE(Clock::now(), deadline);
}

TEST_F(FutexTest, DeadlineInThePastReturnsAtOnce) {
  EXPECT_EQ(futex_wait_until(&words_[0], 0, Clock::now() - 1s), FutexResult::kTimedOut);
  EXPECT_EQ(futex_wait_until(&words_[0], 0, Clock::time_point::min()), FutexResult::kTimedOut);
  EXPECT_EQ(futex_wait(&words_[0], 0, 0ns), FutexResult::kTimedOut);
}

TEST_F(FutexTest, ReturnsValueChangedWhenTheWordDiffers) {
  words_[0].store(7);
  EXPECT_EQ(futex_wait(&words_[0], 6, -1ns), FutexResult::kValueChanged);
  EXPECT_EQ(futex_wait_until(&words_[0], 6, Clock::now() + 1h), FutexResult::kValueChanged);
}

TEST_F(FutexTest, WakeWithoutWaitersWakesNobody) {
  EXPECT_EQ(futex_wake(&words_[0]), 0);
}

// The same page mapped twice in one process: a wake through one address reaches a waiter on the
// other, which only works for shared (not FUTEX_PRIVATE_FLAG) futexes.
TEST_F(FutexTest, WakeThroughAnotherMappingOfTheSamePage) {
  ShmSegment second = ShmSegment::open(segment_->name(), 4096);
  auto* other = static_cast<std::atomic<uint32_t>*>(second.data());
  ASSERT_NE(static_cast<void*>(other), static_cast<void*>(words_));
  // Bounded waits: with private futexes the wakes below would never reach it, and the test must
  // fail on `woken`, not hang in join().
  std::thread waiter([&] {
    while (words_[0].load(std::memory_order_acquire) == 0)
      futex_wait(&words_[0], 0, 100ms);
  });
  int woken = 0;
  for (int spins = 0; woken == 0 && spins < 1'000'000; ++spins) {
    // Until the waiter sleeps, a wake finds nobody: keep the word at 0 and retry.
    woken = futex_wake(&other[0]);
    if (woken == 0) std::this_thread::yield();
  }
  other[0].store(1, std::memory_order_release);
  futex_wake(&other[0]);
  waiter.join();
  EXPECT_EQ(woken, 1);
}

TEST_F(FutexTest, CrossProcessWakeReachesASleepingWaiter) {
  std::atomic<uint32_t>* word = &words_[0];
  const pid_t child = testing::fork_child([&] {
    // Forever: the parent's wake must end it (the test's process timeout guards a hang).
    while (word->load(std::memory_order_acquire) == 0) {
      CHILD_CHECK(futex_wait(word, 0, -1ns) != FutexResult::kInterrupted);
    }
    CHILD_CHECK(word->load() == 42);
  });
  ASSERT_TRUE(testing::wait_until_sleeping(child, "futex")) << "the child never slept";
  word->store(42, std::memory_order_release);
  EXPECT_EQ(futex_wake(word), 1) << "the wake did not find the other process's waiter";
  EXPECT_EQ(testing::wait_for_exit(child, 5s), 0);
}

TEST_F(FutexTest, CrossProcessPingPong) {
  constexpr uint32_t kRounds = 2000;
  std::atomic<uint32_t>* ping = &words_[0];
  std::atomic<uint32_t>* pong = &words_[16];  // another cache line
  const std::string failures = testing::run_processes(2, [&](int rank) {
    std::atomic<uint32_t>* mine = rank == 0 ? pong : ping;
    std::atomic<uint32_t>* theirs = rank == 0 ? ping : pong;
    for (uint32_t round = 1; round <= kRounds; ++round) {
      if (rank == 0) {
        theirs->store(round, std::memory_order_release);
        futex_wake(theirs);
      }
      // Wait for the peer's value of this round.
      for (uint32_t seen; (seen = mine->load(std::memory_order_acquire)) != round;) {
        CHILD_CHECK(seen < round, "round ", round, " saw ", seen);
        futex_wait(mine, seen, 5s);
      }
      if (rank == 1) {
        theirs->store(round, std::memory_order_release);
        futex_wake(theirs);
      }
    }
  });
  EXPECT_EQ(failures, "");
  EXPECT_EQ(ping->load(), kRounds);
  EXPECT_EQ(pong->load(), kRounds);
}

void ignore_signal(int) {}

TEST_F(FutexTest, SignalInterruptsAWait) {
  std::atomic<uint32_t>* word = &words_[0];
  const pid_t child = testing::fork_child([&] {
    struct sigaction action {};
    action.sa_handler = &ignore_signal;  // no SA_RESTART: the wait must report the signal
    sigemptyset(&action.sa_mask);
    CHILD_CHECK(::sigaction(SIGUSR1, &action, nullptr) == 0);
    words_[1].store(1, std::memory_order_release);  // the handler is installed
    const FutexResult result = futex_wait(word, 0, 10s);
    CHILD_CHECK(result == FutexResult::kInterrupted, "result ", static_cast<int>(result));
  });
  ASSERT_TRUE(testing::wait_until_sleeping(child, "futex"));
  ASSERT_EQ(words_[1].load(std::memory_order_acquire), 1u);  // the child sleeps after setting it
  ::kill(child, SIGUSR1);
  EXPECT_EQ(testing::wait_for_exit(child, 5s), 0);
}

TEST_F(FutexTest, WakeCountIsRespected) {
  std::atomic<uint32_t>* word = &words_[0];
  std::atomic<uint32_t>* woken = &words_[16];
  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    children.push_back(testing::fork_child([&] {
      while (word->load(std::memory_order_acquire) == 0)
        futex_wait(word, 0, 10s);
      woken->fetch_add(1);
    }));
  }
  for (pid_t child : children)
    ASSERT_TRUE(testing::wait_until_sleeping(child, "futex"));
  word->store(1, std::memory_order_release);
  EXPECT_EQ(futex_wake(word, 1), 1);
  EXPECT_EQ(futex_wake(word, 5), 2);
  for (pid_t child : children)
    EXPECT_EQ(testing::wait_for_exit(child, 5s), 0);
  EXPECT_EQ(woken->load(), 3u);
}

}  // namespace
}  // namespace shmccl::transport
