// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// SignalWatcher: turns the signals sent to shmrun into readable events on a signalfd, which the
// event loop polls like any other fd: SIGUSR1 (forwarded to the ranks: a flight recorder dump,
// unless --signals-to-handle lists it) and every other signal whose default action would end
// shmrun (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR2, SIGALRM, real-time signals...), which stop
// the job: shmrun never ends without stopping its ranks and removing the job's shared memory.
// Constructing it blocks those signals for the process (shmrun is single-threaded) and ignores
// SIGPIPE (a console reader going away must not kill the supervisor); ChildProcess undoes both in
// the ranks. The signals stay blocked after destruction: one arriving while shmrun exits must not
// override the exit code it has chosen. One per process; not thread-safe.
#pragma once

#include <signal.h>

#include <optional>
#include <vector>

#include "core/file_descriptor.h"

namespace shmccl::launcher {

class SignalWatcher {
 public:
  explicit SignalWatcher(const std::vector<int>& stop_signals);
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  int fd() const { return fd_.get(); }
  // The next pending signal's number, or nullopt when none is pending (non-blocking).
  std::optional<int> next();

 private:
  FileDescriptor fd_;
};

}  // namespace shmccl::launcher
