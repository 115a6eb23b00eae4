// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "core/check.h"
#include "core/logging.h"
#include "launcher/child_process.h"
#include "launcher/event_loop.h"
#include "launcher/job_namespace.h"
#include "launcher/output_mux.h"

namespace shmccl::launcher {
namespace {

// Whether descriptors `a` and `b` refer to the same file (a pipe, a terminal, a log file).
bool same_file(int a, int b) {
  struct stat first {
  }, second{};
  return fstat(a, &first) == 0 && fstat(b, &second) == 0 && first.st_dev == second.st_dev &&
         first.st_ino == second.st_ino;
}

using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kLastWordsOnError{1};

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
}

// One output pipe of a rank: the read end, where its lines go, and its pending poll.
struct Pipe {
  FileDescriptor read_end;
  std::unique_ptr<RankStream> stream;
  EventLoop::OpId poll = 0;
};

// One of shmrun's console streams while the loop runs: its sink, the POLLOUT wait for its
// backlog, and the pipes left unread while that backlog is large.
struct Console {
  ConsoleSink* sink = nullptr;
  EventLoop::OpId poll = 0;
  std::vector<Pipe*> paused;
};

struct Rank {
  const RankPlan* plan = nullptr;
  std::string error_file;  // its TORCHELASTIC_ERROR_FILE
  ChildProcess child;
  bool exit_taken = false;          // shmrun has recorded how it ended
  FileDescriptor out_log, err_log;  // stdout.log and stderr.log, when routed to a file
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

// A new log file (every attempt has a directory of its own: see LogLayout).
FileDescriptor open_log_file(const std::string& path) {
  FileDescriptor fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) detail::throw_system_error("open(" + path + ")", errno);
  return fd;
}

// The state of one attempt while the loop runs.
class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, SignalWatcher& signals, OrphanReaper& reaper,
             std::vector<Rank>& ranks, ConsoleSink& out_console, ConsoleSink& err_console)
      : plan_(plan),
        signals_(signals),
        reaper_(reaper),
        ranks_(ranks),
        live_(static_cast<int>(ranks.size())),
        consoles_{Console{&out_console, 0, {}}},
        err_console_(err_console) {
    if (&err_console != &out_console) consoles_.push_back(Console{&err_console, 0, {}});
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Runs the attempt; `ranks_ended` runs once every rank has exited, before the wait for a slow
  // console reader (the job's shared memory must not wait for a pager).
  void supervise(AttemptResult& result, const std::function<void()>& ranks_ended) {
    for (Rank& rank : ranks_) {
      arm_exit(rank);
      arm_pipe(rank.out);
      arm_pipe(rank.err);
    }
    arm_signals();
    if (reaper_.active()) {
      reap_orphans();  // the ones that ended before this attempt's loop
      arm_reaper();
    }
    if (plan_.verbose) arm_monitor();
    while (live_ > 0)
      run_once();
    if (grace_timer_armed_) wait_for_what_the_ranks_started();
    for (Rank& rank : ranks_) {
      close_pipe(rank.out);
      close_pipe(rank.err);
    }
    ranks_ended();
    // The attempt ends when the console took the ranks' output (a slow reader still gets their
    // last lines, which tell why a rank failed), or at once after a signal.
    if (output_pending()) {
      SHMCCL_INFO(kLaunch, "every rank ended; waiting for the console's reader to take ",
                  pending_bytes(), " bytes");
    }
    while (output_pending())
      run_once();
    for (Console& console : consoles_) {
      console.sink->flush();  // what the console takes now; a signal dropped the rest
      console.sink->abandon();
    }
    result.root_cause = root_cause_;
    result.others = others_;
    result.signal = signal_;
    result.stopped = stopped_;
  }

 private:
  // One turn of the loop; then whatever its handlers wrote to a console (the ranks' lines,
  // shmrun's own) is looked after.
  void run_once() {
    loop_.run_once();
    service_consoles();
  }

  void arm_exit(Rank& rank) {
    loop_.add_poll(rank.child.pidfd(), POLLIN, [this, &rank](int) { on_exit(rank); });
  }

  void arm_pipe(Pipe& pipe) {
    if (!pipe.read_end) return;
    pipe.poll = loop_.add_poll(pipe.read_end.get(), POLLIN, [this, &pipe](int) {
      pipe.poll = 0;
      const bool open = pipe.stream->drain(pipe.read_end.get(), kDrainPerWakeup);
      Console* console = console_of(pipe);
      if (!open) {
        close_pipe(pipe);
      } else if (console != nullptr && console->sink->backlog() >= kPauseAt) {
        // The console's reader is behind: the rank waits in its own write until it catches up.
        if (console->paused.empty()) {
          SHMCCL_INFO(kLaunch, "the console's reader is behind (", console->sink->backlog(),
                      " bytes wait): rank output is not read until it catches up");
        }
        console->paused.push_back(&pipe);
      } else {
        arm_pipe(pipe);
      }
    });
  }

  Console* console_of(const Pipe& pipe) {
    for (Console& console : consoles_) {
      if (console.sink == pipe.stream->console()) return &console;
    }
    return nullptr;
  }

  // After output reached a console: a reader gone ends the job; a backlog waits for POLLOUT.
  // After a signal the job is ending: what the console does not take at once is dropped, and no
  // rank waits for it.
  void service_consoles() {
    for (Console& console : consoles_) {
      if (console.sink->gone()) on_console_gone();
      if (signal_) console.sink->abandon();
      if (console.sink->backlog() == 0 || console.sink->gone()) {
        resume(console);
      } else if (console.poll == 0) {
        arm_console(console);
      }
    }
  }

  void arm_console(Console& console) {
    console.poll = loop_.add_poll(console.sink->fd(), POLLOUT, [this, &console](int) {
      console.poll = 0;
      console.sink->flush();
      if (console.sink->backlog() < kResumeAt) resume(console);
    });
  }

  void resume(Console& console) {
    for (Pipe* pipe : console.paused) {
      if (pipe->read_end && pipe->poll == 0) arm_pipe(*pipe);
    }
    console.paused.clear();
  }

  size_t pending_bytes() const {
    size_t bytes = 0;
    for (const Console& console : consoles_)
      bytes += console.sink->gone() ? 0 : console.sink->backlog();
    return bytes;
  }

  bool output_pending() const {
    if (signal_) return false;
    for (const Console& console : consoles_) {
      if (console.sink->backlog() > 0 && !console.sink->gone()) return true;
    }
    return false;
  }

  // shmrun's output goes to a reader that is gone (`shmrun ... | head`): as for a shell pipeline's
  // writer, the job ends as if shmrun had received SIGPIPE (exit code 141), the ranks stopped.
  void on_console_gone() {
    if (signal_) return;
    SHMCCL_INFO(kLaunch, "the console's reader is gone (EPIPE)");
    signal_ = SIGPIPE;
    begin_stop();
  }

  void close_pipe(Pipe& pipe) {
    if (pipe.poll != 0) loop_.cancel(pipe.poll);
    pipe.poll = 0;
    for (Console& console : consoles_)
      std::erase(console.paused, &pipe);
    if (pipe.read_end) {
      // Whatever the rank wrote before it exited is in the pipe already: one pipe's worth at
      // most (more would be a process it started, still writing, which must not keep shmrun).
      const int capacity = fcntl(pipe.read_end.get(), F_GETPIPE_SZ);
      pipe.stream->drain(pipe.read_end.get(),
                         capacity > 0 ? static_cast<size_t>(capacity) : kDrainPerWakeup);
      pipe.stream->finish();
      pipe.read_end.reset();
    }
  }

  // During a stop, a rank that ended (a wrapper script, which dies of SIGTERM at once) may leave
  // what it started still in its own handler of the stop signal (the training process, saving a
  // checkpoint). As torchrun, shmrun lets them end on their own within the grace period, reading
  // their output, before the SIGKILL to the ranks' process groups; the job's shared memory goes
  // once they are gone.
  void wait_for_what_the_ranks_started() {
    std::vector<pid_t> groups;
    for (const Rank& rank : ranks_)
      groups.push_back(rank.child.pid());
    if (!groups_have_running_members(groups)) return;
    SHMCCL_INFO(kLaunch, "every rank ended; waiting for processes they started, SIGKILL at the ",
                "end of the grace period");
    while (!killed_all_ && groups_have_running_members(groups)) {
      bool tick = false;
      const EventLoop::OpId timer =
          loop_.add_timeout(kDescendantsPoll, [&tick](int) { tick = true; });
      run_once();  // their output, a signal, the grace period's end, or the tick
      if (!tick) loop_.cancel(timer);
    }
  }

  void on_exit(Rank& rank) {
    if (rank.exit_taken) return;   // taken with the first failure's (on_first_failure)
    if (!rank.child.try_reap()) {  // not expected after POLLIN; wait again
      arm_exit(rank);
      return;
    }
    RankExit exit = take_exit(rank);
    if (exit.status.success()) {
      check_traces();
      return;
    }
    // Ctrl-C reaches the ranks and shmrun at once: a rank killed by it is not the root cause of
    // a failure, so look at shmrun's own pending signals before blaming the rank.
    if (!stopping_) handle_signals();
    exit.stopped = stopping_;
    if (stopping_ || root_cause_) {
      others_.push_back(exit);
      check_traces();
    } else {
      on_first_failure(std::move(exit));
    }
  }

  // The record of a rank that has ended (reaped); it no longer counts as running.
  RankExit take_exit(Rank& rank) {
    rank.exit_taken = true;
    // Not waiting for end of file: a grandchild holding the pipe must not keep shmrun alive.
    // During a stop, what the rank started may still say why it ends: the pipes stay open until
    // the wait for it is over (wait_for_what_the_ranks_started).
    if (!stopping_) {
      close_pipe(rank.out);
      close_pipe(rank.err);
    }
    --live_;

    RankExit exit;
    exit.rank = rank.plan->rank;
    exit.local_rank = rank.plan->rank;
    exit.pid = rank.child.pid();
    exit.status = *rank.child.status();
    exit.signaled_by_shmrun = exit.status.signaled && rank.child.was_sent(exit.status.code);
    exit.time = std::chrono::system_clock::now();
    SHMCCL_INFO(kLaunch, "rank ", exit.rank, " (pid ", exit.pid,
                ") ended: ", exit.status.describe(), "; ", live_, " still running");
    if (!exit.status.success()) {
      // Read now: without a log directory the file goes with the attempt's shared memory.
      exit.recorded = read_error_file(rank.error_file);
      if (exit.recorded && !plan_.logs.empty()) exit.error_file = rank.error_file;
    }
    return exit;
  }

  // The first failure seen. shmrun may see it late (a loaded machine), when the ranks it failed
  // have ended too, and the loop may report one of theirs first: every rank that has ended is
  // taken now, and the root cause is one that failed on its own (see failed_because_of_a_peer).
  void on_first_failure(RankExit first) {
    std::vector<RankExit> failed{std::move(first)};
    for (Rank& rank : ranks_) {
      if (rank.exit_taken || !rank.child.try_reap()) continue;
      RankExit exit = take_exit(rank);
      if (!exit.status.success()) failed.push_back(std::move(exit));
    }
    auto root = std::find_if(failed.begin(), failed.end(),
                             [](const RankExit& exit) { return !failed_because_of_a_peer(exit); });
    if (root == failed.end()) root = failed.begin();
    root_cause_ = *root;
    for (auto it = failed.begin(); it != failed.end(); ++it) {
      if (it != root) others_.push_back(std::move(*it));
    }
    on_failure();
  }

  // The first failure. With SHMCCL_TRACE_FILE set, the other ranks get a moment (SHMCCL_TRACE_WAIT
  // at most) to write their flight recorder before SIGTERM: they learn of the failure as fast as
  // shmrun (a pidfd, or the failing collective) and dump at once. The wait ends as soon as every
  // live rank has written its file since the failure (inotify on the file's directory) or exited.
  void on_failure() {
    if (plan_.trace_file.empty() || live_ == 0) return begin_stop();
    std::filesystem::path directory = std::filesystem::path(plan_.trace_file).parent_path();
    if (directory.empty()) directory = ".";
    inotify_.reset(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_ ||
        inotify_add_watch(inotify_.get(), directory.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO) < 0) {
      SHMCCL_INFO(kLaunch, "cannot watch ", directory.string(),
                  " for flight recorder files: ", std::strerror(errno));
      return begin_stop();
    }
    // A dump made just before shmrun saw the failure counts (file times are coarse).
    trace_threshold_ = std::chrono::system_clock::now() - std::chrono::milliseconds(100);
    awaiting_traces_ = true;
    arm_inotify();
    trace_timer_ = loop_.add_timeout(to_duration(plan_.trace_wait_s), [this](int) {
      trace_timer_ = 0;
      SHMCCL_INFO(kLaunch, "not every rank wrote its flight recorder within ", plan_.trace_wait_s,
                  " s");
      end_trace_wait();
    });
    check_traces();
  }

  void arm_inotify() {
    trace_poll_ = loop_.add_poll(inotify_.get(), POLLIN, [this](int) {
      trace_poll_ = 0;
      char events[4096];
      while (read(inotify_.get(), events, sizeof(events)) > 0) {
      }
      check_traces();
      if (awaiting_traces_) arm_inotify();
    });
  }

  // Ends the wait once every rank still running has written its flight recorder file.
  void check_traces() {
    if (!awaiting_traces_) return;
    for (const Rank& rank : ranks_) {
      if (rank.child.reaped()) continue;
      const std::string path = plan_.trace_file + "." + std::to_string(rank.plan->rank);
      std::error_code error;
      const auto written = std::filesystem::last_write_time(path, error);
      if (error) return;
      const auto when = std::chrono::file_clock::to_sys(written);
      if (when < trace_threshold_) return;
    }
    SHMCCL_INFO(kLaunch, "every running rank wrote its flight recorder");
    end_trace_wait();
  }

  // Ends the wait for flight recorders and stops the group with `stop_signal`.
  void end_trace_wait(int stop_signal = SIGTERM) {
    if (!awaiting_traces_) return;
    awaiting_traces_ = false;
    if (trace_timer_ != 0) loop_.cancel(trace_timer_);
    if (trace_poll_ != 0) loop_.cancel(trace_poll_);
    trace_timer_ = trace_poll_ = 0;
    inotify_.reset();
    begin_stop(stop_signal);
  }

  // Stops the group: `stop_signal` to every rank (SIGTERM after a failure; the signal shmrun
  // received, as torchrun forwards it, even while it waits for flight recorders), then SIGKILL
  // after the grace period.
  void begin_stop(int stop_signal = SIGTERM) {
    if (stopping_) return;
    if (awaiting_traces_) return end_trace_wait(stop_signal);
    stopping_ = true;
    stopped_ = live_;
    if (live_ == 0) return;
    SHMCCL_INFO(kLaunch, "stopping ", live_, " ranks: ", signal_name(stop_signal),
                ", SIGKILL after ", plan_.grace_period_s, " s");
    for (Rank& rank : ranks_)
      rank.child.send_signal(stop_signal);
    grace_timer_armed_ = true;
    loop_.add_timeout(to_duration(plan_.grace_period_s), [this](int) {
      if (live_ > 0) {
        SHMCCL_INFO(kLaunch, "grace period over: SIGKILL to ", live_, " ranks");
      }
      kill_all();
    });
  }

  void kill_all() {
    killed_all_ = true;
    for (Rank& rank : ranks_)
      rank.child.send_signal(SIGKILL);
  }

  void arm_reaper() {
    loop_.add_poll(reaper_.fd(), POLLIN, [this](int) {
      reap_orphans();
      arm_reaper();
    });
  }

  void reap_orphans() {
    reaper_.reap([this](pid_t pid) {
      return std::any_of(ranks_.begin(), ranks_.end(),
                         [pid](const Rank& rank) { return rank.child.pid() == pid; });
    });
  }

  void arm_signals() {
    loop_.add_poll(signals_.fd(), POLLIN, [this](int) {
      handle_signals();
      arm_signals();
    });
  }

  // SIGUSR1 asks every rank for a flight recorder dump; only ranks that handle it get it (shmccl
  // installs its handler when a rank creates its first group): to the others it would be fatal.
  void forward_dump_request() {
    for (Rank& rank : ranks_) {
      if (rank.child.reaped()) continue;
      if (rank.child.catches(SIGUSR1)) {
        rank.child.send_signal_to_rank(SIGUSR1);
      } else {
        err_console_.write("shmrun: rank " + std::to_string(rank.plan->rank) + " (pid " +
                           std::to_string(rank.child.pid()) +
                           ") does not handle SIGUSR1 (no process group yet?): "
                           "not forwarded\n");
      }
    }
  }

  void handle_signals() {
    while (std::optional<int> signal_number = signals_.next()) {
      SHMCCL_INFO(kLaunch, "received ", signal_name(*signal_number));
      // SIGUSR1 asks for flight recorders unless listed; any other signal shmrun takes would
      // have ended it (SignalWatcher), listed or not: it stops the job.
      const std::vector<int>& stop_signals = plan_.stop_signals;
      if (*signal_number == SIGUSR1 &&
          std::find(stop_signals.begin(), stop_signals.end(), SIGUSR1) == stop_signals.end()) {
        forward_dump_request();
        continue;
      }
      if (!signal_) signal_ = *signal_number;
      if (++signals_received_ > 1) {
        kill_all();  // a second signal: no more grace
      } else if (stopping_) {
        // The first signal during a stop that a failure began: the ranks get it too, as torchrun
        // forwards it, within the same grace period (their handlers may be saving state).
        for (Rank& rank : ranks_)
          rank.child.send_signal(*signal_number);
      } else {
        begin_stop(*signal_number);
      }
    }
  }

  void arm_monitor() {
    loop_.add_timeout(to_duration(plan_.monitor_interval_s), [this](int) {
      if (live_ > 0) {
        SHMCCL_INFO(kLaunch, live_, " of ", ranks_.size(), " ranks running",
                    stopping_ ? " (stopping)" : "");
      } else {
        SHMCCL_INFO(kLaunch, "every rank ended; ", pending_bytes(),
                    " bytes of output wait for the console's reader");
      }
      arm_monitor();
    });
  }

  const LaunchPlan& plan_;
  SignalWatcher& signals_;
  OrphanReaper& reaper_;
  std::vector<Rank>& ranks_;
  EventLoop loop_;  // its handlers point into ranks_, which outlive the supervisor
  int live_;
  bool stopping_ = false;
  bool grace_timer_armed_ = false;  // the stop's SIGKILL will come (not when no rank was left)
  bool killed_all_ = false;         // the grace period is over, or a second signal came
  int stopped_ = 0;                 // ranks still running when the stop began
  // How often the wait for what the ranks started looks whether it is gone.
  static constexpr auto kDescendantsPoll = std::chrono::milliseconds(20);
  // What one wake-up of a rank's pipe reads at most, so that a rank writing without pause leaves
  // room for the other events (exits, signals, the other ranks' output).
  static constexpr size_t kDrainPerWakeup = 256 * 1024;
  // A console backlog this large stops the reading of the pipes that feed it, until it is below
  // kResumeAt: shmrun holds a slow reader's output in memory only so far.
  static constexpr size_t kPauseAt = 1024 * 1024;
  static constexpr size_t kResumeAt = 256 * 1024;
  std::vector<Console> consoles_;  // stdout's, then stderr's unless it is the same
  ConsoleSink& err_console_;
  // The flight recorder wait after the first failure (see on_failure).
  bool awaiting_traces_ = false;
  FileDescriptor inotify_;
  EventLoop::OpId trace_poll_ = 0;
  EventLoop::OpId trace_timer_ = 0;
  std::chrono::system_clock::time_point trace_threshold_;
  std::optional<RankExit> root_cause_;
  std::vector<RankExit> others_;
  std::optional<int> signal_;
  int signals_received_ = 0;  // stop signals shmrun received (not SIGPIPE from a gone console)
};

