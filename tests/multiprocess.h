// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Test harness for real multi-process runs: forks `world` ranks, runs a body in each, and maps a
// rank's failure (exception, non-zero exit, signal, hang) to a readable test failure. Bodies use
// require() instead of gtest assertions (a forked child's gtest state is not the parent's).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/directory.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::testing {

struct RankContext {
  int rank;
  int world;
  std::string job_id;
  // init_process_group for this rank (timeout in ms).
  void init(int64_t timeout_ms = 30000) const {
    InitOptions options;
    options.rank = rank;
    options.world_size = world;
    options.job_id = job_id;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    init_process_group(options);
  }
};

struct RankResult {
  int rank = -1;
  int exit_code = -1;
  int signal = 0;
  std::string message;
  std::chrono::steady_clock::time_point exited;  // when the harness saw the rank end
};

class RequirementFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void require(bool condition, const std::string& what) {
  if (!condition) throw RequirementFailed(what);
}

// A pipe made before the ranks fork, to order steps across ranks without sleeping: post(n)
// writes n tokens, wait(n) reads n, false if they do not all come within 20 s.
class TokenPipe {
 public:
  TokenPipe() { require(pipe(fds_) == 0, "pipe"); }
  ~TokenPipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  TokenPipe(const TokenPipe&) = delete;
  TokenPipe& operator=(const TokenPipe&) = delete;
  void post(int count = 1) const {
    for (int i = 0; i < count; ++i)
      require(write(fds_[1], "x", 1) == 1, "pipe write");
  }
  bool wait(int count = 1) const {
    for (int i = 0; i < count; ++i) {
      pollfd ready{fds_[0], POLLIN, 0};
      char token = 0;
      if (poll(&ready, 1, 20000) != 1 || read(fds_[0], &token, 1) != 1) return false;
    }
    return true;
  }

 private:
  int fds_[2];
};

// Waits up to `bound` for forked `child` and returns its exit code; -1 if a signal ended it or it
// did not end in time (it is killed then): a child that hangs fails the test in seconds.
inline int exit_code_within(pid_t child, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    poll(nullptr, 0, 1);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Pins the calling process to the first CPU it may run on, so that every group of two or more
// ranks doing the same is oversubscribed (more ranks than cores) whatever the machine.
inline void run_on_one_cpu() {
  cpu_set_t allowed;
  require(sched_getaffinity(0, sizeof(allowed), &allowed) == 0, "sched_getaffinity");
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed))
    ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  require(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
}

// Seconds from `start` to now (how fast a failure was noticed).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline std::string unique_job_id() {
  static std::atomic<int> counter{0};
  std::random_device device;
  return str("test-", getpid(), "-", counter.fetch_add(1), "-", device() % 100000);
}

// /dev/shm entries whose name contains `fragment`.
inline std::vector<std::string> shm_entries(const std::string& fragment) {
  std::vector<std::string> found;
  shmccl::detail::Directory("/dev/shm").for_each([&](const char* name) {
    if (std::strstr(name, fragment.c_str()) != nullptr) found.emplace_back(name);
    return true;
  });
  return found;
}

// An int in memory the test process maps before it forks its ranks: what a rank stores there,
// the other ranks and the test process see.
class SharedInt {
 public:
  SharedInt() {
    void* memory = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap");
    value_ = new (memory) std::atomic<int>(0);
  }
  ~SharedInt() { munmap(value_, sizeof(std::atomic<int>)); }
  SharedInt(const SharedInt&) = delete;
  SharedInt& operator=(const SharedInt&) = delete;
  std::atomic<int>& operator*() const { return *value_; }

 private:
  static_assert(std::atomic<int>::is_always_lock_free);
  std::atomic<int>* value_;
};

// A count in shared memory. Survivors of an injected death call arrive_and_wait() once they have
// their error and leave only when all of them have it: a survivor that exits early would
// otherwise be the death a slower survivor notices first (test sequencing; bounded).
class SurvivorBarrier {
 public:
  void arrive_and_wait(int survivors) {
    (*arrived_).fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while ((*arrived_).load() < survivors && std::chrono::steady_clock::now() < deadline)
      usleep(1000);
  }

 private:
  SharedInt arrived_;
};

// In a survivor of a job whose rank `victim` dies: `call` must fail with a RemoteError naming the
// victim within `bound_seconds`. Waits for the other survivors before it returns.
// Whether an error text names rank `victim`'s death: "rank 1 (pid 4121) died".
inline bool names_death(const std::string& text, int victim) {
  const std::string who = str("rank ", victim, " (pid ");
  for (size_t at = text.find(who); at != std::string::npos; at = text.find(who, at + 1)) {
    const size_t close = text.find(')', at);
    if (close != std::string::npos && text.compare(close, 6, ") died") == 0) return true;
  }
  return false;
}

inline void require_death_noticed(const RankContext& ctx, SurvivorBarrier& survivors, int victim,
                                  double bound_seconds, const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  try {
    call();
  } catch (const RemoteError& error) {
    const double seconds = seconds_since(start);
    survivors.arrive_and_wait(ctx.world - 1);
    require(names_death(error.what(), victim), error.what());
    require(seconds < bound_seconds, str("noticed after ", seconds, " s"));
    return;
  }
  throw RequirementFailed("no error after a peer died");
}

struct RunOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(60);  // then every rank is a hang
  std::string job_id = unique_job_id();
  // Ranks that are expected to hang (an injected stall): SIGKILLed, without counting as a hang,
  // once every other rank has ended.
  std::vector<int> reap_when_others_end;
};

