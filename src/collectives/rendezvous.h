// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// How the ranks of a job find each other: the job's identity from options or the environment
// (shmrun, torchrun's env://, Open MPI, MPICH), a key-value store (the job's own in shared memory,
// named after the job, or one the caller plugs in), and the creation of each group's control
// block through it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shmccl/process_group.hpp"
#include "transport/group_transport.h"
#include "transport/store.h"

namespace shmccl::collectives {

struct JobInfo {
  int rank = -1;
  int world_size = -1;
  std::string job_id;
  std::string ns;  // shared-memory namespace: /dev/shm/shmccl.<ns>.*; empty: rank 0 draws it
  std::chrono::milliseconds timeout{0};
  bool launcher_owns_namespace = false;     // shmrun created the namespace and removes it
  std::shared_ptr<transport::Store> store;  // InitOptions::store; null: the job's ShmStore
};

// Fills unset options from the environment. InvalidArgument names what is missing or bad.
JobInfo resolve_job(const InitOptions& options);

// One init_process_group's connection to its job. Not thread-safe (used under the registry's
// lock).
class Rendezvous {
 public:
  explicit Rendezvous(JobInfo job);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const JobInfo& job() const { return job_; }
  // Creates the control block of a group (its first rank) or attaches to it (the others) and
  // waits for every member. `key` names the group within the job (same on every member);
  // `job_oversubscribed`: the default group's verdict, which a sub-group takes over. `world`: a
  // sub-group's default group, whose peer monitor tells when a member's process exits; the
  // wait then fails at once naming it, and the block's name goes (else it is the timeout).
  std::unique_ptr<transport::GroupTransport> connect_group(
      const std::string& key, const std::vector<int>& global_ranks,
      std::chrono::milliseconds timeout, bool job_oversubscribed = false,
      const transport::GroupTransport* world = nullptr);
  // After the default group is complete: removes the store's and the lock's names, so nothing
  // of the job is left in /dev/shm whatever happens next (every member keeps its mapping).
  void world_complete();
  // After a failed init: removes the store's and the lock's names (unless shmrun owns them), so a
  // job that never came together leaves nothing in /dev/shm. Late ranks make a fresh store.
  void abandon();

 private:
  // The job's lock: held shared by every live process of the job, so `shmrun --cleanup` can tell
  // a live namespace from a stale one.
  void open_lock();
  void unlink_lock();  // removes the lock's name if it still names our lock file
  // Claims this rank's key in the store: a second process with the same rank is an error.
  void claim_rank();
  // The store key of group `key`'s `what` ("control": its block's name; "creating": the name
  // its first rank is making; "failed": why it will not come together).
  std::string group_key(const std::string& key, const char* what) const {
    return prefix_ + key + "/" + what;
  }
  // The pid that rank `rank` left in the store as it claimed its rank; 0 while there is none.
  pid_t claimed_pid(int rank);
  // With a plugged-in store and no job id: rank 0 draws the namespace, the others read it.
  void agree_on_namespace();
  // The name of group `key`'s control block, once its first rank published it (or the error it
  // published instead). `exited(rank)` says why a global rank will never come ("" while it may).
  std::string wait_for_control_name(const std::string& key, int first_rank,
                                    std::chrono::steady_clock::time_point deadline,
                                    std::chrono::milliseconds timeout,
                                    const std::function<std::string(int)>& exited);

  JobInfo job_;
  std::shared_ptr<transport::Store> store_;
  int lock_fd_ = -1;
  bool created_lock_ = false;
  std::string prefix_;             // "g<generation>/": keys of this init within the job's store
  uint64_t groups_connected_ = 0;  // connect_group calls (the rendezvous fault point's sequence)
  std::vector<pid_t> claimed_pids_ = std::vector<pid_t>(transport::kMaxRanks, 0);
};

}  // namespace shmccl::collectives
