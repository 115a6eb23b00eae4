// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/signal_watcher.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "core/check.h"

namespace shmccl::launcher {

namespace {

// Signals sent to a process (not faults of its own code) whose default action ends it, besides
// SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGUSR1; SIGPIPE is ignored instead.
constexpr int kOtherEndingSignals[] = {SIGUSR2, SIGALRM, SIGXCPU,   SIGXFSZ, SIGVTALRM,
                                       SIGPROF, SIGPWR,  SIGSTKFLT, SIGIO};

}  // namespace

SignalWatcher::SignalWatcher(const std::vector<int>& stop_signals) {
  sigset_t handled;
  sigemptyset(&handled);
  for (int signal_number : stop_signals)
    sigaddset(&handled, signal_number);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1})
    sigaddset(&handled, signal_number);
  for (int signal_number : kOtherEndingSignals)
    sigaddset(&handled, signal_number);
  // Real-time signals end a process too (glibc keeps the first two for its threads).
  for (int signal_number = SIGRTMIN; signal_number <= SIGRTMAX; ++signal_number)
    sigaddset(&handled, signal_number);
  SHMCCL_SYSCALL(sigprocmask(SIG_BLOCK, &handled, nullptr), "sigprocmask");
  fd_.reset(signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) detail::throw_system_error("signalfd", errno);
  signal(SIGPIPE, SIG_IGN);
}

std::optional<int> SignalWatcher::next() {
  signalfd_siginfo info;
  while (true) {
    const ssize_t n = read(fd_.get(), &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;  // EAGAIN: nothing pending
  }
}

}  // namespace shmccl::launcher
