// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// OrphanReaper: shmrun as PID 1 (a container's entry point, `docker run image shmrun ...`) is the
// parent of every process of the container whose own parent died: the kernel hands orphans to
// their PID namespace's init, and an init that never waits for them collects their zombies (a
// crashed rank's data-loader workers, a daemon a rank's script started). torchrun has this gap;
// tini and dumb-init exist to close it. The reaper closes it for shmrun: on SIGCHLD (its own
// signalfd, apart from the stop signals') it waits for every zombie child that is not a rank.
// The ranks' zombies stay for ChildProcess, which signals their process groups through them.
//
// Active as PID 1, or as a child subreaper (shmrun --reap-orphans: the orphans of its descendants
// come to it, not to init), with a /proc of its own PID namespace (its zombies are found there);
// else it does nothing. Construct it before forking the ranks. One per process; not thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>

#include "core/file_descriptor.h"

namespace shmccl::launcher {

class OrphanReaper {
 public:
  // `subreaper`: make this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER) and reap
  // whatever its pid.
  explicit OrphanReaper(bool subreaper = false);
  OrphanReaper(const OrphanReaper&) = delete;
  OrphanReaper& operator=(const OrphanReaper&) = delete;

  bool active() const { return fd_.valid(); }
  // Readable when a child ended (poll it, then call reap()); -1 when not active.
  int fd() const { return fd_.get(); }
  // Consumes the pending SIGCHLDs and waits for every zombie child for which is_rank(pid) is
  // false. Returns how many it reaped.
  int reap(const std::function<bool(pid_t)>& is_rank);

 private:
  FileDescriptor fd_;
};

}  // namespace shmccl::launcher
