// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// init_process_group, new_group, destroy_process_group and the lookup of groups by name.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "collectives/fault_injection.h"
#include "collectives/group_state.h"
#include "collectives/registry.h"
#include "collectives/rendezvous.h"
#include "core/check.h"
#include "core/error_file.h"
#include "core/logging.h"

namespace shmccl {
namespace {

struct Registry {
  std::mutex mutex;
  std::unique_ptr<collectives::Rendezvous> rendezvous;
  ProcessGroupPtr default_group;
  std::vector<ProcessGroupPtr> groups;  // every live group, the default one first
  int generation = 0;
  int subgroups = 0;  // new_group calls in this generation (all ranks call it equally)
};

// The default group for group_ref(): set while the registry holds it.
std::atomic<ProcessGroup*> g_default_group{nullptr};

Registry& registry() {
  static auto* instance = new Registry();  // never destroyed: groups may outlive static teardown
  return *instance;
}

std::string make_comm_name(const collectives::JobInfo& job, int generation,
                           const std::string& key) {
  return detail::concat("shmccl:", job.ns, ":", generation, ":", key, ":", job.rank);
}

}  // namespace

void init_process_group(const InitOptions& options) {
  // Under a launcher, an exception that escapes main is written to the rank's error file.
  elastic::detail::install_terminate_recorder();
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  SHMCCL_CHECK_ARG(state.default_group == nullptr,
                   "init_process_group: the default process group is already initialized; call "
                   "destroy_process_group() first");
  collectives::JobInfo resolved = collectives::resolve_job(options);
  log::set_rank(resolved.rank);
  collectives::fault::configure();
  auto rendezvous = std::make_unique<collectives::Rendezvous>(std::move(resolved));
  // The rendezvous completes the job's names (with a plugged-in store, the namespace comes
  // from rank 0 through it).
  const collectives::JobInfo job = rendezvous->job();
  std::vector<int> everyone(static_cast<size_t>(job.world_size));
  for (int r = 0; r < job.world_size; ++r)
    everyone[static_cast<size_t>(r)] = r;
  std::unique_ptr<transport::GroupTransport> transport;
  try {
    transport = rendezvous->connect_group("world", everyone, job.timeout);
  } catch (...) {
    rendezvous->abandon();
    throw;
  }
  rendezvous->world_complete();
  ++state.generation;
  state.subgroups = 0;
  auto group = std::make_shared<ProcessGroup>(std::make_unique<detail::GroupState>(
      std::move(transport), everyone, make_comm_name(job, state.generation, "world"), job.timeout));
  state.rendezvous = std::move(rendezvous);
  state.default_group = group;
  g_default_group.store(group.get(), std::memory_order_release);
  state.groups.push_back(group);
  SHMCCL_INFO(kColl, "initialized: rank ", job.rank, " of ", job.world_size, ", job '", job.job_id,
              "', namespace ", job.ns);
}

bool is_initialized() {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.default_group != nullptr;
}

void destroy_process_group() {
  Registry& state = registry();
  std::vector<ProcessGroupPtr> groups;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    groups.swap(state.groups);
    g_default_group.store(nullptr, std::memory_order_release);
    state.default_group.reset();
    state.rendezvous.reset();
  }
  // Groups the caller still holds go too (as torch's destroy_process_group shuts every backend
  // down): their peers must not wait for this rank, and its exit must read as a departure, not
  // a death. Each drains the collectives still queued first; sub-groups before the default one.
  // A mismatch found on the way out is thrown once every group is down (docs/errors.md).
  std::exception_ptr first_error;
  for (auto group = groups.rbegin(); group != groups.rend(); ++group) {
    std::exception_ptr error = collectives::shut_down(**group);
    if (!first_error) first_error = std::move(error);
  }
  groups.clear();
  if (first_error) std::rethrow_exception(first_error);
}

