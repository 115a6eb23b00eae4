// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/rendezvous.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>

#include "collectives/fault_injection.h"
#include "core/check.h"
#include "core/config.h"
#include "core/deadline.h"
#include "core/logging.h"
#include "transport/peer_monitor.h"
#include "transport/segment_names.h"
#include "transport/shm_segment.h"
#include "transport/shm_store.h"

namespace shmccl::collectives {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int env_int(const char* name) {
  const char* value = env(name);
  if (value == nullptr) return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  SHMCCL_CHECK_ARG(*end == '\0' && parsed >= 0 && parsed < (1 << 20), "environment variable ", name,
                   "=", value, " is not a valid non-negative integer");
  return static_cast<int>(parsed);
}

int first_env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const int value = env_int(name);
    if (value >= 0) return value;
  }
  return -1;
}

// The init_process_group calls of this process in one job, and those that succeeded: every rank
// of a job makes its default groups together, so a count names one "generation" of groups in the
// job's store. A store that outlives a failed attempt (a plugged-in one, or shmrun's) keeps that
// attempt's keys, so each attempt takes a new generation there. The job's own store is removed
// after a failed attempt and made afresh: there a retry takes the same generation as the failed
// attempt, so it meets the ranks that were late for it. Counted per job (its namespace, or its
// plugged-in store): a process that outlives its job meets new workers, at their first
// generation, in the next.
struct Generations {
  int inits = 0;
  int completed_inits = 0;
  std::weak_ptr<transport::Store> store;  // a plugged-in store: the same object, not its address
};
std::map<std::string, Generations> g_generations;  // by generations_key()

std::string generations_key(const JobInfo& job) {
  if (job.store != nullptr) {
    return detail::concat("store:", static_cast<const void*>(job.store.get()));
  }
  return "namespace:" + job.ns;
}

Generations& generations_of(const JobInfo& job) {
  Generations& generations = g_generations[generations_key(job)];
  if (job.store != nullptr && generations.store.lock() != job.store) {
    generations = Generations{0, 0, job.store};  // a new store where an old one was
  }
  return generations;
}

}  // namespace

JobInfo resolve_job(const InitOptions& options) {
  JobInfo job;
  job.rank = options.rank >= 0 ? options.rank
                               : first_env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  job.world_size = options.world_size >= 0
                       ? options.world_size
                       : first_env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  SHMCCL_CHECK_ARG(job.rank >= 0,
                   "init_process_group: no rank: pass InitOptions::rank or set "
                   "RANK (shmrun and torchrun do)");
  SHMCCL_CHECK_ARG(job.world_size != 0,
                   "init_process_group: world size 0: a group needs at least 1 rank");
  SHMCCL_CHECK_ARG(job.world_size >= 1,
                   "init_process_group: no world size: pass "
                   "InitOptions::world_size or set WORLD_SIZE");
  SHMCCL_CHECK_ARG(job.world_size <= transport::kMaxRanks, "init_process_group: world size ",
                   job.world_size, " exceeds the maximum of ", transport::kMaxRanks,
                   " ranks on one host");
  SHMCCL_CHECK_ARG(job.rank < job.world_size, "init_process_group: rank ", job.rank,
                   " is out of range for world size ", job.world_size);

  if (!options.job_id.empty()) {
    job.job_id = options.job_id;
  } else if (const char* id = env("SHMCCL_JOB_ID")) {
    job.job_id = id;
  } else if (const char* addr = env("MASTER_ADDR"); addr && env("MASTER_PORT")) {
    job.job_id = std::string("torch-") + addr + "-" + env("MASTER_PORT");  // as env:// does
  } else if (const char* ompi = env("OMPI_MCA_ess_base_jobid")) {
    job.job_id = std::string("ompi-") + ompi;
  } else if (env("PMI_RANK") || env("OMPI_COMM_WORLD_RANK")) {
    // MPI launchers start a host's ranks from one proxy process: its pid identifies the job.
    job.job_id = "mpi-" + std::to_string(getppid());
  } else if (options.store == nullptr) {
    throw InvalidArgument(
        "init_process_group: no job id: pass InitOptions::job_id or set SHMCCL_JOB_ID (or "
        "MASTER_ADDR and MASTER_PORT), the same on every rank; shmrun sets it");
  }
  // The launcher's namespace is its job's: a program that starts jobs of its own under shmrun
  // (explicit job ids) must not put them all in one namespace.
  const char* launcher_job = env("SHMCCL_JOB_ID");
  const bool launchers_job =
      options.job_id.empty() || (launcher_job != nullptr && options.job_id == launcher_job);
  if (const char* ns = env("SHMCCL_NAMESPACE"); ns != nullptr && launchers_job) {
    job.ns = transport::sanitize_name_component(ns);
    job.launcher_owns_namespace = env("SHMCCL_LOCK_FD") != nullptr;
  } else if (!job.job_id.empty()) {
    // 'j' and at most 63 more: a namespace has at most 64 characters (segment_names.h).
    job.ns = "j" + transport::sanitize_name_component(job.job_id, 63);
  }  // else the ranks agree on one through the plugged-in store
  job.store = options.store;
  if (options.timeout.count() >= 0) {
    job.timeout = options.timeout;
    SHMCCL_CHECK_ARG(job.timeout.count() > 0,
                     "init_process_group: the timeout must be > 0 ms, got 0 ms");
  } else {
    job.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(config::get_seconds("SHMCCL_TIMEOUT") * 1000.0));
    SHMCCL_CHECK_ARG(job.timeout.count() > 0,
                     "init_process_group: SHMCCL_TIMEOUT=", config::get_string("SHMCCL_TIMEOUT"),
                     ": the timeout must be > 0 ms");
  }
  return job;
}

