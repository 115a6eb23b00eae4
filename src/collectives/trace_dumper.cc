// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/trace_dumper.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/flight_recorder.h"
#include "core/config.h"
#include "core/logging.h"
#include "core/signal_mask.h"

namespace shmccl::collectives {
namespace {

// What the signal handler touches: both lock-free, hence async-signal-safe.
std::atomic<int> g_event_fd{-1};
std::atomic<bool> g_signal_pending{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);
std::atomic<bool> g_handler_installed{false};

// Everything else, per process; replaced (leaked) in the child of a fork, whose copy of the mutex
// may be held by a thread that does not exist there.
struct State {
  std::mutex mutex;
  bool started = false;
  std::vector<std::string> pending;  // failure reasons not dumped yet
};
std::atomic<State*> g_state{nullptr};
std::once_flag g_atfork_once;

State& state() {
  State* current = g_state.load(std::memory_order_acquire);
  if (current != nullptr) return *current;
  auto* fresh = new State();
  if (g_state.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *current;
}

void on_sigusr1(int) {
  const int saved_errno = errno;
  g_signal_pending.store(true, std::memory_order_relaxed);
  const int fd = g_event_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
  }
  errno = saved_errno;
}

void after_fork_in_child() {
  // The thread did not survive the fork; the eventfd is shared with the parent, so writing to it
  // would make the parent dump: drop it. A new group in the child starts everything afresh.
  const int fd = g_event_fd.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
  g_signal_pending.store(false, std::memory_order_relaxed);
  g_state.store(nullptr, std::memory_order_release);
}

void install_handler() {
  if (!config::get_bool("SHMCCL_TRACE_SIGNAL")) return;
  struct sigaction current {};
  if (sigaction(SIGUSR1, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == on_sigusr1) return;  // forked
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) {
    SHMCCL_INFO(kColl, "SIGUSR1 has a handler already: the flight recorder dumps on failures only");
    return;
  }
  struct sigaction action {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &action, nullptr) == 0) {
    g_handler_installed.store(true, std::memory_order_relaxed);
  }
}

void run(int fd) {
  pthread_setname_np(pthread_self(), "shmccl-trace");
  while (true) {
    uint64_t count = 0;
    const ssize_t n = ::read(fd, &count, sizeof(count));
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof(count)) {
      SHMCCL_WARN(kColl, "flight recorder thread stops: read of its eventfd failed: ",
                  std::strerror(errno));
      return;
    }
    std::vector<std::string> reasons;
    {
      State& current = state();
      std::lock_guard<std::mutex> lock(current.mutex);
      reasons.swap(current.pending);
    }
    if (g_signal_pending.exchange(false, std::memory_order_relaxed)) {
      FlightRecorder::instance().dump("SIGUSR1", DumpTrigger::kSignal);
    }
    if (!reasons.empty()) {
      std::string joined;
      for (const std::string& reason : reasons)
        joined += (joined.empty() ? "" : "; ") + reason;
      FlightRecorder::instance().dump(joined, DumpTrigger::kFailure);
    }
  }
}

}  // namespace

void TraceDumper::ensure_started() {
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, after_fork_in_child); });
  State& current = state();
  std::lock_guard<std::mutex> lock(current.mutex);
  if (current.started) return;
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    SHMCCL_WARN(kColl, "no flight recorder thread: eventfd failed: ", std::strerror(errno));
    return;
  }
  try {
    const detail::ScopedSignalBlock no_signals;  // SIGUSR1 goes to the application's threads
    std::thread(run, fd).detach();               // blocked in read(2) when idle; exit() ends it
  } catch (const std::exception& error) {
    ::close(fd);
    SHMCCL_WARN(kColl, "no flight recorder thread: ", error.what());
    return;
  }
  current.started = true;
  g_event_fd.store(fd, std::memory_order_release);
  install_handler();
}

void TraceDumper::request(const std::string& reason) {
  {
    State& current = state();
    std::lock_guard<std::mutex> lock(current.mutex);
    current.pending.push_back(reason);
  }
  const int fd = g_event_fd.load(std::memory_order_acquire);
  if (fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
  }
}

bool TraceDumper::signal_handler_installed() {
  return g_handler_installed.load(std::memory_order_relaxed);
}

}  // namespace shmccl::collectives
