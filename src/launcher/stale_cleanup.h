// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// `shmrun --cleanup`: removes the shared memory of jobs whose processes are all gone. A
// namespace (see job_namespace.h) is stale when its lock file is missing, or when
// flock(LOCK_EX | LOCK_NB) on it succeeds: every live rank and its shmrun hold LOCK_SH. The
// exclusive lock is kept while the namespace's entries are removed, the lock file last. A
// namespace whose lock is held is left alone.
#pragma once

#include <string>
#include <vector>

namespace shmccl::launcher {

struct CleanupReport {
  std::vector<std::string> removed;  // entry names, in removal order
  std::vector<std::string> live;     // namespaces kept because their lock is held
  std::vector<std::string> errors;   // what could not be examined or removed, and why
};

// Considers the given namespaces, or every shmccl namespace in /dev/shm when `only` is empty;
// then also removes lock temporaries (segment_names.h) older than a minute that nobody holds.
// `launched_only`: only namespaces with a lock file, which shmrun makes (a job whose ranks were
// started by hand or by mpirun has none, and its being live cannot be told): what a shmrun
// removes by itself before each job, the leftovers of a shmrun killed by SIGKILL.
CleanupReport cleanup_stale_namespaces(const std::vector<std::string>& only,
                                       bool launched_only = false);

}  // namespace shmccl::launcher
