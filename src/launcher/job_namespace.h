// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// JobNamespace: the name under which one attempt of a job keeps its shared memory. Every object
// of the job is /dev/shm/shmccl.<namespace>.<suffix>; <namespace> is the sanitized run id, '-',
// and 16 random hex digits, so two jobs (or two attempts of one) never collide. The first object
// is the lock, shmccl.<namespace>.lock: shmrun holds flock(LOCK_SH) on it for as long as the job
// runs and hands the same open file to every rank (SHMCCL_LOCK_FD), so the lock is free exactly
// when every process of the job is gone; `shmrun --cleanup` relies on that (stale_cleanup.h).
// The destructor removes every object of the namespace, the lock last. Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/file_descriptor.h"

namespace shmccl::launcher {

// Where POSIX shared memory lives on Linux.
inline constexpr const char* kShmDir = "/dev/shm";
inline constexpr const char* kShmPrefix = "shmccl.";

class JobNamespace {
 public:
  // Creates the lock file (appearing already locked: no window in which --cleanup could take it)
  // and holds LOCK_SH on it. Throws SystemError.
  static JobNamespace create(const std::string& run_id);

  JobNamespace(JobNamespace&&) noexcept = default;
  JobNamespace& operator=(JobNamespace&&) = delete;
  ~JobNamespace();

  const std::string& name() const { return name_; }
  // The locked lock file; CLOEXEC here, made inheritable only in the ranks (ChildProcess).
  int lock_fd() const { return lock_.get(); }

  // Unlinks every /dev/shm/shmccl.<namespace>.* entry, the lock last; returns their names.
  std::vector<std::string> remove_all();

 private:
  JobNamespace(std::string name, FileDescriptor lock)
      : name_(std::move(name)), lock_(std::move(lock)) {}

  std::string name_;
  FileDescriptor lock_;
};

// The library takes at most 64 characters of SHMCCL_NAMESPACE (transport/segment_names.h); the
// namespace is the run id, '-' and 16 hex digits, so the run id gets 47.
inline constexpr size_t kMaxRunIdChars = 64 - 1 - 16;

// A run id made safe for file names: [A-Za-z0-9_-] kept, anything else '_', at most
// kMaxRunIdChars characters; "none" if empty.
std::string sanitize_run_id(const std::string& run_id);
// `bytes` random bytes as lowercase hex, from getrandom(2).
std::string random_hex(size_t bytes);
// The names in kShmDir that start with `prefix`, sorted.
std::vector<std::string> list_shm_entries(const std::string& prefix);

}  // namespace shmccl::launcher