// The files of --duplicate-std{out,err}-filters for one attempt, shared by every rank.
struct DuplicateFiles {
  FileDescriptor out_file, err_file;
  DuplicateSink out, err;

  DuplicateFiles(const LaunchPlan& plan, int restart_count) {
    if (!plan.duplicate_stdout_filters.empty()) {
      out_file = open_log_file(plan.logs.filtered_file(restart_count, kStdout));
      out = DuplicateSink{plan.duplicate_stdout_filters, out_file.get()};
    }
    if (!plan.duplicate_stderr_filters.empty()) {
      err_file = open_log_file(plan.logs.filtered_file(restart_count, kStderr));
      err = DuplicateSink{plan.duplicate_stderr_filters, err_file.get()};
    }
  }
};

Rank start_rank(const LaunchPlan& plan, const RankPlan& rank_plan, int restart_count,
                const JobNamespace& job_namespace, ConsoleSink& out_console,
                ConsoleSink& err_console, const DuplicateFiles& duplicates) {
  Rank rank;
  rank.plan = &rank_plan;
  // New for every attempt (a directory of the attempt, or its namespace): no file of an earlier
  // attempt or job can be taken for this attempt's.
  rank.error_file = plan.error_file(rank_plan.rank, restart_count, job_namespace.name());
  const unsigned console = rank_plan.routing.console, file = rank_plan.routing.file;
  if (file & kStdout) {
    rank.out_log = open_log_file(plan.logs.stream_file(restart_count, rank_plan.rank, kStdout));
  }
  if (file & kStderr) {
    rank.err_log = open_log_file(plan.logs.stream_file(restart_count, rank_plan.rank, kStderr));
  }
  const std::string prefix =
      plan.prefix ? "[rank" + std::to_string(rank_plan.rank) + "]:" : std::string();
  auto [out_read, out_write] = make_pipe();
  auto [err_read, err_write] = make_pipe();
  rank.out.read_end = std::move(out_read);
  const unsigned duplicated = rank_plan.duplicated;
  rank.out.stream = std::make_unique<RankStream>(
      console & kStdout ? &out_console : nullptr, prefix, rank.out_log ? rank.out_log.get() : -1,
      duplicated & kStdout && duplicates.out.fd >= 0 ? &duplicates.out : nullptr);
  rank.err.read_end = std::move(err_read);
  rank.err.stream = std::make_unique<RankStream>(
      console & kStderr ? &err_console : nullptr, prefix, rank.err_log ? rank.err_log.get() : -1,
      duplicated & kStderr && duplicates.err.fd >= 0 ? &duplicates.err : nullptr);

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
              rank_plan.binding.describe(), plan.logs.empty() ? "" : ", logs in ",
              plan.logs.empty() ? "" : plan.logs.rank_dir(restart_count, rank_plan.rank));
  return rank;
}

}  // namespace

