// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "syscall_filter.h"

namespace shmccl::launcher {
namespace {

using namespace std::chrono_literals;

// Every test runs on both backends: io_uring (kAuto here, where the kernel gives us a ring) and
// ppoll (where it is refused).
class EventLoopTest : public ::testing::TestWithParam<EventLoop::Backend> {};

TEST_P(EventLoopTest, PollFiresWhenTheFdBecomesReadable) {
  EventLoop loop(GetParam());
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  int result = 0;
  loop.add_poll(fds[0], POLLIN, [&](int res) { result = res; });
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  loop.run_once();
  EXPECT_TRUE(result & POLLIN);
  close(fds[0]);
  close(fds[1]);
}

TEST_P(EventLoopTest, TimeoutsFireInOrderAndCancelledOnesNever) {
  EventLoop loop(GetParam());
  std::vector<int> fired;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration last_fired{};
  loop.add_timeout(20ms, [&](int res) {
    EXPECT_EQ(res, -ETIME);
    fired.push_back(2);
    last_fired = std::chrono::steady_clock::now() - start;
  });
  const EventLoop::OpId cancelled = loop.add_timeout(1ms, [&](int) { fired.push_back(99); });
  loop.add_timeout(5ms, [&](int) { fired.push_back(1); });
  loop.cancel(cancelled);
  while (fired.size() < 2 && std::chrono::steady_clock::now() - start < 5s)
    loop.run_once();
  EXPECT_EQ(fired, (std::vector<int>{1, 2}));
  // The 20 ms timer took 20 ms: not sooner, and not a unit off (20 s, or 20 us).
  EXPECT_GE(last_fired, 20ms);
  EXPECT_LT(last_fired, 1s);
}

TEST_P(EventLoopTest, HandlersMayAddOperations) {
  EventLoop loop(GetParam());
  int count = 0;
  std::function<void(int)> again = [&](int) {
    if (++count < 3) loop.add_timeout(1ms, again);
  };
  loop.add_timeout(1ms, again);
  for (int i = 0; i < 3; ++i)
    loop.run_once();
  EXPECT_EQ(count, 3);
}

TEST_P(EventLoopTest, CancelledPollsNeverFireAndOthersStillDo) {
  EventLoop loop(GetParam());
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  std::vector<int> fired;
  const EventLoop::OpId cancelled = loop.add_poll(fds[0], POLLIN, [&](int) { fired.push_back(1); });
  loop.add_poll(fds[0], POLLIN, [&](int res) { fired.push_back(res & POLLIN ? 2 : -2); });
  loop.cancel(cancelled);
  loop.add_timeout(1ms, [&](int res) { fired.push_back(res == -ETIME ? 3 : -3); });
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  const auto start = std::chrono::steady_clock::now();
  while (fired.size() < 2 && std::chrono::steady_clock::now() - start < 5s)
    loop.run_once();
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, (std::vector<int>{2, 3}));
  close(fds[0]);
  close(fds[1]);
}

// A hang-up (the write end of a rank's pipe closed as it exits) completes a poll too.
TEST_P(EventLoopTest, HangupCompletesAPoll) {
  EventLoop loop(GetParam());
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  int result = 0;
  loop.add_poll(fds[0], POLLIN, [&](int res) { result = res; });
  close(fds[1]);
  loop.run_once();
  EXPECT_TRUE(result & POLLHUP) << result;
  close(fds[0]);
}

INSTANTIATE_TEST_SUITE_P(Backends, EventLoopTest,
                         ::testing::Values(EventLoop::Backend::kAuto, EventLoop::Backend::kPoll),
                         [](const ::testing::TestParamInfo<EventLoop::Backend>& info) {
                           return std::string(info.param == EventLoop::Backend::kAuto ? "Auto"
                                                                                      : "Poll");
                         });

// ppoll sees every fd that is ready at one wake-up at once: their handlers run in the order the
// polls were queued (two ranks' exits seen together: the lower rank first, whose failure is then
// the root cause), not in a hash table's order. Made ready last to first.
TEST(EventLoop, PpollRunsTheReadyPollsOfOneWakeUpInTheOrderTheyWereQueued) {
  EventLoop loop(EventLoop::Backend::kPoll);
  constexpr int kPipes = 8;
  int fds[kPipes][2];
  std::vector<int> fired;
  for (int i = 0; i < kPipes; ++i) {
    ASSERT_EQ(pipe2(fds[i], O_CLOEXEC), 0);
    loop.add_poll(fds[i][0], POLLIN, [&fired, i](int) { fired.push_back(i); });
  }
  for (int i = kPipes - 1; i >= 0; --i)
    ASSERT_EQ(write(fds[i][1], "x", 1), 1);
  loop.run_once();
  EXPECT_EQ(fired, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (auto& pipe : fds) {
    close(pipe[0]);
    close(pipe[1]);
  }
}

TEST(EventLoop, UsesIoUringWhereTheKernelGivesARing) {
  io_uring ring;
  const bool available = io_uring_queue_init(8, &ring, 0) == 0;
  if (available) io_uring_queue_exit(&ring);
  EXPECT_EQ(EventLoop().uses_io_uring(), available);
  EXPECT_FALSE(EventLoop(EventLoop::Backend::kPoll).uses_io_uring());
}

// Where io_uring_setup is refused (Docker's seccomp profile, the io_uring_disabled sysctl), the
// loop takes ppoll and works the same (in a child: the filter cannot be undone).
TEST(EventLoop, FallsBackToPpollWhereIoUringIsRefused) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    shmccl::testing::refuse_syscalls({SYS_io_uring_setup}, EPERM);
    EventLoop loop;
    int fds[2];
    int result = 0;
    if (loop.uses_io_uring() || pipe2(fds, O_CLOEXEC) != 0) _exit(2);
    loop.add_poll(fds[0], POLLIN, [&](int res) { result = res; });
    if (write(fds[1], "x", 1) != 1) _exit(3);
    loop.run_once();
    _exit(result & POLLIN ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace shmccl::launcher
