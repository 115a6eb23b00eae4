// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Process groups and collectives over shared memory, spelled like torch.distributed and
// torch_npu.distributed. Every collective takes an optional group (nullptr: the default group)
// and async_op (default false), and returns a Work. A synchronous call returns when the
// collective is done; an asynchronous one returns at once. Collectives on one group run in call
// order, after the work already queued on the caller's current stream. Threads may call
// collectives on one group at once: the calls take turns, in the order they were numbered; as
// with torch.distributed, every rank must then still call the same collectives in the same order
// (calls that differ between ranks are a mismatch error on every rank). Argument errors throw
// shmccl::InvalidArgument before any peer waits; a dead, late or disagreeing peer throws
// shmccl::RemoteError / TimeoutError on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shmccl/reduce_op.hpp"
#include "shmccl/store.hpp"
#include "shmccl/tensor.hpp"
#include "shmccl/work.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

class ProcessGroup;
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

namespace detail {
class GroupState;
}  // namespace detail

// How init_process_group finds its peers. Unset fields come from the environment: RANK /
// WORLD_SIZE (or OMPI_COMM_WORLD_RANK / _SIZE, or PMI_RANK / PMI_SIZE), the job from
// SHMCCL_JOB_ID (or MASTER_ADDR:MASTER_PORT as torch's env://, or the MPI job), the timeout from
// SHMCCL_TIMEOUT (default 10 minutes). torchrun's TORCHELASTIC_RUN_ID is not used: its default,
// "none", is the same for every job. The shared-memory namespace of shmrun's ranks
// (SHMCCL_NAMESPACE) applies to the job shmrun started, not to a job_id given here that differs.
struct InitOptions {
  int rank = -1;
  int world_size = -1;
  std::string job_id;
  std::chrono::milliseconds timeout{-1};
  // The store the ranks meet through (torch hands its backends a c10d Store). Unset: the job's
  // own store in /dev/shm, found by the job id. Set: every rank passes a store of the same job,
  // and the job id is optional (the ranks then agree on their shared-memory names through it).
  std::shared_ptr<Store> store;
};

// Once per process until destroy_process_group(): a second call throws. InitOptions::timeout
// (or SHMCCL_TIMEOUT) must be > 0.
void init_process_group(const InitOptions& options = {});
bool is_initialized();
// Destroys the default group and every group created from it (collectives still in flight
// finish first): a ProcessGroupPtr still held afterwards is shut down (ProcessGroup::shutdown).
// init_process_group may be called again afterwards. A collective this rank finished before its
// peers arrived (a broadcast's root, a reduce-scatter rank that receives nothing) is compared with
// theirs on the way out, as a later collective would have: this waits for them to call it (the
// group's timeout at most), and a mismatch, or a peer that never calls it, is thrown
// (RemoteError, TimeoutError) once every group is down.
void destroy_process_group();  // does nothing without init_process_group
// As torch's destroy_process_group(group): one group only, shut down (ProcessGroup::shutdown,
// with the mismatch check above) and forgotten; the default group (or nullptr) destroys every
// group, as above; a group this rank is not a member of: nothing.
void destroy_process_group(const ProcessGroupPtr& group);
// Before init_process_group (or after destroy_process_group) these throw, unless given a group.
ProcessGroupPtr default_group();
int get_rank(const ProcessGroupPtr& group = nullptr);
int get_world_size(const ProcessGroupPtr& group = nullptr);
// A sub-group of the default group's ranks (all ranks of the default group must call it, in the
// same order, with the same list). As torch's new_group, the list is sorted: group rank i is the
// i-th smallest default-group rank in it. timeout: the default group's when negative (torch
// takes its backend's default instead: pass SHMCCL_TIMEOUT's value for that); 0 is refused. Ranks
// outside `ranks` get a group they are not a member of, as torch's NON_GROUP_MEMBER (not nullptr,
// which means the default group): is_member() is false, rank() and size() are -1 (torch's get_rank
// and get_world_size), and its collectives do nothing, with a warning, and return a completed Work.
// No ranks (new_group(), torch's ranks=None) means every rank: a group of its own, with its own
// control block and comm_name().
ProcessGroupPtr new_group(const std::vector<int>& ranks = {},
                          std::chrono::milliseconds timeout = std::chrono::milliseconds{-1});
// The group whose comm_name() is `name`; InvalidArgument when there is none.
ProcessGroupPtr group_from_comm_name(const std::string& name);

