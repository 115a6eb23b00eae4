// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The threads the library starts (stream workers, the peer monitor, the flight recorder's dump
// thread) block every asynchronous signal, so that the application's signals (SIGUSR1 for a
// dump, SIGINT, SIGTERM, ...) reach the application's own threads, as the application expects.
// A signal that lands on a library thread parked in a system call can also wait there: under
// ThreadSanitizer, which runs a handler only when its thread enters an intercepted call, a
// SIGUSR1 once went unhandled for 10 s. Faults (SIGSEGV, SIGBUS) are still delivered: the kernel
// unblocks a signal that a fault raises.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace shmccl::detail {

// Blocks every signal on the calling thread for its scope: a thread started meanwhile inherits
// that mask (std::thread copies its creator's).
class ScopedSignalBlock {
 public:
  ScopedSignalBlock() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous_);
  }
  ~ScopedSignalBlock() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  ScopedSignalBlock(const ScopedSignalBlock&) = delete;
  ScopedSignalBlock& operator=(const ScopedSignalBlock&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace shmccl::detail