inline std::vector<RankResult> run_ranks(int world,
                                         const std::function<void(const RankContext&)>& body,
                                         const RunOptions& options);

// Runs body(ctx) in `world` forked processes. A rank exits 0 when the body returns; 1 with the
// exception's text otherwise. Ranks still running after `timeout` are killed (a hang).
inline std::vector<RankResult> run_ranks(
    int world, const std::function<void(const RankContext&)>& body,
    std::chrono::milliseconds timeout = std::chrono::seconds(60),
    std::string job_id = unique_job_id()) {
  RunOptions options;
  options.timeout = timeout;
  options.job_id = std::move(job_id);
  return run_ranks(world, body, options);
}

inline std::vector<RankResult> run_ranks(int world,
                                         const std::function<void(const RankContext&)>& body,
                                         const RunOptions& options) {
  const std::chrono::milliseconds timeout = options.timeout;
  const std::string& job_id = options.job_id;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  // Output the test printed before is not the ranks' to print again as they exit.
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string message;
      int code = 0;
      try {
        RankContext context{rank, world, job_id};
        body(context);
        if (is_initialized()) destroy_process_group();
      } catch (const std::exception& error) {
        message = error.what();
        code = 1;
      }
      if (!message.empty()) {
        [[maybe_unused]] ssize_t written = write(fds[1], message.data(), message.size());
      }
      close(fds[1]);
      _exit(code);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<RankResult> results(static_cast<size_t>(world));
  // Wait for every child through pidfds (readable when the child exits), up to the deadline.
  std::vector<pollfd> watches;
  for (pid_t pid : pids) {
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    watches.push_back(pollfd{pidfd, POLLIN, 0});
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int remaining = world;
  auto expected_hang = [&](int rank) {
    const auto& hangs = options.reap_when_others_end;
    return std::find(hangs.begin(), hangs.end(), rank) != hangs.end();
  };
  bool reaped_hangs = false;
  while (remaining > 0) {
    if (!reaped_hangs) {
      int others = 0;
      for (int rank = 0; rank < world; ++rank) {
        if (watches[static_cast<size_t>(rank)].fd >= 0 && !expected_hang(rank)) ++others;
      }
      if (others == 0) {
        reaped_hangs = true;
        for (int rank = 0; rank < world; ++rank) {
          if (watches[static_cast<size_t>(rank)].fd >= 0)
            kill(pids[static_cast<size_t>(rank)], SIGKILL);
        }
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const int ready = poll(watches.data(), watches.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    for (int rank = 0; rank < world; ++rank) {
      pollfd& watch = watches[static_cast<size_t>(rank)];
      if (watch.fd < 0 || (watch.revents & POLLIN) == 0) continue;
      int status = 0;
      waitpid(pids[static_cast<size_t>(rank)], &status, 0);
      RankResult& result = results[static_cast<size_t>(rank)];
      result.rank = rank;
      result.exited = std::chrono::steady_clock::now();
      if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
      close(watch.fd);
      watch.fd = -1;
      --remaining;
    }
  }
  for (int rank = 0; rank < world; ++rank) {
    pollfd& watch = watches[static_cast<size_t>(rank)];
    if (watch.fd < 0) continue;
    kill(pids[static_cast<size_t>(rank)], SIGKILL);
    waitpid(pids[static_cast<size_t>(rank)], nullptr, 0);
    close(watch.fd);
    results[static_cast<size_t>(rank)].message = "hung: killed after the harness timeout";
    results[static_cast<size_t>(rank)].signal = SIGKILL;
  }
  for (int rank = 0; rank < world; ++rank) {
    char buffer[4096];
    ssize_t got;
    while ((got = read(pipes[static_cast<size_t>(rank)], buffer, sizeof(buffer))) > 0) {
      results[static_cast<size_t>(rank)].message.append(buffer, static_cast<size_t>(got));
    }
    close(pipes[static_cast<size_t>(rank)]);
    results[static_cast<size_t>(rank)].rank = rank;
  }
  return results;
}

inline ::testing::AssertionResult all_ranks_succeeded(const std::vector<RankResult>& results) {
  std::ostringstream failures;
  bool ok = true;
  for (const RankResult& result : results) {
    if (result.exit_code == 0 && result.signal == 0) continue;
    ok = false;
    failures << "\n  rank " << result.rank << ": exit " << result.exit_code;
    if (result.signal) failures << ", signal " << strsignal(result.signal);
    if (!result.message.empty()) failures << ": " << result.message;
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "ranks failed:" << failures.str();
}

// Rank `victim` was SIGKILLed and every other rank succeeded.
inline ::testing::AssertionResult only_victim_killed(const std::vector<RankResult>& results,
                                                     int victim) {
  std::ostringstream failures;
  for (const RankResult& result : results) {
    if (result.rank == victim) {
      if (result.signal != SIGKILL) failures << "\n  rank " << result.rank << " was not SIGKILLed";
    } else if (result.exit_code != 0 || result.signal != 0) {
      failures << "\n  rank " << result.rank << ": exit " << result.exit_code << ": "
               << result.message;
    }
  }
  if (failures.str().empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures.str();
}

// Asserts that nothing of the job is left in /dev/shm.
inline ::testing::AssertionResult no_segments_left(const std::string& job_id) {
  std::string sanitized;
  for (char c : job_id)
    sanitized += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  const auto left = shm_entries("shmccl.j" + sanitized);
  if (left.empty()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure() << "left in /dev/shm:";
  for (const auto& name : left)
    failure << " " << name;
  return failure;
}

}  // namespace shmccl::testing
