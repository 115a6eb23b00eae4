// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The collectives' one entry path: check the arguments (before any peer is made to wait), build
// the OpPlan, assign the sequence number, and run it in stream order, synchronously or not.
#include "shmccl/process_group.hpp"

#include <algorithm>
#include <numeric>

#include "collectives/async_work.h"
#include "collectives/executor.h"
#include "collectives/fault_injection.h"
#include "collectives/group_state.h"
#include "collectives/pull_broadcast.h"
#include "collectives/registry.h"
#include "collectives/unordered_ops.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/storage.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "shmccl/npu.hpp"

namespace shmccl {
namespace {

using collectives::OpPlan;
using transport::OpKind;

// (Tensor shapes cannot overflow: their bytes were allocated. The check is for shapes with a
// zero dimension, which allocate nothing whatever the others are.)
// The row's bytes must fit too: OpPlan::row_bytes() multiplies by the element size.
int64_t product_of_trailing(const std::vector<int64_t>& sizes, ScalarType dtype) {
  int64_t product = 1;
  for (size_t d = 1; d < sizes.size(); ++d) {
    SHMCCL_CHECK_ARG(!__builtin_mul_overflow(product, sizes[d], &product), "shape ", sizes,
                     ": its row has more than 2^63 elements");
  }
  int64_t bytes = 0;
  SHMCCL_CHECK_ARG(
      !__builtin_mul_overflow(product, static_cast<int64_t>(element_size(dtype)), &bytes), "shape ",
      sizes, ": its row of ", dtype, " has more than 2^63 bytes");
  return product;
}

// True when both shapes agree in every dimension but dim 0 (no allocation: a hot path).
bool same_trailing(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return a.size() == b.size() && (a.empty() || std::equal(a.begin() + 1, a.end(), b.begin() + 1));
}

[[noreturn, gnu::cold, gnu::noinline]] void throw_undefined(const char* op, const char* what) {
  throw InvalidArgument(detail::concat(op, ": the ", what, " tensor is undefined"));
}

// (The check inline, its message out of line: a call per check cost the small calls 13
// instructions each.)
void check_defined(const Tensor& tensor, const char* op, const char* what) {
  if (!tensor.defined()) [[unlikely]]
    throw_undefined(op, what);
}

// c10d's ops beyond MAX, by their RedOpType values: named in the error, since a value cast from
// torch's enum is how they reach shmccl.
[[noreturn]] void throw_invalid_reduce_op(const OpPlan& plan) {
  static constexpr const char* kC10dNames[] = {"BAND", "BOR", "BXOR", "PREMUL_SUM"};
  const int value = static_cast<int>(plan.reduce_op);
  const int beyond = value - static_cast<int>(ReduceOp::MAX) - 1;
  const std::string which =
      beyond >= 0 && beyond < 4
          ? detail::concat("c10d's ReduceOp.", kC10dNames[beyond], ", which shmccl does not have; ")
          : std::string();
  throw InvalidArgument(detail::concat(plan.name, ": invalid reduce op ", value, " (", which,
                                       "ReduceOp is SUM, PRODUCT, MIN, MAX or AVG)"));
}

// An op the enum does not name (a cast from an integer) must fail here, on its rank alone, not
// in the reduction kernel once every rank has arrived. Then torch's check and text: the average
// of booleans is no boolean.
void check_reduce_op(const OpPlan& plan) {
  if (static_cast<unsigned>(plan.reduce_op) > static_cast<unsigned>(ReduceOp::MAX)) [[unlikely]]
    throw_invalid_reduce_op(plan);
  SHMCCL_CHECK_ARG(!(plan.reduce_op == ReduceOp::AVG && plan.dtype == kBool), plan.name,
                   ": Cannot use ReduceOp.AVG with boolean inputs");
}

void check_same_type(const Tensor& output, const Tensor& input) {
  SHMCCL_CHECK_ARG(output.dtype() == input.dtype(),
                   "output tensor must have the same type as input tensor (output is ",
                   output.dtype(), ", input is ", input.dtype(), ")");
}

// Fills plan.splits from the user's split sizes, or evenly, with torch_npu's error texts.
// `tensor` names the tensor whose dim 0 is split ("output" or "input").
void set_splits(OpPlan& plan, const std::vector<int64_t>& split_sizes, const char* tensor,
                int64_t dim0, int size) {
  plan.num_splits = size;
  if (split_sizes.empty()) {
    SHMCCL_CHECK_ARG(dim0 % size == 0, plan.name,
                     ": Tensor's dim 0 does not divide equally across group size (", tensor,
                     " dim 0 is ", dim0, ", group size ", size, ")");
    for (int r = 0; r < size; ++r)
      plan.splits[static_cast<size_t>(r)] = dim0 / size;
    return;
  }
  SHMCCL_CHECK_ARG(static_cast<int>(split_sizes.size()) == size, plan.name,
                   ": Number of tensor splits not equal to group size (", split_sizes.size(),
                   " splits, group size ", size, ")");
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    SHMCCL_CHECK_ARG(split_sizes[static_cast<size_t>(r)] >= 0, plan.name,
                     ": split sizes must be non-negative, got ", split_sizes);
    plan.splits[static_cast<size_t>(r)] = split_sizes[static_cast<size_t>(r)];
    SHMCCL_CHECK_ARG(!__builtin_add_overflow(total, split_sizes[static_cast<size_t>(r)], &total),
                     plan.name, ": Split sizes doesn't match total dim 0 size (split sizes ",
                     split_sizes, " sum to more than 2^63, ", tensor, " dim 0 is ", dim0, ")");
  }
  SHMCCL_CHECK_ARG(total == dim0, plan.name,
                   ": Split sizes doesn't match total dim 0 size (split sizes ", split_sizes,
                   " sum to ", total, ", ", tensor, " dim 0 is ", dim0, ")");
}

[[noreturn, gnu::cold, gnu::noinline]] void throw_overlap(const char* op, const char* part_name,
                                                          const std::string& whole_name,
                                                          size_t part_begin, size_t part_end,
                                                          size_t whole_begin, size_t whole_end,
                                                          int64_t first_row, int64_t rows,
                                                          const char* unit) {
  const std::string allowed =
      rows < 0
          ? detail::concat("it must be apart from ", whole_name)
          : detail::concat("in place it must be exactly this rank's ", unit, " [", first_row, ", ",
                           first_row + rows, ") of the ", whole_name, ", else apart from it");
  throw InvalidArgument(
      detail::concat(op, ": the ", part_name, " and the ", whole_name, " partly overlap (bytes [",
                     part_begin, ", ", part_end, ") and [", whole_begin, ", ", whole_end,
                     ") of one storage): ", allowed, "; clone() the ", part_name, " first"));
}

// `part` (this rank's input of an all-gather, its output of a reduce-scatter) is either apart
// from `whole` or exactly its rows [first_row, +rows) (in place, as torch allows; rows < 0: no
// such rows), rows of `row_elements` (the even and list forms count elements: rows of 1, which
// their errors call elements). A partial overlap would be read while it is written, and what came
// out would depend on the path (the inline path stages it, zero-copy and the host pipeline do not),
// on every rank. Called only when the two share a storage (in place, or a mistake): the common case
// pays one comparison at the call site.
[[gnu::cold, gnu::noinline]] void check_in_place_or_apart(const char* op, const Tensor& part,
                                                          const char* part_name,
                                                          const Tensor& whole,
                                                          const char* whole_name, int64_t first_row,
                                                          int64_t rows, int64_t row_elements,
                                                          bool unit_is_element = false) {
  const size_t part_begin = part.storage_offset_bytes();
  const size_t part_end = part_begin + part.nbytes();
  const size_t whole_begin = whole.storage_offset_bytes();
  const size_t whole_end = whole_begin + whole.nbytes();
  if (part_end <= whole_begin || whole_end <= part_begin || part_begin == part_end) return;
  if (rows >= 0) {
    const size_t row_bytes = static_cast<size_t>(row_elements) * whole.element_size();
    const size_t slot_begin = whole_begin + static_cast<size_t>(first_row) * row_bytes;
    if (part_begin == slot_begin && part_end == slot_begin + static_cast<size_t>(rows) * row_bytes)
      return;
  }
  throw_overlap(op, part_name, whole_name, part_begin, part_end, whole_begin, whole_end, first_row,
                rows, row_elements == 1 && unit_is_element ? "elements" : "rows");
}

// An all_gather's output `later` shares a storage with an earlier one: two ranks' rows written
// into the same bytes would leave one of them (which one: up to the timing) where both are read.
[[gnu::cold, gnu::noinline]] void check_outputs_apart(const std::vector<Tensor>& outputs,
                                                      size_t later) {
  const Tensor& b = outputs[later];
  const size_t b_begin = b.storage_offset_bytes();
  const size_t b_end = b_begin + b.nbytes();
  for (size_t earlier = 0; earlier < later; ++earlier) {
    const Tensor& a = outputs[earlier];
    if (a.storage() != b.storage()) continue;
    const size_t a_begin = a.storage_offset_bytes();
    const size_t a_end = a_begin + a.nbytes();
    if (a_end <= b_begin || b_end <= a_begin || a_begin == a_end || b_begin == b_end) continue;
    throw InvalidArgument(
        detail::concat("all_gather: output ", earlier, " and output ", later, " overlap (bytes [",
                       a_begin, ", ", a_end, ") and [", b_begin, ", ", b_end,
                       ") of one storage): each rank's output needs memory of its own"));
  }
}

[[noreturn, gnu::cold, gnu::noinline]] void throw_devices(const char* op, int first, int second) {
  throw InvalidArgument(detail::concat(op, ": tensors on npu:", first, " and npu:", second,
                                       ": a collective's NPU tensors must be on one device (its "
                                       "stream orders the call), as NCCL's must"));
}

// The NPU device whose current stream the call is ordered after, -1 if none: the one device of
// the call's NPU tensors (host tensors may come with them). A tensor that shares the input's
// storage (all_reduce, broadcast, in place) is on its device: device() is out of line, and this
// is every call's path.
int ordering_device(const OpPlan& plan) {
  const auto npu_index = [](const Tensor& tensor) {
    if (!tensor.defined()) return -1;
    const Device where = tensor.device();
    return where.is_npu() ? where.index : -1;
  };
  int device = npu_index(plan.input());
  const auto add = [&device, &plan](int other) {
    if (other < 0 || other == device) return;
    if (device >= 0) [[unlikely]]
      throw_devices(plan.name, device, other);
    device = other;
  };
  if (plan.output().storage() != plan.input().storage()) add(npu_index(plan.output()));
  if (plan.kind == OpKind::kAllGatherList) {
    for (const Tensor& output : plan.outputs())
      add(npu_index(output));
  }
  return device;
}

// kCallerStream: an async collective starts after the work queued so far on the caller's stream
// (torch's stream semantics). kNone: the caller guarantees its tensors are ready (an operator that
// runs as a task of that very stream, which could not wait for itself).
enum class Ordering { kCallerStream, kNone };

// A call's turn among the group's calls (GroupState::wait_for_turn), handed on when it has run
// or been queued, or has failed.
class Turn {
 public:
  Turn(detail::GroupState& state, uint64_t sequence) : state_(state), sequence_(sequence) {
    state.wait_for_turn(sequence);
  }
  ~Turn() { end(); }
  void end() {
    if (!ended_) state_.end_turn(sequence_);
    ended_ = true;
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

 private:
  detail::GroupState& state_;
  const uint64_t sequence_;
  bool ended_ = false;
};

// Queues collective `plan` on the group's stream, after the work queued so far on `caller` (when
// given); `device` is the one whose stream its Work's synchronize() orders. The call has its number
// and its turn; a failure here fails the group (its peers wait for this rank at that number).
std::shared_ptr<collectives::AsyncWork> enqueue(detail::GroupState& state, const OpPlan& plan,
                                                int device, npu::detail::StreamImpl& comm,
                                                npu::detail::StreamImpl* caller) {
  collectives::TraceRing* const trace = plan.async_op ? state.trace() : nullptr;
  // An asynchronous call is recorded now (a synchronous one as it arrives, in the executor).
  if (trace != nullptr) trace->scheduled(plan, true);
  try {
    collectives::fault::point(collectives::fault::Point::kQueues,
                              state.global_ranks()[static_cast<size_t>(state.rank())],
                              plan.sequence);
    auto work = std::make_shared<collectives::AsyncWork>(state, plan, device);
    if (caller != nullptr) {
      auto ready = std::make_shared<npu::detail::EventState>();
      caller->record(ready);
      work->start_after(std::move(ready), *caller);
    }
    collectives::AsyncWork::enqueue_on(comm, work);
    return work;
  } catch (const std::exception& error) {
    if (trace != nullptr) trace->finished(plan.sequence, false, true);
    state.fail_before_arrival(plan.sequence,
                              detail::concat("collective ", plan.sequence, " (", plan.name,
                                             ") could not be queued: ", error.what()),
                              transport::FailureKind::kRemote);
    throw;
  }
}

std::shared_ptr<Work> submit(detail::GroupState& state, OpPlan& plan, bool async_op,
                             Ordering ordering = Ordering::kCallerStream) {
  state.check_not_failed();
  plan.bump_output_versions();
  plan.async_op = async_op;
  // What can fail is done before the call takes its number, which its peers would wait for: a
  // stream used across fork() is an error here (idle() checks), and the group's stream starts.
  const int device = ordering == Ordering::kCallerStream ? ordering_device(plan) : -1;
  npu::detail::StreamImpl* caller = device >= 0 ? &device::current_stream_impl(device) : nullptr;
  // A barrier has no tensors: as torch's (an all-reduce of a tensor on the current device) it
  // comes after the work queued on the current stream of the current device, if one is in use.
  if (plan.kind == OpKind::kBarrier && ordering == Ordering::kCallerStream) [[unlikely]]
    caller = device::current_stream_impl_if_used();
  // A caller inside a stream's task is already in that stream's order: its own stream's, or
  // another's whose worker runs it (an operator run in the order of a busy current stream: that
  // worker's current stream is the device's default stream, whose work must not hold it).
  if (caller != nullptr &&
      (caller->idle() || caller->runs_here() || npu::detail::running_stream_task()))
    caller = nullptr;
  npu::detail::StreamImpl* comm =
      async_op || caller != nullptr || state.has_comm_stream() ? &state.comm_stream() : nullptr;
  plan.sequence = state.next_sequence();
  Turn turn(state, plan.sequence);
  // Another thread's asynchronous call before this one may have made the group's stream since
  // this thread looked: this call then goes behind it, never beside it.
  if (comm == nullptr && state.has_comm_stream()) comm = &state.comm_stream();
  SHMCCL_TRACE(kColl, plan.name, " sequence ", plan.sequence, " on ", state.comm_name());
  if (async_op) return enqueue(state, plan, device, *comm, caller);
  // Synchronous. Inline when nothing is queued before it (no thread hand-off), on the caller's
  // stream or the group's (calls of other threads before it have handed on by now). Work that
  // other threads queue on the caller's stream while this thread runs the call is concurrent
  // with it: its order against the call was never defined.
  if (caller == nullptr && (comm == nullptr || comm->idle())) {
    collectives::execute(state, plan);
    return detail::completed_work();
  }
  // Else it joins the group's stream behind what is queued there (and after the caller's stream),
  // with its number taken now, in call order: a number taken when the caller's stream came to it
  // could go to a later call of another thread, which would then wait for it on the group's
  // stream while it waited for that call. This thread waits, and runs it (and what is before it
  // on the group's stream) itself when no worker has started it.
  std::shared_ptr<collectives::AsyncWork> work = enqueue(state, plan, device, *comm, caller);
  turn.end();
  work->wait();
  work->await_stream_record();
  return detail::completed_work();
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<detail::GroupState> state) : state_(std::move(state)) {}

ProcessGroup::~ProcessGroup() {
  if (state_) shutdown();
}

void ProcessGroup::shutdown() noexcept {
  if (!state_) return;
  const std::exception_ptr error = collectives::shut_down(*this);
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& what) {
    SHMCCL_WARN(kColl, "shutting down group ", state_->comm_name(), ": ", what.what());
  } catch (...) {
  }
}

namespace collectives {

std::exception_ptr shut_down(ProcessGroup& group) noexcept {
  detail::GroupState& state = group.state();
  if (state.is_shut_down()) return nullptr;
  if (state.has_comm_stream()) {
    try {
      state.comm_stream().synchronize();
    } catch (const std::exception& error) {
      SHMCCL_WARN(kColl, "shutting down group ", state.comm_name(), ": ", error.what());
    }
  }
  std::exception_ptr error;
  try {
    settle_early_finishes_before_leaving(state);
  } catch (...) {
    error = std::current_exception();
  }
  settle_pull_before_leaving(state);
  state.shut_down();
  return error;
}

}  // namespace collectives

std::shared_ptr<ProcessGroup> ProcessGroup::non_member(std::vector<int> global_ranks) {
  auto group = std::make_shared<ProcessGroup>(nullptr);
  group->non_member_ranks_ = std::move(global_ranks);
  return group;
}

std::shared_ptr<Work> ProcessGroup::skip(const char* op) {
  // torch's _warn_not_in_group, once per group here: a training loop would repeat it per step.
  if (!warned_not_member_.exchange(true, std::memory_order_relaxed)) {
    SHMCCL_WARN(kColl, "running ", op, " on a group this rank is not a member of (ranks ",
                non_member_ranks_, "): it does nothing here, as in torch");
  }
  return detail::completed_work();
}

int ProcessGroup::rank() const {
  return state_ ? state_->rank() : -1;
}
int ProcessGroup::size() const {
  return state_ ? state_->size() : -1;
}
const std::string& ProcessGroup::comm_name() const {
  static const std::string none;
  return state_ ? state_->comm_name() : none;
}
const std::vector<int>& ProcessGroup::global_ranks() const {
  return state_ ? state_->global_ranks() : non_member_ranks_;
}
std::chrono::milliseconds ProcessGroup::timeout() const {
  return state_ ? state_->timeout() : std::chrono::milliseconds(0);
}
void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  SHMCCL_CHECK_ARG(timeout.count() > 0,
                   "ProcessGroup::set_timeout: the timeout must be > 0 ms, got ", timeout.count(),
                   " ms");
  if (state_) state_->set_timeout(timeout);
}