class ProcessGroup {
 public:
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  bool is_member() const { return state_ != nullptr; }
  int rank() const;  // -1 on a rank that is not a member
  int size() const;  // -1 on a rank that is not a member
  // A process-unique name (the hcomm of torch_npu operators); group_from_comm_name resolves it.
  const std::string& comm_name() const;
  // The ranks of the default group that form this group, in group-rank order (on non-members
  // too).
  const std::vector<int>& global_ranks() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);

  // output (sum(split_sizes), ...) on every rank gets rank r's input at rows
  // [sum(split_sizes[:r]), +split_sizes[r]). Empty split_sizes: an even split of dim 0.
  std::shared_ptr<Work> all_gather_into_tensor_uneven(
      Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes = {},
      bool async_op = false);
  // Rank r's output = op over all ranks of their input rows for r.
  std::shared_ptr<Work> reduce_scatter_tensor_uneven(
      Tensor& output, const Tensor& input, const std::vector<int64_t>& input_split_sizes = {},
      ReduceOp op = ReduceOp::SUM, bool async_op = false);
  // Even forms. The all-gather output holds N times the input's elements, rank r's input as
  // its r-th contiguous block: the concatenation (N*d0, ...), the stack (N, d0, ...), or any
  // other shape of that size, as torch and oneflow accept.
  std::shared_ptr<Work> all_gather_into_tensor(Tensor& output, const Tensor& input,
                                               bool async_op = false);
  std::shared_ptr<Work> reduce_scatter_tensor(Tensor& output, const Tensor& input,
                                              ReduceOp op = ReduceOp::SUM, bool async_op = false);
  // Into a list of per-rank tensors, whose sizes and shapes may differ between ranks: rank r's
  // input lands in outputs[r], element by element (outputs[rank] has the input's size).
  std::shared_ptr<Work> all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                   bool async_op = false);
  std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM,
                                   bool async_op = false);
  // src is a rank of this group (as c10d's ProcessGroup::broadcast's rootRank); the free
  // function's src is a rank of the default group (as torch.distributed.broadcast's).
  std::shared_ptr<Work> broadcast(Tensor& tensor, int src, bool async_op = false);
  // Has no tensors: it comes after the work queued on the current stream of the calling thread's
  // current device (as torch's barrier, an all-reduce of a tensor there), when this process uses
  // that device; a synchronous barrier returns once that work and the barrier are done.
  std::shared_ptr<Work> barrier(bool async_op = false);

  // Fails every pending collective of this group on every rank, promptly.
  void abort(const std::string& reason = "aborted by the user");
  // Leaves the group for good, as torch's ProcessGroup.shutdown(): the collectives already queued
  // run first, then peers that wait for this rank in the group fail at once, naming it, and this
  // rank's later collectives on it throw shmccl::Error. rank(), size() and comm_name() still
  // answer. destroy_process_group() shuts every group down; the destructor too. Must not race with
  // a collective of this group on another thread. Never throws.
  void shutdown() noexcept;

  // For the library's layers.
  detail::GroupState& state() { return *state_; }  // members only
  // What a rank outside `global_ranks` gets from new_group.
  static std::shared_ptr<ProcessGroup> non_member(std::vector<int> global_ranks);
  explicit ProcessGroup(std::unique_ptr<detail::GroupState> state);

 private:
  // A collective called on a non-member: nothing to do.
  std::shared_ptr<Work> skip(const char* op);

  std::unique_ptr<detail::GroupState> state_;  // null on a non-member
  std::vector<int> non_member_ranks_;          // global_ranks() of a non-member
  std::atomic<bool> warned_not_member_{false};
};

// Free-function spellings (group nullptr: the default group).
std::shared_ptr<Work> all_gather_into_tensor_uneven(
    Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes = {},
    const ProcessGroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> reduce_scatter_tensor_uneven(
    Tensor& output, const Tensor& input, const std::vector<int64_t>& input_split_sizes = {},
    ReduceOp op = ReduceOp::SUM, const ProcessGroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> all_gather_into_tensor(Tensor& output, const Tensor& input,
                                             const ProcessGroupPtr& group = nullptr,
                                             bool async_op = false);
std::shared_ptr<Work> reduce_scatter_tensor(Tensor& output, const Tensor& input,
                                            ReduceOp op = ReduceOp::SUM,
                                            const ProcessGroupPtr& group = nullptr,
                                            bool async_op = false);
std::shared_ptr<Work> all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                 const ProcessGroupPtr& group = nullptr, bool async_op = false);
std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM,
                                 const ProcessGroupPtr& group = nullptr, bool async_op = false);
// src is a rank of the default group, which must be a member of `group` (as in torch).
std::shared_ptr<Work> broadcast(Tensor& tensor, int src, const ProcessGroupPtr& group = nullptr,
                                bool async_op = false);
std::shared_ptr<Work> barrier(const ProcessGroupPtr& group = nullptr, bool async_op = false);

}  // namespace shmccl

#pragma GCC visibility pop