WorkerGroup::WorkerGroup(const LaunchPlan& plan, SignalWatcher& signals)
    : plan_(plan), signals_(signals), reaper_(plan.reap_orphans), out_console_(STDOUT_FILENO) {
  // One sink when stdout and stderr are the same file (`2>&1`): two would each write whenever
  // their own backlog is empty, into the middle of a line the other left half written.
  if (!same_file(STDOUT_FILENO, STDERR_FILENO)) separate_err_console_.emplace(STDERR_FILENO);
  // shmrun's own lines share stderr's queue with the ranks', for the whole job: a blocking write
  // of one, while the stop signals are blocked, would leave shmrun deaf to Ctrl-C for as long as
  // the console's reader does not read (see log::set_line_sink).
  log::set_line_sink(
      [](void* sink, std::string_view line) { static_cast<ConsoleSink*>(sink)->write(line); },
      &err_console());
}

WorkerGroup::~WorkerGroup() {
  log::set_line_sink(nullptr, nullptr);
  // An error ends the job (run_job drains what its own returns leave): what the consoles still
  // hold gets a moment, as shmrun's last words after a signal get.
  if (std::uncaught_exceptions() == 0) return;
  out_console_.drain(signals_.fd(), kLastWordsOnError);
  if (separate_err_console_) separate_err_console_->drain(signals_.fd(), kLastWordsOnError);
}