Rendezvous::Rendezvous(JobInfo job) : job_(std::move(job)) {
  Generations& generations = generations_of(job_);
  ++generations.inits;
  const bool store_outlives_attempt = job_.store != nullptr || job_.launcher_owns_namespace;
  prefix_ =
      "g" +
      std::to_string(store_outlives_attempt ? generations.inits : generations.completed_inits + 1) +
      "/";
  try {
    if (job_.store != nullptr) {
      store_ = job_.store;
      claim_rank();
      if (job_.ns.empty()) agree_on_namespace();
      open_lock();
    } else {
      open_lock();
      store_ = transport::ShmStore::open_or_create(job_.ns, job_.timeout);
      claim_rank();
    }
  } catch (...) {
    // A rank that cannot join leaves nothing behind (a full /dev/shm, a rank taken twice...).
    if (lock_fd_ >= 0) {
      if (store_ == nullptr && created_lock_) unlink_lock();
      ::close(lock_fd_);
    }
    throw;
  }
}

void Rendezvous::open_lock() {
  if (job_.launcher_owns_namespace) return;
  const std::string path = "/dev/shm/shmccl." + job_.ns + ".lock";
  // Locked before it has its public name, as shmrun makes its own: a cleaner (`shmrun --cleanup`,
  // or any starting shmrun) removes a namespace whose lock file nobody holds, so an unlocked
  // moment between creating and locking could cost a starting job its segments.
  std::string temporary = std::string("/dev/shm/") + transport::kLockTemporaryPrefix + "XXXXXX";
  const int made = ::mkostemp(temporary.data(), O_CLOEXEC);  // mode 0600
  if (made >= 0) {
    ::flock(made, LOCK_SH);
    const bool published = ::link(temporary.c_str(), path.c_str()) == 0;
    ::unlink(temporary.c_str());
    if (published) {
      lock_fd_ = made;
      created_lock_ = true;
      return;
    }
    ::close(made);
  }
  // Another rank published it first (locked), or no temporary could be made.
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ >= 0) {
    created_lock_ = true;
    ::flock(lock_fd_, LOCK_SH);
  }
}

pid_t Rendezvous::claimed_pid(int rank) {
  pid_t& known = claimed_pids_[static_cast<size_t>(rank)];
  if (known > 0) return known;
  const std::string key = prefix_ + "pid/" + std::to_string(rank);
  if (!store_->check({key})) return 0;
  // Another program's store may hold anything: only a positive pid counts.
  const std::string value = store_->get(key);
  char* end = nullptr;
  const long pid = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || pid <= 0 || pid > (1L << 30)) return 0;
  known = static_cast<pid_t>(pid);
  return known;
}

void Rendezvous::claim_rank() {
  const int64_t claims = store_->add(prefix_ + "rank/" + std::to_string(job_.rank), 1);
  if (claims != 1) {
    throw InvalidArgument(detail::concat("init_process_group: rank ", job_.rank, " of job '",
                                         job_.job_id.empty() ? "(given store)" : job_.job_id,
                                         "' is already taken by another process: give each "
                                         "process its own RANK"));
  }
  // For the others' waits: a rank that exits before it joins is named at once, not at the
  // timeout.
  store_->set(prefix_ + "pid/" + std::to_string(job_.rank), std::to_string(::getpid()));
}