void destroy_process_group(const ProcessGroupPtr& group) {
  Registry& state = registry();
  {
    std::unique_lock<std::mutex> lock(state.mutex);
    if (group == nullptr || group == state.default_group) {
      lock.unlock();
      return destroy_process_group();
    }
    if (!group->is_member()) return;  // torch's NON_GROUP_MEMBER: nothing of it here
    std::erase(state.groups, group);
  }
  // As ProcessGroup::shutdown(), but a mismatch found on the way out is thrown, as the
  // destruction of every group throws it.
  if (std::exception_ptr error = collectives::shut_down(*group)) std::rethrow_exception(error);
}

ProcessGroupPtr default_group() {
  return collectives::require_default_group();
}

int get_rank(const ProcessGroupPtr& group) {
  return collectives::resolve_group(group)->rank();
}

int get_world_size(const ProcessGroupPtr& group) {
  return collectives::resolve_group(group)->size();
}

ProcessGroupPtr new_group(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  SHMCCL_CHECK_ARG(state.default_group != nullptr, "new_group: call init_process_group() first");
  SHMCCL_CHECK_ARG(!state.default_group->state().is_shut_down(),
                   "new_group: the default process group was shut down; call "
                   "destroy_process_group() and init_process_group() first");
  const int world_size = state.default_group->size();
  std::vector<int> members = ranks;
  if (members.empty()) {  // torch's ranks=None
    for (int r = 0; r < world_size; ++r)
      members.push_back(r);
  }
  std::sort(members.begin(), members.end());
  SHMCCL_CHECK_ARG(std::adjacent_find(members.begin(), members.end()) == members.end(),
                   "new_group: duplicate ranks in ", ranks);
  SHMCCL_CHECK_ARG(members.front() >= 0 && members.back() < world_size, "new_group: ranks ", ranks,
                   " are out of range for world size ", world_size);
  SHMCCL_CHECK_ARG(timeout.count() != 0, "new_group: the timeout must be > 0 ms, got 0 ms");
  const std::string key = "sub" + std::to_string(++state.subgroups);
  const collectives::JobInfo& job = state.rendezvous->job();
  if (std::find(members.begin(), members.end(), job.rank) == members.end()) {
    return ProcessGroup::non_member(std::move(members));
  }
  const auto group_timeout = timeout.count() >= 0 ? timeout : state.default_group->timeout();
  const transport::GroupTransport& world = state.default_group->state().transport();
  auto transport =
      state.rendezvous->connect_group(key, members, group_timeout, world.oversubscribed(), &world);
  auto group = std::make_shared<ProcessGroup>(std::make_unique<detail::GroupState>(
      std::move(transport), members, make_comm_name(job, state.generation, key), group_timeout));
  state.groups.push_back(group);
  return group;
}

ProcessGroupPtr group_from_comm_name(const std::string& name) {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (const ProcessGroupPtr& group : state.groups) {
    if (group->comm_name() == name && !group->state().is_shut_down()) return group;
  }
  throw InvalidArgument(detail::concat("unknown communicator name '", name,
                                       "': no live process group of this process has it"));
}

namespace collectives {

ProcessGroupPtr require_default_group() {
  Registry& state = registry();
  std::lock_guard<std::mutex> lock(state.mutex);
  SHMCCL_CHECK_ARG(state.default_group != nullptr,
                   "the default process group is not initialized: call "
                   "shmccl::init_process_group() first");
  return state.default_group;
}

ProcessGroupPtr resolve_group(const ProcessGroupPtr& group) {
  return group ? group : require_default_group();
}

ProcessGroup& group_ref(const ProcessGroupPtr& group) {
  if (group) return *group;
  ProcessGroup* fallback = g_default_group.load(std::memory_order_acquire);
  if (fallback != nullptr) [[likely]]
    return *fallback;
  return *require_default_group();  // throws the "not initialized" error
}

}  // namespace collectives
}  // namespace shmccl