void ProcessGroup::abort(const std::string& reason) {
  if (!state_ || state_->is_shut_down()) return;  // nothing pending, no peer left to tell
  state_->transport().abort(reason);
  state_->mark_failed("aborted: " + reason);
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor_uneven(
    Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes,
    bool async_op) {
  if (!state_) [[unlikely]]
    return skip("all_gather_into_tensor_uneven");
  OpPlan plan;
  plan.kind = OpKind::kAllGather;
  plan.name = "all_gather_into_tensor_uneven";
  plan.uneven_name = true;
  check_defined(output, plan.name, "output");
  check_defined(input, plan.name, "input");
  check_same_type(output, input);
  SHMCCL_CHECK_ARG(output.dim() >= 1, plan.name, ": the output needs at least one dimension");
  SHMCCL_CHECK_ARG(same_trailing(input.sizes(), output.sizes()), plan.name, ": input shape ",
                   input.sizes(), " and output shape ", output.sizes(),
                   " must agree in every dimension but dim 0");
  set_splits(plan, output_split_sizes, "output", output.size(0), size());
  const int64_t mine = plan.splits[static_cast<size_t>(rank())];
  SHMCCL_CHECK_ARG(
      input.size(0) == mine, plan.name, ": rank ", rank(), "'s input has ", input.size(0),
      " rows but its split size is ", mine, " (split sizes ",
      detail::concat(std::vector<int64_t>(plan.splits.begin(), plan.splits.begin() + size())), ")");
  plan.dtype = input.dtype();
  plan.row_elements = product_of_trailing(output.sizes(), plan.dtype);
  if (input.storage() == output.storage()) [[unlikely]] {
    check_in_place_or_apart(plan.name, input, "input", output, "output", plan.rows_before(rank()),
                            mine, plan.row_elements);
  }
  plan.borrow_input(input);
  plan.borrow_output(output);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor_uneven(
    Tensor& output, const Tensor& input, const std::vector<int64_t>& input_split_sizes, ReduceOp op,
    bool async_op) {
  if (!state_) [[unlikely]]
    return skip("reduce_scatter_tensor_uneven");
  OpPlan plan;
  plan.kind = OpKind::kReduceScatter;
  plan.name = "reduce_scatter_tensor_uneven";
  plan.uneven_name = true;
  check_defined(output, plan.name, "output");
  check_defined(input, plan.name, "input");
  check_same_type(output, input);
  SHMCCL_CHECK_ARG(input.dim() >= 1, plan.name, ": the input needs at least one dimension");
  SHMCCL_CHECK_ARG(same_trailing(input.sizes(), output.sizes()), plan.name, ": input shape ",
                   input.sizes(), " and output shape ", output.sizes(),
                   " must agree in every dimension but dim 0");
  set_splits(plan, input_split_sizes, "input", input.size(0), size());
  const int64_t mine = plan.splits[static_cast<size_t>(rank())];
  SHMCCL_CHECK_ARG(output.size(0) == mine, plan.name, ": rank ", rank(), "'s output has ",
                   output.size(0), " rows but its split size is ", mine);
  plan.dtype = input.dtype();
  plan.reduce_op = op;
  check_reduce_op(plan);
  plan.row_elements = product_of_trailing(input.sizes(), plan.dtype);
  if (input.storage() == output.storage()) [[unlikely]] {
    check_in_place_or_apart(plan.name, output, "output", input, "input", plan.rows_before(rank()),
                            mine, plan.row_elements);
  }
  plan.borrow_input(input);
  plan.borrow_output(output);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(Tensor& output, const Tensor& input,
                                                           bool async_op) {
  if (!state_) [[unlikely]]
    return skip("all_gather_into_tensor");
  OpPlan plan;
  plan.kind = OpKind::kAllGather;
  plan.name = "all_gather_into_tensor";
  check_defined(output, plan.name, "output");
  check_defined(input, plan.name, "input");
  check_same_type(output, input);
  const int n = size();
  // As torch's and oneflow's: only the element count is checked. The concatenation (N*d0, ...),
  // the stack (N, d0, ...) and any other shape of that many elements (oneflow's own example
  // gathers (2, 3) inputs into a (2, 3, 2) output) hold the same bytes: rank r's input is the
  // r-th contiguous block.
  SHMCCL_CHECK_ARG(
      output.numel() == n * input.numel(), plan.name,
      ": output tensor size must be equal to world_size times input tensor size: "
      "the output has shape ",
      output.sizes(), " (", output.numel(), " elements), not ", n, " times the input's ",
      input.numel(), " (shape ", input.sizes(),
      "); any shape of that size holds, such as the concatenation (N*d0, ...) or the stack "
      "(N, d0, ...)");
  plan.num_splits = n;
  for (int r = 0; r < n; ++r)
    plan.splits[static_cast<size_t>(r)] = input.numel();
  plan.dtype = input.dtype();
  plan.row_elements = 1;
  if (input.storage() == output.storage()) [[unlikely]] {
    check_in_place_or_apart(plan.name, input, "input", output, "output", rank() * input.numel(),
                            input.numel(), 1, /*unit_is_element=*/true);
  }
  plan.borrow_input(input);  // (the executor reads only their bytes, whatever their shapes)
  plan.borrow_output(output);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input,
                                                          ReduceOp op, bool async_op) {
  if (!state_) [[unlikely]]
    return skip("reduce_scatter_tensor");
  OpPlan plan;
  plan.kind = OpKind::kReduceScatter;
  plan.name = "reduce_scatter_tensor";
  check_defined(output, plan.name, "output");
  check_defined(input, plan.name, "input");
  check_same_type(output, input);
  const int n = size();
  SHMCCL_CHECK_ARG(input.numel() == n * output.numel(), plan.name, ": the input has ",
                   input.numel(), " elements (shape ", input.sizes(), "); expected ", n,
                   " times the output's ", output.numel(), " (shape ", output.sizes(), ")");
  plan.num_splits = n;
  for (int r = 0; r < n; ++r)
    plan.splits[static_cast<size_t>(r)] = output.numel();
  plan.dtype = input.dtype();
  plan.reduce_op = op;
  check_reduce_op(plan);
  plan.row_elements = 1;
  if (input.storage() == output.storage()) [[unlikely]] {
    check_in_place_or_apart(plan.name, output, "output", input, "input", rank() * output.numel(),
                            output.numel(), 1, /*unit_is_element=*/true);
  }
  plan.borrow_input(input);  // (the executor reads only their bytes, whatever their shapes)
  plan.borrow_output(output);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                               bool async_op) {
  if (!state_) [[unlikely]]
    return skip("all_gather");
  OpPlan plan;
  plan.kind = OpKind::kAllGatherList;
  plan.name = "all_gather";
  check_defined(input, plan.name, "input");
  const int n = size();
  SHMCCL_CHECK_ARG(static_cast<int>(outputs.size()) == n, plan.name, ": expected ", n,
                   " output tensors (one per rank), got ", outputs.size());
  plan.num_splits = n;
  for (int r = 0; r < n; ++r) {
    const Tensor& output = outputs[static_cast<size_t>(r)];
    check_defined(output, plan.name, "output");
    check_same_type(output, input);
    // Each rank's block is its elements, whatever its shape: ranks may gather [1, L_r] rows or
    // tensors of any shapes, as torch's all_gather takes them.
    plan.splits[static_cast<size_t>(r)] = output.numel();
    // Outputs in one storage (views of one buffer, or one tensor twice) must not overlap.
    for (int earlier = 0; earlier < r; ++earlier) {
      if (output.storage() == outputs[static_cast<size_t>(earlier)].storage()) [[unlikely]] {
        check_outputs_apart(outputs, static_cast<size_t>(r));
        break;
      }
    }
  }
  SHMCCL_CHECK_ARG(outputs[static_cast<size_t>(rank())].numel() == input.numel(), plan.name,
                   ": this rank's output (", rank(), ") has shape ",
                   outputs[static_cast<size_t>(rank())].sizes(), " but the input has shape ",
                   input.sizes(), "; they must have the same number of elements");
  plan.dtype = input.dtype();
  plan.row_elements = 1;
  for (int r = 0; r < n; ++r) {  // the input may be this rank's own output, or apart from all
    const Tensor& output = outputs[static_cast<size_t>(r)];
    if (output.storage() != input.storage()) [[likely]]
      continue;
    const std::string name = detail::concat("output ", r);
    check_in_place_or_apart(plan.name, input, "input", output, name.c_str(), 0,
                            r == rank() ? plan.splits[static_cast<size_t>(r)] : -1,
                            plan.row_elements, /*unit_is_element=*/true);
  }
  plan.borrow_input(input);
  plan.borrow_outputs(outputs);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  if (!state_) [[unlikely]]
    return skip("all_reduce");
  OpPlan plan;
  plan.kind = OpKind::kAllReduce;
  plan.name = "all_reduce";
  check_defined(tensor, plan.name, "input");
  plan.dtype = tensor.dtype();
  plan.reduce_op = op;
  check_reduce_op(plan);
  plan.borrow_input(tensor);
  plan.borrow_output(tensor);
  return submit(*state_, plan, async_op);
}

namespace collectives {

std::shared_ptr<Work> all_reduce_unordered(ProcessGroup& group, const Tensor& tensor) {
  OpPlan plan;
  plan.kind = OpKind::kAllReduce;
  plan.name = "all_reduce";
  check_defined(tensor, plan.name, "input");
  plan.dtype = tensor.dtype();
  plan.reduce_op = ReduceOp::SUM;
  plan.borrow_input(tensor);
  plan.borrow_output(tensor);
  return submit(group.state(), plan, /*async_op=*/true, Ordering::kNone);
}

}  // namespace collectives

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& tensor, int src, bool async_op) {
  if (!state_) [[unlikely]]
    return skip("broadcast");
  OpPlan plan;
  plan.kind = OpKind::kBroadcast;
  plan.name = "broadcast";
  check_defined(tensor, plan.name, "input");
  SHMCCL_CHECK_ARG(src >= 0 && src < size(), "broadcast: src rank ", src,
                   " is out of range for a group of ", size(), " ranks");
  plan.dtype = tensor.dtype();
  plan.root = src;
  plan.borrow_input(tensor);
  plan.borrow_output(tensor);
  return submit(*state_, plan, async_op);
}

std::shared_ptr<Work> ProcessGroup::barrier(bool async_op) {
  if (!state_) [[unlikely]]
    return skip("barrier");
  OpPlan plan;
  plan.kind = OpKind::kBarrier;
  plan.name = "barrier";
  return submit(*state_, plan, async_op);
}

// ---- free functions: the default group when `group` is null ----

std::shared_ptr<Work> all_gather_into_tensor_uneven(Tensor& output, const Tensor& input,
                                                    const std::vector<int64_t>& output_split_sizes,
                                                    const ProcessGroupPtr& group, bool async_op) {
  return collectives::group_ref(group).all_gather_into_tensor_uneven(output, input,
                                                                     output_split_sizes, async_op);
}

std::shared_ptr<Work> reduce_scatter_tensor_uneven(Tensor& output, const Tensor& input,
                                                   const std::vector<int64_t>& input_split_sizes,
                                                   ReduceOp op, const ProcessGroupPtr& group,
                                                   bool async_op) {
  return collectives::group_ref(group).reduce_scatter_tensor_uneven(
      output, input, input_split_sizes, op, async_op);
}

std::shared_ptr<Work> all_gather_into_tensor(Tensor& output, const Tensor& input,
                                             const ProcessGroupPtr& group, bool async_op) {
  return collectives::group_ref(group).all_gather_into_tensor(output, input, async_op);
}

std::shared_ptr<Work> reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                            const ProcessGroupPtr& group, bool async_op) {
  return collectives::group_ref(group).reduce_scatter_tensor(output, input, op, async_op);
}

std::shared_ptr<Work> all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                 const ProcessGroupPtr& group, bool async_op) {
  return collectives::group_ref(group).all_gather(outputs, input, async_op);
}

