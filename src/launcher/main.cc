// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmrun: starts the ranks of a shmccl job on this host and supervises them (docs/launcher.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/directory.h"
#include "core/logging.h"
#include "launcher/console_sink.h"
#include "launcher/error_files.h"
#include "launcher/failure_summary.h"
#include "launcher/launch_plan.h"
#include "launcher/options.h"
#include "launcher/signal_watcher.h"
#include "launcher/stale_cleanup.h"
#include "launcher/worker_group.h"

namespace shmccl::launcher {
namespace {

constexpr int kExitError = 1;

int dump_config() {
  struct Row {
    std::string name, kind, default_value, value, help;
  };
  std::vector<Row> rows = {{"NAME", "KIND", "DEFAULT", "VALUE", "HELP"}};
  auto shown = [](std::string text) { return text.empty() ? std::string("-") : text; };
  for (const config::Setting& setting : config::all_settings()) {
    rows.push_back({setting.name, config::kind_name(setting.kind), shown(setting.default_value),
                    shown(config::get_string(setting.name)), setting.help});
  }
  size_t widths[4] = {0, 0, 0, 0};
  for (const Row& row : rows) {
    const std::string* cells[4] = {&row.name, &row.kind, &row.default_value, &row.value};
    for (int i = 0; i < 4; ++i)
      widths[i] = std::max(widths[i], cells[i]->size());
  }
  for (const Row& row : rows) {
    std::printf("%-*s  %-*s  %-*s  %-*s  %s\n", static_cast<int>(widths[0]), row.name.c_str(),
                static_cast<int>(widths[1]), row.kind.c_str(), static_cast<int>(widths[2]),
                row.default_value.c_str(), static_cast<int>(widths[3]), row.value.c_str(),
                row.help.c_str());
  }
  return 0;
}

int cleanup(const std::vector<std::string>& only) {
  const CleanupReport report = cleanup_stale_namespaces(only);
  for (const std::string& entry : report.removed)
    std::printf("removed /dev/shm/%s\n", entry.c_str());
  for (const KeptNamespace& kept : report.live)
    std::printf("kept namespace %s: %s\n", kept.ns.c_str(), kept.why.c_str());
  for (const std::string& error : report.errors)
    std::fprintf(stderr, "shmrun: %s\n", error.c_str());
  std::printf("shmrun --cleanup: removed %zu entries, kept %zu live namespaces\n",
              report.removed.size(), report.live.size());
  return report.errors.empty() ? 0 : kExitError;
}

// -v: INFO-level logging for shmrun itself. Set after the ranks' environment was captured, so
// the ranks keep the user's SHMCCL_DEBUG.
void enable_verbose_logging() {
  const char* level = std::getenv("SHMCCL_DEBUG");
  if (level == nullptr || std::string(level) != "TRACE") setenv("SHMCCL_DEBUG", "INFO", 1);
  setenv("SHMCCL_DEBUG_SUBSYS", "ALL", 1);
  log::reload();
}

// A shmrun killed by SIGKILL cannot remove its job's shared memory (its ranks die with it); the
// next shmrun on the host does, before its own job. Only namespaces shmrun made (with a lock
// file) whose lock nobody holds any more: no process of that job is left.
void remove_what_killed_launchers_left() {
  const CleanupReport report = cleanup_stale_namespaces({}, /*launched_only=*/true);
  if (!report.removed.empty()) {
    SHMCCL_INFO(kLaunch, "removed ", report.removed.size(),
                " shared-memory entries of jobs whose processes are all gone (their shmrun was "
                "killed), first ",
                report.removed.front());
  }
  for (const std::string& error : report.errors)
    SHMCCL_INFO(kLaunch, "stale job cleanup: ", error);
}

// shmrun's own lines after an attempt. They wait for a slow reader of stderr as the ranks' lines
// did (a blocking write could wait forever, deaf to signals): until it takes them, or a signal
// comes, or, when the job ends for `signal`, for kLastWordsAfterSignal at most.
constexpr std::chrono::seconds kLastWordsAfterSignal{1};

void say(ConsoleSink& console, const SignalWatcher& signals, std::optional<int> signal,
         const std::string& text) {
  console.write(text);
  std::optional<std::chrono::milliseconds> bound;
  if (signal) bound = kLastWordsAfterSignal;
  console.drain(signals.fd(), bound);
}

// Who started shmrun may have given it an error file of its own (torchelastic's
// TORCHELASTIC_ERROR_FILE; the ranks get theirs): the root cause goes there, as torchrun's
// @record puts it. Returns a warning line for stderr when it cannot be written.
std::string report_to_parent(const std::optional<RecordedError>& recorded, int error_code,
                             const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return "";
  if (write_launcher_error_file(path, recorded, error_code, message)) return "";
  return std::string("shmrun: warning: cannot write TORCHELASTIC_ERROR_FILE ") + path + ": " +
         std::strerror(errno) + "\n";
}

// Ends shmrun by `signal_number` itself, as a program that caught it to clean up should: a shell
// that waits for it learns so. (Bash ends a script on a child killed by SIGINT, and goes on after
// one that exited with 130, taking it that the child handled the interrupt.)
[[noreturn]] void die_of(int signal_number) {
  std::fflush(nullptr);
  signal(signal_number, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  raise(signal_number);
  _exit(128 + signal_number);  // not reached: the signal's default action ends the process
}

// `stopped_by`: the signal that stopped the job, when one did and no rank failed before it.
int run_job(const Options& options, std::optional<int>& stopped_by) {
  std::vector<std::string> warnings;
  LaunchPlan plan = make_launch_plan(options, &warnings);
  if (options.verbose) enable_verbose_logging();
  const std::time_t job_start = std::time(nullptr) - 1;  // st_mtime has whole seconds here
  SignalWatcher signals(plan.stop_signals);
  // From here on, everything shmrun writes to stderr goes through the group's console, which
  // never blocks: the stop signals are blocked now, and a write waiting for a slow reader would
  // leave shmrun deaf to them.
  WorkerGroup group(plan, signals);
  for (const std::string& warning : warnings)
    group.err_console().write("shmrun: warning: " + warning + "\n");
  if (!plan.logs.empty()) {
    // Its name is new for every run: say where it is.
    group.err_console().write("shmrun: logs of this run go to " + plan.logs.run_dir +
                              "/attempt_<restart>/<local rank>/\n");
  }
  remove_what_killed_launchers_left();
  for (int restart = 0;; ++restart) {
    const AttemptResult result = group.run(restart);
    if (result.succeeded()) {
      group.err_console().drain(signals.fd(), std::nullopt);  // shmrun's lines since the ranks'
      return 0;
    }
    if (!result.root_cause) {
      const std::string name = signal_name(*result.signal);
      say(group.err_console(), signals, *result.signal,
          result.stopped == plan.world_size
              ? "shmrun: received " + name + ": stopped all " + std::to_string(plan.world_size) +
                    " ranks\n"
              : "shmrun: received " + name + ": stopped " + std::to_string(result.stopped) +
                    " of " + std::to_string(plan.world_size) + " ranks (the others had ended)\n");
      stopped_by = result.signal;
      return 128 + *result.signal;
    }
    const RankExit& failed = *result.root_cause;
    std::optional<int> signal = result.signal;
    if (!signal && restart < plan.max_restarts) {
      const std::optional<RecordedError>& recorded = failed.recorded;
      say(group.err_console(), signals, std::nullopt,
          "shmrun: rank " + std::to_string(failed.rank) + " (pid " + std::to_string(failed.pid) +
              ") failed with " + failed.status.describe() +
              (recorded ? " (" + recorded->message + ")" : std::string()) + "; restarting all " +
              std::to_string(plan.world_size) + " ranks (restart " + std::to_string(restart + 1) +
              " of " + std::to_string(plan.max_restarts) + ")\n");
      // A signal that came meanwhile (say() stops waiting for it) ends the job here: shmrun
      // never restarts after a signal. (A dump request finds no rank to ask.)
      while ((signal = signals.next()) && *signal == SIGUSR1 &&
             std::find(plan.stop_signals.begin(), plan.stop_signals.end(), SIGUSR1) ==
                 plan.stop_signals.end()) {
      }
      if (!signal) continue;
    }
    SummaryContext context;
    context.program = plan.program;
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    context.host = host;
    for (const RankPlan& rank : plan.ranks) {
      std::string files;
      for (const std::string& file : plan.log_files(rank.rank, restart))
        files += (files.empty() ? "" : ", ") + file;
      context.log_files.push_back(files);
    }
    context.trace_file = plan.trace_file;
    for (const RankPlan& rank : plan.ranks) {
      // Written by this job: a file from an earlier run does not count.
      const std::string path = plan.trace_file + "." + std::to_string(rank.rank);
      struct stat info {};
      context.trace_written.push_back(!plan.trace_file.empty() && stat(path.c_str(), &info) == 0 &&
                                      info.st_mtime >= job_start);
    }
    const std::string summary = format_failure_summary(context, failed, result.others);
    const std::string warning = report_to_parent(failed.recorded, failed.status.shell_code(),
                                                 "shmrun: rank " + std::to_string(failed.rank) +
                                                     " (pid " + std::to_string(failed.pid) +
                                                     ") failed with " + failed.status.describe());
    say(group.err_console(), signals, signal, summary + warning);
    return failed.status.shell_code();
  }
}

// A closed stdin/stdout/stderr would be reused by the first pipe shmrun makes, and a rank's
// output would then land in the wrong place: park /dev/null there instead.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
}

// What shmrun inherited beyond stdin, stdout and stderr must not reach the ranks, as Python's
// subprocess (and so torchrun) closes it: a lock a script holds on fd 9, a pipe whose reader
// waits for EOF. The children ask close_range(CLOSE_RANGE_CLOEXEC) too, but that flag is Linux
// 5.11+; before, the call fails and only this holds.
void close_inherited_fds_on_exec() {
  detail::Directory directory("/proc/self/fd");
  directory.for_each([&](const char* name) {
    const std::optional<long> fd = detail::numeric_entry(name);
    if (!fd || *fd < 3 || *fd == directory.fd()) return true;
    const int flags = fcntl(static_cast<int>(*fd), F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0)
      fcntl(static_cast<int>(*fd), F_SETFD, flags | FD_CLOEXEC);
    return true;
  });
}

int shmrun_main(int argc, char** argv) {
  ensure_standard_fds();
  close_inherited_fds_on_exec();
  // An ignored SIGCHLD (a parent's SIG_IGN survives exec) makes the kernel reap the ranks at
  // once: waitid() on them fails, and their pids could be reused while shmrun still signals them.
  signal(SIGCHLD, SIG_DFL);
  Options options;
  try {
    std::vector<std::string> args = environment_options(std::getenv);
    args.insert(args.end(), argv + 1, argv + argc);
    options = parse_options(args);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "%s\nshmrun: error: %s\n", usage_line(), error.what());
    std::fputs(report_to_parent(std::nullopt, 2, std::string("shmrun: ") + error.what()).c_str(),
               stderr);
    return 2;
  }
  try {
    switch (options.mode) {
      case Mode::kHelp:
        std::fputs(help_text().c_str(), stdout);
        return 0;
      case Mode::kVersion:
        std::printf("shmrun (shmccl) %s\n", SHMCCL_VERSION);
        return 0;
      case Mode::kDumpConfig:
        return dump_config();
      case Mode::kCleanup:
        return cleanup(options.command);
      case Mode::kRun: {
        std::optional<int> stopped_by;
        const int code = run_job(options, stopped_by);
        // Only SIGINT: a shell reads the others' 128 + N as it reads a death by them, and
        // SIGQUIT's default action would dump core.
        if (stopped_by == SIGINT) die_of(SIGINT);
        return code;
      }
    }
  } catch (const LaunchError& error) {
    std::fprintf(stderr, "shmrun: error: %s\n", error.what());
    std::fputs(
        report_to_parent(std::nullopt, error.exit_code(), std::string("shmrun: ") + error.what())
            .c_str(),
        stderr);
    return error.exit_code();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "shmrun: error: %s\n", error.what());
    std::fputs(
        report_to_parent(std::nullopt, kExitError, std::string("shmrun: ") + error.what()).c_str(),
        stderr);
  }
  return kExitError;
}

}  // namespace
}  // namespace shmccl::launcher

int main(int argc, char** argv) {
  return shmccl::launcher::shmrun_main(argc, argv);
}
