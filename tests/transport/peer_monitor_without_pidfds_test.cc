// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// PeerMonitor where pidfds are refused (kernels before 5.3, valgrind, seccomp filters): it reads
// /proc instead, with the same answers. Each test runs in a forked child that refuses pidfd_open
// and pidfd_getfd (tests/syscall_filter.h); this binary's own process starts no thread before it
// forks (a child of a multi-threaded fork may not start threads under the sanitizers).
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/peer_process.h"
#include "syscall_filter.h"
#include "transport/multiprocess.h"
#include "transport/peer_monitor.h"
#include "transport/process_state.h"

namespace shmccl::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs `body` in a child whose pidfd calls fail with `error`; "" when it passed.
std::string without_pidfds(int error, const std::function<void()>& body) {
  return testing::run_processes(1, [&](int) {
    shmccl::testing::refuse_syscalls({SYS_pidfd_open, SYS_pidfd_getfd}, error);
    CHILD_CHECK(!detail::open_pidfd(::getpid()) && errno == error, "the filter is not in force");
    body();
  });
}

pid_t sleeping_child() {
  return testing::fork_child([] {
    for (;;)
      ::pause();
  });
}

// Waits (bounded) until `flag` is set by a callback.
bool wait_for(const std::atomic<int>& flag, int value, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (flag.load() < value) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class PeerMonitorWithoutPidfds : public ::testing::TestWithParam<int> {};

TEST_P(PeerMonitorWithoutPidfds, NoticesAKilledProcess) {
  EXPECT_EQ(without_pidfds(
                GetParam(),
                [] {
                  const pid_t child = sleeping_child();
                  CHILD_CHECK(PeerMonitor::is_alive(child), "a sleeping child is alive");
                  std::atomic<int> deaths{0};
                  std::atomic<pid_t> reported{0};
                  PeerMonitor::instance().watch(child, [&](pid_t pid) {
                    reported = pid;
                    ++deaths;
                  });
                  const auto killed = Clock::now();
                  ::kill(child, SIGKILL);
                  CHILD_CHECK(wait_for(deaths, 1, 2s), "no callback within 2 s of SIGKILL");
                  const double ms =
                      std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
                  CHILD_CHECK(reported.load() == child, "the callback names the process");
                  // Polled every 10 ms: well within a second even on a loaded machine.
                  CHILD_CHECK(ms < 1000, "noticed after ", ms, " ms");
                  // The child is a zombie (not reaped): dead, as a pidfd would say.
                  CHILD_CHECK(!PeerMonitor::is_alive(child), "a zombie counts as dead");
                  CHILD_CHECK(PeerMonitor::wait_for_exit(child, 10ms), "wait_for_exit of a zombie");
                  ::waitpid(child, nullptr, 0);
                  CHILD_CHECK(!PeerMonitor::is_alive(child), "a reaped child is dead");
                  CHILD_CHECK(deaths.load() == 1, "the callback ran once");
                  CHILD_CHECK(PeerMonitor::instance().num_watches() == 0, "the watch is removed");
                }),
            "");
}

TEST_P(PeerMonitorWithoutPidfds, AlreadyDeadProcessesFirePromptly) {
  EXPECT_EQ(without_pidfds(GetParam(),
                           [] {
                             const pid_t reaped = testing::fork_child([] {});
                             CHILD_CHECK(testing::wait_for_exit(reaped, 5s) == 0,
                                         "the child exited");
                             std::atomic<int> deaths{0};
                             PeerMonitor::instance().watch(reaped, [&](pid_t) { ++deaths; });
                             CHILD_CHECK(wait_for(deaths, 1, 2s), "no callback for a dead process");
                             CHILD_CHECK(PeerMonitor::wait_for_exit(reaped, 10ms),
                                         "wait_for_exit of a dead one");
                           }),
            "");
}

TEST_P(PeerMonitorWithoutPidfds, UnwatchedProcessesAreNoLongerRead) {
  EXPECT_EQ(without_pidfds(
                GetParam(),
                [] {
                  const pid_t child = sleeping_child();
                  std::atomic<int> deaths{0};
                  const auto id = PeerMonitor::instance().watch(child, [&](pid_t) { ++deaths; });
                  CHILD_CHECK(PeerMonitor::instance().num_watches() == 1, "one watch");
                  PeerMonitor::instance().unwatch(id);
                  CHILD_CHECK(PeerMonitor::instance().num_watches() == 0, "unwatched");
                  CHILD_CHECK(!PeerMonitor::wait_for_exit(child, 20ms),
                              "a live child did not exit");
                  // A second watch after the unwatch still fires (the polling resumes).
                  PeerMonitor::instance().watch(child, [&](pid_t) { deaths += 10; });
                  ::kill(child, SIGKILL);
                  CHILD_CHECK(wait_for(deaths, 10, 2s), "no callback for the second watch");
                  CHILD_CHECK(deaths.load() == 10, "the unwatched callback never ran");
                  ::waitpid(child, nullptr, 0);
                }),
            "");
}

// The other side of PeerMonitor.TheThreadSleepsUntilADeathWhenPidfdsWork: here the thread
// polls, so the measure that test relies on does see a polling thread wake.
TEST_P(PeerMonitorWithoutPidfds, TheThreadPollsEveryTenMilliseconds) {
  EXPECT_EQ(without_pidfds(GetParam(),
                           [] {
                             const pid_t child = sleeping_child();
                             std::atomic<int> deaths{0};
                             PeerMonitor::instance().watch(child, [&](pid_t) { ++deaths; });
                             pid_t thread = -1;
                             const auto deadline = Clock::now() + 5s;
                             while (thread < 0 && Clock::now() < deadline)
                               thread = testing::find_thread("shmccl-peermon");
                             CHILD_CHECK(thread > 0, "the monitor thread did not start");
                             const long before = testing::voluntary_switches(thread);
                             std::this_thread::sleep_for(300ms);  // the span measured
                             const long after = testing::voluntary_switches(thread);
                             CHILD_CHECK(after - before >= 10, "the polling thread woke only ",
                                         after - before, " times in 300 ms");
                             ::kill(child, SIGKILL);
                             CHILD_CHECK(wait_for(deaths, 1, 2s), "no callback");
                             ::waitpid(child, nullptr, 0);
                           }),
            "");
}

// ENOSYS: kernels before 5.3 and valgrind; EPERM: a seccomp filter (Docker's answer to calls it
// does not list).
INSTANTIATE_TEST_SUITE_P(Refusals, PeerMonitorWithoutPidfds, ::testing::Values(ENOSYS, EPERM),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == ENOSYS ? std::string("ENOSYS")
                                                       : std::string("EPERM");
                         });

}  // namespace
}  // namespace shmccl::transport