std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op, const ProcessGroupPtr& group,
                                 bool async_op) {
  return collectives::group_ref(group).all_reduce(tensor, op, async_op);
}

std::shared_ptr<Work> broadcast(Tensor& tensor, int src, const ProcessGroupPtr& group,
                                bool async_op) {
  // As torch.distributed: `src` is a rank of the default group; translate it into the group.
  ProcessGroup& resolved = collectives::group_ref(group);
  if (!resolved.is_member()) return resolved.broadcast(tensor, src, async_op);  // does nothing
  const auto& ranks = resolved.global_ranks();
  // The default group (and any group that starts as it does) maps its ranks to themselves.
  if (src >= 0 && src < static_cast<int>(ranks.size()) && ranks[static_cast<size_t>(src)] == src)
    return resolved.broadcast(tensor, src, async_op);
  const auto position = std::find(ranks.begin(), ranks.end(), src);
  SHMCCL_CHECK_ARG(position != ranks.end(), "broadcast: src rank ", src,
                   " is not a member of the group (ranks ", ranks, ")");
  return resolved.broadcast(tensor, static_cast<int>(position - ranks.begin()), async_op);
}

std::shared_ptr<Work> barrier(const ProcessGroupPtr& group, bool async_op) {
  return collectives::group_ref(group).barrier(async_op);
}

}  // namespace shmccl
