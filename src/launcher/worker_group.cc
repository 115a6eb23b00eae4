// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/child_process.h"
#include "launcher/event_loop.h"
#include "launcher/job_namespace.h"
#include "launcher/output_mux.h"

namespace shmccl::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
}

// One output pipe of a rank: the read end, where its lines go, and its pending poll.
struct Pipe {
  FileDescriptor read_end;
  std::unique_ptr<RankStream> stream;
  EventLoop::OpId poll = 0;
};

struct Rank {
  const RankPlan* plan = nullptr;
  ChildProcess child;
  FileDescriptor log_file;
  Pipe out;
  Pipe err;
};

// Returns the read end (non-blocking, CLOEXEC) and the write end for the child (CLOEXEC too:
// the child dup2s it onto fd 1 or 2, which clears the flag on the copy).
std::pair<FileDescriptor, FileDescriptor> make_pipe() {
  int fds[2];
  SHMCCL_SYSCALL(pipe2(fds, O_CLOEXEC), "pipe2");
  FileDescriptor read_end(fds[0]), write_end(fds[1]);
  // Only the read end: O_NONBLOCK on the write end would make the rank's writes fail.
  SHMCCL_SYSCALL(fcntl(read_end.get(), F_SETFL, O_NONBLOCK), "fcntl(O_NONBLOCK)");
  return {std::move(read_end), std::move(write_end)};
}

FileDescriptor open_log_file(const std::string& path, int restart_count) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (restart_count == 0 ? O_TRUNC : 0);
  FileDescriptor fd(open(path.c_str(), flags, 0644));
  if (!fd) detail::throw_system_error("open(" + path + ")", errno);
  if (restart_count > 0) {
    write_all(fd.get(), "==== shmrun: restart " + std::to_string(restart_count) +
                            " (TORCHELASTIC_RESTART_COUNT=" + std::to_string(restart_count) +
                            ") ====\n");
  }
  return fd;
}

// The state of one attempt while the loop runs.
class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, SignalWatcher& signals, std::vector<Rank>& ranks)
      : plan_(plan), signals_(signals), ranks_(ranks), live_(static_cast<int>(ranks.size())) {}

  void supervise(AttemptResult& result) {
    for (Rank& rank : ranks_) {
      arm_exit(rank);
      arm_pipe(rank.out);
      arm_pipe(rank.err);
    }
    arm_signals();
    if (plan_.verbose) arm_monitor();
    while (live_ > 0)
      loop_.run_once();
    result.root_cause = root_cause_;
    result.others = others_;
    result.signal = signal_;
  }

 private:
  void arm_exit(Rank& rank) {
    loop_.add_poll(rank.child.pidfd(), POLLIN, [this, &rank](int) { on_exit(rank); });
  }

  void arm_pipe(Pipe& pipe) {
    if (!pipe.read_end) return;
    pipe.poll = loop_.add_poll(pipe.read_end.get(), POLLIN, [this, &pipe](int) {
      pipe.poll = 0;
      if (pipe.stream->drain(pipe.read_end.get())) {
        arm_pipe(pipe);
      } else {
        close_pipe(pipe);
      }
    });
  }

  void close_pipe(Pipe& pipe) {
    if (pipe.poll != 0) loop_.cancel(pipe.poll);
    pipe.poll = 0;
    if (pipe.read_end) {
      // Whatever the rank wrote before it exited is in the pipe already.
      pipe.stream->drain(pipe.read_end.get());
      pipe.stream->finish();
      pipe.read_end.reset();
    }
  }

  void on_exit(Rank& rank) {
    if (!rank.child.try_reap()) {  // not expected after POLLIN; wait again
      arm_exit(rank);
      return;
    }
    // Not waiting for end of file: a grandchild holding the pipe must not keep shmrun alive.
    close_pipe(rank.out);
    close_pipe(rank.err);
    --live_;

    RankExit exit;
    exit.rank = rank.plan->rank;
    exit.local_rank = rank.plan->rank;
    exit.pid = rank.child.pid();
    exit.status = *rank.child.status();
    exit.time = std::chrono::system_clock::now();
    SHMCCL_INFO(kLaunch, "rank ", exit.rank, " (pid ", exit.pid,
                ") ended: ", exit.status.describe(), "; ", live_, " still running");
    if (exit.status.success()) return;
    // Ctrl-C reaches the ranks and shmrun at once: a rank killed by it is not the root cause of
    // a failure, so look at shmrun's own pending signals before blaming the rank.
    if (!stopping_) handle_signals();
    exit.stopped = stopping_;
    if (stopping_) {
      others_.push_back(exit);
    } else {
      root_cause_ = exit;
      begin_stop();
    }
  }

  void begin_stop() {
    if (stopping_) return;
    stopping_ = true;
    if (live_ == 0) return;
    SHMCCL_INFO(kLaunch, "stopping ", live_, " ranks: SIGTERM, SIGKILL after ",
                plan_.grace_period_s, " s");
    for (Rank& rank : ranks_)
      rank.child.send_signal(SIGTERM);
    loop_.add_timeout(to_duration(plan_.grace_period_s), [this](int) {
      if (live_ > 0) {
        SHMCCL_INFO(kLaunch, "grace period over: SIGKILL to ", live_, " ranks");
      }
      kill_all();
    });
  }

  void kill_all() {
    for (Rank& rank : ranks_)
      rank.child.send_signal(SIGKILL);
  }

  void arm_signals() {
    loop_.add_poll(signals_.fd(), POLLIN, [this](int) {
      handle_signals();
      arm_signals();
    });
  }

  void handle_signals() {
    while (std::optional<int> signal_number = signals_.next()) {
      SHMCCL_INFO(kLaunch, "received ", signal_name(*signal_number));
      if (!signal_) signal_ = *signal_number;
      if (stopping_) {
        kill_all();  // a second signal: no more grace
      } else {
        begin_stop();
      }
    }
  }

  void arm_monitor() {
    loop_.add_timeout(to_duration(plan_.monitor_interval_s), [this](int) {
      SHMCCL_INFO(kLaunch, live_, " of ", ranks_.size(), " ranks running",
                  stopping_ ? " (stopping)" : "");
      arm_monitor();
    });
  }

  const LaunchPlan& plan_;
  SignalWatcher& signals_;
  std::vector<Rank>& ranks_;
  EventLoop loop_;  // its handlers point into ranks_, which outlive the supervisor
  int live_;
  bool stopping_ = false;
  std::optional<RankExit> root_cause_;
  std::vector<RankExit> others_;
  std::optional<int> signal_;
};

