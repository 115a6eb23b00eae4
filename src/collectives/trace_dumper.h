// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// TraceDumper: the thread that writes the flight recorder out when asked from a context that must
// not do it itself: the peer monitor's death callbacks (which must not block) and the SIGUSR1
// handler (which may only make async-signal-safe calls). Both wake the thread through an eventfd;
// the handler does nothing else (a relaxed store to a lock-free atomic, one write(2), errno
// saved and restored), so it allocates nothing and takes no lock.
//
// SIGUSR1: the handler is installed when the first process group is created, and only if SIGUSR1
// still has its default action (SIG_DFL) and SHMCCL_TRACE_SIGNAL is on. A program that installs
// its own SIGUSR1 handler, before or after, keeps it: shmccl then dumps on failures only.
//
// fork: the child gets no thread and a fresh state (pthread_atfork); the inherited handler stays
// installed but does nothing until the child creates a group of its own.
//
// Thread-safe.
#pragma once

#include <string>

namespace shmccl::collectives {

class TraceDumper {
 public:
  // Starts the thread and installs the signal handler, once per process (and once in a child).
  static void ensure_started();
  // Asks for a dump with `reason`; requests that arrive together become one dump.
  static void request(const std::string& reason);
  // True when the SIGUSR1 handler of shmccl is installed in this process.
  static bool signal_handler_installed();
};

}  // namespace shmccl::collectives