AttemptResult WorkerGroup::run(int restart_count) {
  JobNamespace job_namespace = JobNamespace::create(plan_.run_id);
  AttemptResult result;

  const auto start = Clock::now();
  ConsoleSink& out_console = out_console_;
  ConsoleSink& err_console = this->err_console();
  if (!plan_.logs.empty()) {
    plan_.logs.make_attempt_dirs(restart_count, static_cast<int>(plan_.ranks.size()));
  }
  const DuplicateFiles duplicates(plan_, restart_count);
  std::vector<Rank> ranks;  // declared after the namespace: ranks are reaped before removal
  ranks.reserve(plan_.ranks.size());  // never reallocated: the loop's handlers point into it
  for (const RankPlan& rank_plan : plan_.ranks) {
    ranks.push_back(start_rank(plan_, rank_plan, restart_count, job_namespace, out_console,
                               err_console, duplicates));
  }
  SHMCCL_INFO(kLaunch, "started ", ranks.size(), " ranks in ",
              std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
              " ms (restart ", restart_count, ", namespace ", job_namespace.name(), ")");

  Supervisor(plan_, signals_, reaper_, ranks, out_console, err_console)
      .supervise(result, [&job_namespace] { job_namespace.remove_all(); });
  job_namespace.remove_all();
  return result;
}

}  // namespace shmccl::launcher
