// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/orphan_reaper.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <optional>

#include "core/check.h"
#include "core/directory.h"
#include "core/logging.h"
#include "launcher/process_stat.h"

namespace shmccl::launcher {

namespace {

// Whether /proc shows this process under its own pid: /proc was mounted for this PID namespace,
// so the parents /proc names are pids waitpid takes.
bool proc_is_ours() {
  char target[32];
  const ssize_t n = readlink("/proc/self", target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  const std::optional<long> pid = detail::numeric_entry(target);
  return pid && *pid == getpid();
}

}  // namespace

OrphanReaper::OrphanReaper(bool subreaper) {
  if (subreaper) {
    SHMCCL_SYSCALL(prctl(PR_SET_CHILD_SUBREAPER, 1), "prctl(PR_SET_CHILD_SUBREAPER)");
  } else if (getpid() != 1) {
    return;
  }
  if (!proc_is_ours()) {
    SHMCCL_WARN(kLaunch,
                "shmrun runs as PID 1 but /proc is not its PID namespace's: it cannot "
                "find orphaned processes to reap");
    return;
  }
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  // Blocked for good, as SignalWatcher's signals (ChildProcess unblocks every signal in the
  // ranks); pidfds, not SIGCHLD, tell shmrun of its ranks' ends.
  SHMCCL_SYSCALL(sigprocmask(SIG_BLOCK, &child, nullptr), "sigprocmask(SIGCHLD)");
  fd_.reset(signalfd(-1, &child, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) detail::throw_system_error("signalfd(SIGCHLD)", errno);
}

int OrphanReaper::reap(const std::function<bool(pid_t)>& is_rank) {
  if (!active()) return 0;
  signalfd_siginfo info;
  while (read(fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
  }
  const pid_t self = getpid();
  int reaped = 0;
  detail::for_each_process([&](long pid) {
    if (pid > INT_MAX) return true;
    const std::optional<ProcessStat> stat = read_process_stat(pid);
    if (!stat || stat->parent != self || stat->state != 'Z') return true;
    const auto child = static_cast<pid_t>(pid);
    if (is_rank(child)) return true;
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      ++reaped;
      SHMCCL_INFO(kLaunch, "reaped orphaned process ", child);
    }
    return true;
  });
  return reaped;
}

}  // namespace shmccl::launcher