void Rendezvous::agree_on_namespace() {
  const std::string key = prefix_ + "namespace";
  if (job_.rank == 0) {
    job_.ns = "s" + transport::random_token();
    store_->set(key, job_.ns);
  } else {
    try {
      store_->wait({key}, job_.timeout);
    } catch (const TimeoutError&) {
      throw TimeoutError(detail::concat(
          "init: timed out after ", job_.timeout.count(),
          " ms waiting for rank 0 to join the group (ranks that meet through a given store take "
          "the job's shared-memory names from rank 0)"));
    }
    // Another program's store: whatever it holds must make a valid name.
    job_.ns = transport::sanitize_name_component(store_->get(key));
  }
  job_.job_id = "store-" + job_.ns;  // what messages call the job
}

Rendezvous::~Rendezvous() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::unique_ptr<transport::GroupTransport> Rendezvous::connect_group(
    const std::string& key, const std::vector<int>& global_ranks, std::chrono::milliseconds timeout,
    bool job_oversubscribed, const transport::GroupTransport* world) {
  const auto deadline = detail::deadline_after(timeout);
  const auto position = std::find(global_ranks.begin(), global_ranks.end(), job_.rank);
  SHMCCL_CHECK(position != global_ranks.end(), "rank ", job_.rank, " is not in group ", key);
  const int group_rank = static_cast<int>(position - global_ranks.begin());
  const int group_size = static_cast<int>(global_ranks.size());
  const std::string name_key = group_key(key, "control");
  const std::string creating_key = group_key(key, "creating");
  const std::string failed_key = group_key(key, "failed");  // why the group will not come together
  // Why a rank of the group will never join it ("" while it may).
  std::function<std::string(int)> exited;
  if (world != nullptr) {
    exited = [world, &key](int rank) -> std::string {
      if (!world->peer_exited(rank)) return "";
      return detail::concat("rank ", rank, " (pid ", world->peer_pid(rank),
                            ") exited before it joined group ", key);
    };
  } else {
    // The default group: the ranks that claimed their rank left their pid in the store.
    exited = [this, &key,
              last_looks = std::vector<std::chrono::steady_clock::time_point>(
                  transport::kMaxRanks)](int rank) mutable -> std::string {
      // Called in the waits' polls: a look costs a store read and a pidfd, so at most one a
      // millisecond for each rank (the waits look every 10-20 ms anyway).
      const auto now = std::chrono::steady_clock::now();
      auto& last_look = last_looks[static_cast<size_t>(rank)];
      if (now - last_look < std::chrono::milliseconds(1)) return "";
      last_look = now;
      const pid_t pid = claimed_pid(rank);
      if (pid <= 0 || transport::PeerMonitor::is_alive(pid)) return "";
      return detail::concat("rank ", rank, " (pid ", pid, ") exited before it joined group ", key);
    };
  }
  const uint64_t creation = groups_connected_ + 1;
  fault::point(fault::Point::kJoinsGroup, job_.rank, creation);
  std::unique_ptr<transport::GroupTransport> transport;
  std::string name;
  if (group_rank == 0) {
    name = transport::segment_name(job_.ns, prefix_.substr(0, prefix_.size() - 1) + "." + key +
                                                "." + transport::random_token());
    // The name first: should this process die before it publishes the block, the members remove
    // the block instead of leaving it in /dev/shm for good.
    store_->set(creating_key, name);
    try {
      transport = transport::GroupTransport::create(name, group_rank, group_size);
    } catch (const Error& error) {
      // Tell the other members at once (they would wait for the timeout otherwise): a value that
      // is not a segment name, "!<kind>:<message>", which they rethrow.
      const bool full = dynamic_cast<const OutOfMemoryError*>(&error) != nullptr;
      const std::string what = error.what();
      store_->set(name_key, (full ? "!oom:" : "!error:") +
                                what.substr(0, transport::ShmStore::kMaxValueSize - 16));
      throw;
    }
    fault::point(fault::Point::kPublishesGroup, job_.rank, creation);
    store_->set(name_key, name);
  } else {
    name = wait_for_control_name(key, global_ranks[0], deadline, timeout, exited);
    if (!name.empty() && name[0] == '!') {
      const size_t colon = name.find(':');
      const std::string message = detail::concat(
          "rank ", global_ranks[0], " could not create group ", key,
          "'s control block: ", name.substr(colon == std::string::npos ? 1 : colon + 1));
      if (name.rfind("!oom:", 0) == 0) throw OutOfMemoryError(message);
      throw RemoteError(message);
    }
    try {
      transport = transport::GroupTransport::open(name, group_rank, group_size);
    } catch (const SystemError& error) {
      if (error.error_code() != ENOENT) throw;
      // A member that gave up on the group removed the name, and left its reason first.
      throw RemoteError(
          detail::concat("group ", key, " failed before rank ", job_.rank, " joined it: ",
                         store_->check({failed_key})
                             ? store_->get(failed_key)
                             : detail::concat("its control block is gone (", error.what(), ")")));
    }
  }
  groups_connected_ = creation;
  fault::point(fault::Point::kRendezvous, job_.rank, creation);
  try {
    const std::function<std::string(int)> lost = [&](int member) {
      const std::string why = exited(global_ranks[static_cast<size_t>(member)]);
      // A member that exited because the group had failed before it joined is not the news:
      // the first failure, which it read from the store, is.
      if (!why.empty() && store_->check({failed_key})) return store_->get(failed_key);
      return why;
    };
    transport->wait_for_all_attached(deadline, job_oversubscribed,
                                     static_cast<int>(global_ranks.size()) == job_.world_size,
                                     lost);
  } catch (const std::exception& error) {
    // The group will not come together: its block's name goes now, whichever member sees that
    // first (its first rank may be the one that exited), and the reason stays for a member that
    // finds the name gone.
    try {
      if (!store_->check({failed_key})) store_->set(failed_key, error.what());
    } catch (const std::exception&) {
    }
    transport::ShmSegment::unlink_name(name);
    throw;
  }
  // Every member read the name (it attached): the keys go, or a program that makes groups in a
  // loop would fill the store (1024 keys in ours) and its next new_group would fail.
  if (group_rank == 0) {
    try {
      store_->delete_key(name_key);
      store_->delete_key(creating_key);
    } catch (const std::exception& error) {
      SHMCCL_INFO(kColl, "group ", key, ": could not delete store key ", name_key, ": ",
                  error.what());
    }
  }
  return transport;
}

