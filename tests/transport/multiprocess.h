// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Helpers for the transport tests that run real forked processes:
//  - run_processes(n, body): forks n children that run body(rank) and start together; returns ""
//    when all exit cleanly, else a readable report (rank, exit status or signal, exception text)
//    so that EXPECT_EQ(run_processes(...), "") prints what went wrong.
//  - CHILD_CHECK(condition, message...): an assertion for code running in a child (gtest's
//    EXPECT/ASSERT do not reach the parent); throws, which the harness reports.
//  - NamespaceTest: a fixture with a fresh shm namespace per test that fails the test if any
//    /dev/shm/shmccl.<ns>.* entry is left at the end (and removes it).
//  - wait_until_sleeping(pid) (process_state.h): waits (bounded) until a process is blocked in
//    the kernel.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/process_state.h"

#include "core/check.h"
#include "transport/segment_names.h"

namespace shmccl::transport::testing {

#define CHILD_CHECK(condition, ...)                                                       \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      throw std::runtime_error(::shmccl::detail::concat(__FILE__, ":", __LINE__, ": ",    \
                                                        "check failed: " #condition       \
                                                        " " __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                     \
  } while (0)

// Forks one process and runs `body` in it; the child never returns (it _exits: no gtest or
// static destructors run twice). Exit status 0 on success, 1 with the message on `report_fd`.
inline pid_t fork_child(const std::function<void()>& body, int report_fd = -1) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int status = 0;
  std::string message;
  try {
    body();
  } catch (const std::exception& error) {
    message = error.what();
    status = 1;
  } catch (...) {
    message = "unknown exception";
    status = 1;
  }
  if (status != 0 && report_fd >= 0) {
    message.resize(std::min<size_t>(message.size(), 4000));  // below PIPE_BUF * n: never blocks
    [[maybe_unused]] ssize_t written = ::write(report_fd, message.data(), message.size());
  }
  ::_exit(status);
}

inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + ::strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Waits for `pid` to exit within `timeout`; SIGKILLs it otherwise. Returns its wait status, or -1
// after a timeout.
inline int wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd entry{pidfd, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&entry, 1, static_cast<int>(timeout.count()));
    } while (ready == -1 && errno == EINTR);
    ::close(pidfd);
    if (ready == 0) {
      ::kill(pid, SIGKILL);
      int status;
      ::waitpid(pid, &status, 0);
      return -1;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) == -1 && errno == EINTR) {
  }
  return status;
}

// Runs body(rank) for rank in [0, count) in forked processes started together. All must finish
// within `timeout` (the stragglers are killed).
inline std::string run_processes(int count, const std::function<void(int rank)>& body,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  int start[2];
  if (::pipe2(start, O_CLOEXEC) != 0) return "pipe2 failed";
  struct Child {
    pid_t pid;
    int report_fd;
  };
  std::vector<Child> children;
  for (int rank = 0; rank < count; ++rank) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return "pipe2 failed";
    const pid_t pid = fork_child(
        [&] {
          ::close(start[1]);
          char byte;
          while (::read(start[0], &byte, 1) == -1 && errno == EINTR) {  // EOF: the start signal
          }
          body(rank);
        },
        report[1]);
    ::close(report[1]);
    children.push_back({pid, report[0]});
  }
  ::close(start[0]);
  ::close(start[1]);  // every child's read returns: they start together

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::ostringstream failures;
  for (int rank = 0; rank < count; ++rank) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int status =
        wait_for_exit(children[rank].pid, std::max(left, std::chrono::milliseconds(1)));
    char buffer[4096];
    const ssize_t got = ::read(children[rank].report_fd, buffer, sizeof(buffer));
    ::close(children[rank].report_fd);
    if (status == -1) {
      failures << "rank " << rank << " (pid " << children[rank].pid << ") timed out after "
               << timeout.count() << " ms; ";
    } else if (status != 0) {
      failures << "rank " << rank << " (pid " << children[rank].pid << ") failed with "
               << describe_status(status);
      if (got > 0) failures << ": " << std::string(buffer, static_cast<size_t>(got));
      failures << "; ";
    }
  }
  return failures.str();
}

// A fresh namespace per test; fails the test when segments of it are left behind.
class NamespaceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    const std::vector<std::string> left = list_namespace_segments(ns_);
    EXPECT_TRUE(left.empty()) << "segments left in /dev/shm: " << ::testing::PrintToString(left);
    remove_namespace_segments(ns_);
  }

  const std::string ns_ = "test" + random_token();
};

}  // namespace shmccl::transport::testing
