// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// `shmrun --cleanup`: removes the shared memory of jobs whose processes are all gone. A
// namespace (see job_namespace.h) with a lock file is stale when flock(LOCK_EX | LOCK_NB) on it
// succeeds: every live rank and its shmrun hold LOCK_SH. The exclusive lock is kept while the
// namespace's entries are removed, the lock file last. A namespace whose lock is held is left
// alone. One without a lock file (ranks started by hand or by mpirun remove it once they have all
// joined) is live while a process maps or holds open one of its entries; when not named, it is
// also kept while one of its entries is younger than a minute (a group being made right now).
#pragma once

#include <string>
#include <vector>

namespace shmccl::launcher {

struct KeptNamespace {
  std::string ns;
  std::string why;  // "its job is still running (lock held)", ...
};

struct CleanupReport {
  std::vector<std::string> removed;  // entry names, in removal order
  std::vector<KeptNamespace> live;   // namespaces kept because their job may be running
  std::vector<std::string> errors;   // what could not be examined or removed, and why
};

// Considers the given namespaces, or every shmccl namespace in /dev/shm when `only` is empty;
// then also removes lock temporaries (segment_names.h) older than a minute that nobody holds.
// `launched_only`: only namespaces with a lock file, which shmrun makes (a job whose ranks were
// started by hand or by mpirun has none, and its being live cannot be told): what a shmrun
// removes by itself before each job, the leftovers of a shmrun killed by SIGKILL.
CleanupReport cleanup_stale_namespaces(const std::vector<std::string>& only,
                                       bool launched_only = false);

// Why a namespace without a lock file, made of `entries` (names in /dev/shm), may belong to a
// running job ("" if nothing says so): a process maps or holds open one of them (as far as /proc
// shows: not another user's processes, whose 0600 entries this user cannot remove anyway), or,
// unless the namespace was `named` on the command line, one is younger than a minute.
std::string lockless_namespace_sign_of_life(const std::vector<std::string>& entries, bool named);

}  // namespace shmccl::launcher