std::string Rendezvous::wait_for_control_name(const std::string& key, int first_rank,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::chrono::milliseconds timeout,
                                              const std::function<std::string(int)>& exited) {
  const std::string name_key = group_key(key, "control");
  // The store knows no processes: a member looks at its first rank's process between short waits.
  constexpr std::chrono::milliseconds kSlice{20};
  while (true) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store_->wait({name_key}, std::clamp(left, std::chrono::milliseconds(1), kSlice));
      return store_->get(name_key);
    } catch (const TimeoutError&) {
      if (left <= kSlice) {
        throw TimeoutError(detail::concat("init: rank ", first_rank, " (the first rank of group ",
                                          key, ") did not arrive within ", timeout.count(),
                                          " ms; job '", job_.job_id, "'"));
      }
    }
    const std::string why = exited(first_rank);
    if (why.empty()) continue;
    // It cannot publish any more: what it published before it exited is all there is.
    if (store_->check({name_key})) return store_->get(name_key);
    const std::string creating_key = group_key(key, "creating");
    if (store_->check({creating_key}))
      transport::ShmSegment::unlink_name(store_->get(creating_key));
    throw RemoteError(why + " (its first rank, which makes its control block)");
  }
}

void Rendezvous::abandon() {
  if (job_.launcher_owns_namespace) return;
  if (auto* shm_store = dynamic_cast<transport::ShmStore*>(store_.get())) shm_store->unlink();
  if (created_lock_) unlink_lock();
}

void Rendezvous::world_complete() {
  ++generations_of(job_).completed_inits;
  // Every rank attached to the default group's control block, so every rank has the store mapped
  // and the lock open: the names can go now. Every rank removes them (whichever comes first), so
  // a rank that dies right after attaching leaks nothing; each removal checks that the name still
  // refers to this job's object (a fast rank may already be in its next init, with new ones).
  if (auto* shm_store = dynamic_cast<transport::ShmStore*>(store_.get())) shm_store->unlink();
  if (created_lock_) unlink_lock();
}

void Rendezvous::unlink_lock() {
  const std::string path = "/dev/shm/shmccl." + job_.ns + ".lock";
  struct stat ours {
  }, current{};
  if (::fstat(lock_fd_, &ours) == 0 && ::stat(path.c_str(), &current) == 0 &&
      ours.st_dev == current.st_dev && ours.st_ino == current.st_ino) {
    ::unlink(path.c_str());
  }
}

}  // namespace shmccl::collectives