Rank start_rank(const LaunchPlan& plan, const RankPlan& rank_plan, int restart_count,
                const JobNamespace& job_namespace) {
  Rank rank;
  rank.plan = &rank_plan;
  if (!rank_plan.log_file.empty()) {
    rank.log_file = open_log_file(rank_plan.log_file, restart_count);
  }
  const std::string prefix =
      plan.prefix ? "[rank" + std::to_string(rank_plan.rank) + "]:" : std::string();
  const unsigned console = rank_plan.routing.console, file = rank_plan.routing.file;
  auto [out_read, out_write] = make_pipe();
  auto [err_read, err_write] = make_pipe();
  rank.out.read_end = std::move(out_read);
  rank.out.stream = std::make_unique<RankStream>(console & kStdout ? STDOUT_FILENO : -1, prefix,
                                                 file & kStdout ? rank.log_file.get() : -1);
  rank.err.read_end = std::move(err_read);
  rank.err.stream = std::make_unique<RankStream>(console & kStderr ? STDERR_FILENO : -1, prefix,
                                                 file & kStderr ? rank.log_file.get() : -1);

  SpawnRequest request;
  request.path = plan.program_path;
  request.argv = plan.argv;
  request.env =
      plan.rank_env(rank_plan.rank, restart_count, job_namespace.name(), job_namespace.lock_fd());
  request.stdout_fd = out_write.get();  // the parent's copies close when this returns
  request.stderr_fd = err_write.get();
  request.keep_fd = job_namespace.lock_fd();
  std::optional<PreparedBinding> binding;
  if (!rank_plan.binding.empty()) {
    binding.emplace(rank_plan.binding);
    request.before_exec = [&binding]() { return binding->apply(); };
  }
  rank.child = ChildProcess::spawn(request);
  SHMCCL_INFO(kLaunch, "rank ", rank_plan.rank, ": pid ", rank.child.pid(), ", binding ",
              rank_plan.binding.describe(), rank_plan.log_file.empty() ? "" : ", log ",
              rank_plan.log_file);
  return rank;
}

}  // namespace

AttemptResult WorkerGroup::run(int restart_count) {
  JobNamespace job_namespace = JobNamespace::create(plan_.run_id);
  AttemptResult result;

  const auto start = Clock::now();
  std::vector<Rank> ranks;  // declared after the namespace: ranks are reaped before removal
  ranks.reserve(plan_.ranks.size());  // never reallocated: the loop's handlers point into it
  for (const RankPlan& rank_plan : plan_.ranks) {
    ranks.push_back(start_rank(plan_, rank_plan, restart_count, job_namespace));
  }
  SHMCCL_INFO(kLaunch, "started ", ranks.size(), " ranks in ",
              std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
              " ms (restart ", restart_count, ", namespace ", job_namespace.name(), ")");

  Supervisor(plan_, signals_, ranks).supervise(result);
  job_namespace.remove_all();
  return result;
}

}  // namespace shmccl::launcher
