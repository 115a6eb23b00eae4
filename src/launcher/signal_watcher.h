// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// SignalWatcher: turns the signals that stop the job (--signals-to-handle: SIGINT, SIGTERM,
// SIGHUP and SIGQUIT by default) and SIGUSR1 (forwarded to the ranks: a flight recorder dump,
// unless it is one of the former) sent to shmrun into readable events on a signalfd, which the
// event loop polls like any other fd. Constructing it blocks those signals for the process
// (shmrun is single-threaded) and ignores SIGPIPE (a console reader going away must not kill the
// supervisor); ChildProcess undoes both in the ranks. The signals stay blocked after
// destruction: one arriving while shmrun exits must not override the exit code it has chosen.
// One per process; not thread-safe.
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
