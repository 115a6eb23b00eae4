// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace shmccl::launcher {
namespace {

using namespace std::chrono_literals;

TEST(EventLoop, PollFiresWhenTheFdBecomesReadable) {
  EventLoop loop;
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

TEST(EventLoop, TimeoutsFireInOrderAndCancelledOnesNever) {
  EventLoop loop;
  std::vector<int> fired;
  loop.add_timeout(20ms, [&](int res) {
    EXPECT_EQ(res, -ETIME);
    fired.push_back(2);
  });
  const EventLoop::OpId cancelled = loop.add_timeout(1ms, [&](int) { fired.push_back(99); });
  loop.add_timeout(5ms, [&](int) { fired.push_back(1); });
  loop.cancel(cancelled);
  const auto start = std::chrono::steady_clock::now();
  while (fired.size() < 2 && std::chrono::steady_clock::now() - start < 5s)
    loop.run_once();
  EXPECT_EQ(fired, (std::vector<int>{1, 2}));
}

TEST(EventLoop, HandlersMayAddOperations) {
  EventLoop loop;
  int count = 0;
  std::function<void(int)> again = [&](int) {
    if (++count < 3) loop.add_timeout(1ms, again);
  };
  loop.add_timeout(1ms, again);
  for (int i = 0; i < 3; ++i)
    loop.run_once();
  EXPECT_EQ(count, 3);
}

}  // namespace
}  // namespace shmccl::launcher
