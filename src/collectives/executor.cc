// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/executor.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <sstream>

#include "collectives/algorithms.h"
#include "collectives/call_cache.h"
#include "collectives/fault_injection.h"
#include "collectives/flight_recorder.h"
#include "collectives/host_pipeline.h"
#include "collectives/host_staging.h"
#include "collectives/pull_broadcast.h"
#include "collectives/work_stripes.h"
#include "core/check.h"
#include "core/config.h"
#include "core/deadline.h"
#include "core/logging.h"
#include "core/memory_order.h"
#include "core/prefetch.h"
#include "device/device_context.h"
#include "device/kernels.h"
#include "device/stream_impl.h"
#include "transport/asymmetric_fence.h"
#include "transport/futex.h"

namespace shmccl::collectives {
namespace {

using transport::BufferRef;
using transport::OpDescriptor;
using transport::OpKind;

const char* kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kAllGather:
      return "all_gather_into_tensor";
    case OpKind::kAllGatherList:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter_tensor";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kNone:
      break;
  }
  return "unknown";
}

}  // namespace

void ExecContext::copy(void* to, const void* from, uint64_t bytes) const {
  if (streaming) {
    kernels::copy_streaming(to, from, bytes);
  } else {
    kernels::copy(to, from, bytes);
  }
}

uint64_t inline_limit() {
  static const uint64_t limit =
      std::min<uint64_t>(config::get_bytes("SHMCCL_INLINE_BYTES"), transport::kInlineBytes);
  return limit;
}

namespace {

// Inline payloads up to this size are fetched while their arrivals are awaited (2 ranks: 128 B
// all-reduce 0.176 -> 0.160 us; at 2 KiB the fetches slowed the writers: docs/performance.md).
constexpr uint64_t kPrefetchedPayloadBytes = 512;

// A rank's arrival line for call s was last read by its peers at s - kCallRing and is still in
// their caches, so the store of the arrival waits for a line transfer to take it back. A rank
// that returns without waiting for everyone (a small broadcast's ranks, a reduce-scatter rank
// that receives nothing) runs ahead, and meets those transfers, one per call, in its full store
// buffer a few calls on. Asked for kClaimedCalls calls ahead, the lines are this core's when the
// calls write them (8 B broadcast, in the VM's mode of slow line transfers: 0.21 -> 0.06-0.12 us
// at 2 ranks, 0.20-0.24 -> 0.07-0.11 at 4; docs/performance.md). No peer waits on those entries:
// none passes call s before this rank arrives there (one that lags 28 calls behind may still read
// the calls they last held, and reads them again). Not for ranks that wait for everyone (their
// calls keep in step; 512 B all-gather at 2 ranks 0.60-0.62 -> 0.65-0.67 us with it), nor for the
// payload lines of the inline areas (2 ranks, 512 B broadcast: 0.21-0.23 -> 0.28-0.29 us).
constexpr uint64_t kClaimedCalls = 4;

void claim_next_arrivals(const transport::RankSlot& mine, uint64_t sequence) {
#pragma GCC unroll 4
  for (uint64_t ahead = 1; ahead <= kClaimedCalls; ++ahead) {
    detail::prefetch_for_write(&mine.arrivals[transport::ring_entry(sequence + ahead)]);
  }
}

// The lines of peers' inline payloads this rank will read, asked for (without waiting) while
// their arrivals are awaited. The arrays are filled at the first check and never zeroed (zeroing
// them, as a std::optional of this did, cost 130 instructions a call: 0.131 -> 0.150 us at 8 B).
class PayloadPrefetch {
 public:
  void fetch_all(const transport::GroupTransport& transport, const Algorithm& algorithm,
                 const OpPlan& plan, uint64_t payload_bytes) {
    if (size_ == 0) [[unlikely]]
      plan_lines(transport, algorithm, plan, payload_bytes);
    for (int r = 0; r < size_; ++r) {
      for (uintptr_t line = first_[r]; line < end_[r]; line += transport::kCacheLine) {
        detail::prefetch_for_read(reinterpret_cast<const void*>(line));
      }
    }
  }

 private:
  void plan_lines(const transport::GroupTransport& transport, const Algorithm& algorithm,
                  const OpPlan& plan, uint64_t payload_bytes) {
    const int rank = transport.rank();
    for (int r = 0; r < transport.size(); ++r) {
      const PayloadRange range = r == rank ? PayloadRange{} : algorithm.inline_reads(plan, rank, r);
      const unsigned char* area =
          transport::inline_area(transport.slot(r), plan.sequence, payload_bytes) + range.offset;
      first_[r] = reinterpret_cast<uintptr_t>(area) & ~uintptr_t{transport::kCacheLine - 1};
      end_[r] = range.bytes == 0 ? first_[r] : reinterpret_cast<uintptr_t>(area + range.bytes);
    }
    size_ = transport.size();
  }

  int size_ = 0;
  uintptr_t first_[transport::kMaxRanks];
  uintptr_t end_[transport::kMaxRanks];
};

BufferRef buffer_ref(const Tensor& tensor) {
  BufferRef ref;  // host tensors have none: host_staging.h describes them
  if (!tensor.defined() || tensor.nbytes() == 0 || !tensor.is_npu()) return ref;
  const int device_index = tensor.device().index;
  device::Arena& arena = device::arena(device_index);
  ref.arena = arena.handle();
  ref.offset = static_cast<uint64_t>(static_cast<char*>(tensor.data_ptr()) - arena.base());
  ref.bytes = tensor.nbytes();
  return ref;
}

void fill_descriptor(const OpPlan& plan, OpDescriptor& descriptor) {
  descriptor.sequence = plan.sequence;
  descriptor.kind = plan.kind;
  descriptor.uneven_name = plan.uneven_name ? 1 : 0;
  descriptor.dtype = static_cast<uint8_t>(plan.dtype);
  descriptor.reduce_op = static_cast<uint8_t>(plan.reduce_op);
  descriptor.root = plan.root;
  descriptor.input_numel = plan.input().defined() ? plan.input().numel() : 0;
  descriptor.output_numel = plan.output().defined() ? plan.output().numel() : 0;
  descriptor.row_elements = plan.row_elements;
  descriptor.num_splits = plan.num_splits;
  for (int r = 0; r < plan.num_splits; ++r)
    descriptor.splits[r] = plan.splits[static_cast<size_t>(r)];
}

bool reduces(OpKind kind) {
  return kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce;
}

// Bytes the collective writes on all ranks together.
uint64_t output_bytes(const OpPlan& plan, int size) {
  const uint64_t rows_total = static_cast<uint64_t>(plan.rows_before(size) * plan.row_bytes());
  switch (plan.kind) {
    case OpKind::kAllGather:
    case OpKind::kAllGatherList:
      return rows_total * static_cast<uint64_t>(size);
    case OpKind::kReduceScatter:
      return rows_total;
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
      return plan.input_bytes() * static_cast<uint64_t>(size);
    case OpKind::kBarrier:
    case OpKind::kNone:
      break;
  }
  return 0;
}

uint64_t rank_rows_bytes(const OpPlan& plan, int rank) {
  return static_cast<uint64_t>(plan.splits[static_cast<size_t>(rank)] * plan.row_bytes());
}

// Resolves every rank's pool buffers; the sizes come from the (agreed) plan, not from the peer.
void resolve_buffers(ExecContext& context) {
  const OpPlan& plan = context.plan;
  const uint64_t total_bytes =
      static_cast<uint64_t>(plan.rows_before(context.size) * plan.row_bytes());
  const uint64_t alignment = element_size(plan.dtype);
  for (int r = 0; r < context.size; ++r) {
    const OpDescriptor& descriptor = *context.descriptors[r];
    uint64_t input_bytes = 0;
    uint64_t output_bytes = 0;
    switch (plan.kind) {
      case OpKind::kAllGather:
        input_bytes = rank_rows_bytes(plan, r);
        output_bytes = total_bytes;
        break;
      case OpKind::kAllGatherList:
        input_bytes = rank_rows_bytes(plan, r);
        break;
      case OpKind::kReduceScatter:
        input_bytes = total_bytes;
        output_bytes = rank_rows_bytes(plan, r);
        break;
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
        input_bytes = output_bytes = plan.input_bytes();
        break;
      case OpKind::kBarrier:
      case OpKind::kNone:
        break;
    }
    context.inputs[r] = context.transport.resolve(descriptor.input, input_bytes, alignment,
                                                  transport::GroupTransport::Copier::kWorkPool);
    context.outputs[r] = context.transport.resolve(descriptor.output, output_bytes, alignment,
                                                   transport::GroupTransport::Copier::kWorkPool);
  }
}

// The global rank of this process (what SHMCCL_FAULT names).
int global_rank(const detail::GroupState& state) {
  return state.global_ranks()[static_cast<size_t>(state.rank())];
}

void run_pool(detail::GroupState& state, ExecContext& context, const Algorithm& algorithm,
              std::chrono::milliseconds timeout) {
  transport::GroupTransport& transport = context.transport;
  transport::ControlHeader& header = transport.header();
  const uint64_t sequence = context.plan.sequence;
  const uint64_t total = algorithm.count_chunks(context);
  const uint64_t base = state.take_pool(total);
  const uint64_t end = base + total;
  if (total == 0) {
    transport.slot(context.rank).pool_finished.store(sequence, std::memory_order_release);
    return;
  }
  const int size = context.size;
  // Each stripe's chunks, and where its counter starts for this collective.
  struct Stripe {
    WorkStripe chunks;
    uint64_t base;
  };
  std::array<Stripe, transport::kMaxRanks> stripes;
  for (int s = 0; s < size; ++s) {
    const WorkStripe chunks = work_stripe(total, size, s);
    stripes[static_cast<size_t>(s)] = {chunks, state.take_stripe(s, chunks.count)};
  }
  bool resolved = false;
  bool ran_one = false;
  // This rank's stripe first, then the others' from the next rank on: with a core per rank each
  // rank keeps to its own pages; a rank that is not running has its stripe taken by those that are.
  for (int k = 0; k < size; ++k) {
    const int s = (context.rank + k) % size;
    const WorkStripe stripe = stripes[static_cast<size_t>(s)].chunks;
    const uint64_t stripe_base = stripes[static_cast<size_t>(s)].base;
    const uint64_t stripe_end = stripe_base + stripe.count;
    std::atomic<uint64_t>& counter = transport.slot(s).stripe_claimed;
    uint64_t claimed = counter.load(std::memory_order_relaxed);
    while (claimed < stripe_end) {
      // The counter only grows, so a stale `claimed` can never succeed (no ABA).
      if (!counter.compare_exchange_weak(claimed, claimed + 1, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
        continue;
      }
      if (claimed < stripe_base) [[unlikely]] {
        throw RemoteError(detail::concat(
            "in ", context.plan.name, " (sequence ", sequence, "): the work pool counter of rank ",
            s, "'s stripe is at chunk ", claimed, ", behind this collective's first chunk ",
            stripe_base, ": the control block is corrupt"));
      }
      // Map the peers' buffers only once this rank has work: while a chunk is unfinished no rank
      // can leave the collective, so every owner is still alive (a rank that found no chunk left
      // never touches peers that may already have exited).
      if (!resolved) {
        transport.slot(context.rank).pool_claimed.store(sequence, std::memory_order_relaxed);
        resolve_buffers(context);
        resolved = true;
      }
      algorithm.run_chunk(context, stripe.first + (claimed - stripe_base));
      if (!ran_one) {
        ran_one = true;
        fault::point(fault::Point::kMidCopy, global_rank(state), sequence);
      }
      // Release: the chunk's writes happen-before any rank that sees the count reach `end`.
      detail::release_to_peers();
      if (header.done.fetch_add(1, std::memory_order_seq_cst) + 1 == end) transport.notify();
      claimed = counter.load(std::memory_order_relaxed);
      // A peer may finish the collective and exit between our last chunk and this check: only a
      // collective with work outstanding fails (the final wait below sees a finished one as done).
      if (!transport.healthy() && header.done.load(std::memory_order_acquire) < end) {
        transport.check_healthy();
      }
    }
  }
  if (!ran_one) fault::point(fault::Point::kMidCopy, global_rank(state), sequence);
  detail::release_to_peers();
  transport.slot(context.rank).pool_finished.store(sequence, std::memory_order_relaxed);
  // A rank that failed this call holding a claimed chunk (an exception in its copy) departed
  // with its share unfinished: nobody else finishes it, so the wait ends at once, naming it.
  auto abandoned_by = [&] {
    return transport.first_departed([&](const transport::RankSlot& slot) {
      // Its give-up, not its departure: a departure at sequence + 1 may also be another
      // thread's later call failing while this one still runs there.
      return transport::gave_up_on(slot, sequence) && !transport::timed_out(slot) &&
             slot.pool_claimed.load(std::memory_order_relaxed) == sequence &&
             slot.pool_finished.load(std::memory_order_relaxed) != sequence;
    });
  };
  transport.wait_until(
      [&] { return header.done.load(std::memory_order_acquire) >= end || abandoned_by() >= 0; },
      timeout,
      [&] {
        const std::string behind =
            transport::ranks_below(transport, sequence, [](const transport::RankSlot& slot) {
              return slot.pool_finished.load(std::memory_order_relaxed);
            });
        return detail::concat("in ", context.plan.name, " (sequence ", sequence, ", timeout ",
                              state.timeout().count(), " ms): waiting for ",
                              end - header.done.load(std::memory_order_acquire),
                              " chunks of work claimed by ",
                              transport::ranks_that(behind, ", which has not finished its share",
                                                    ", which have not finished their share"));
      });
  if (header.done.load(std::memory_order_acquire) < end) [[unlikely]] {
    const int abandoned = abandoned_by();
    if (abandoned < 0) {
      throw Error(detail::concat("internal error: the work pool of ", context.plan.name,
                                 " (sequence ", sequence, ") ended with chunks unfinished"));
    }
    throw RemoteError(detail::concat(
        "in ", context.plan.name, " (sequence ", sequence, "): rank ", abandoned, " (pid ",
        transport.peer_pid(abandoned), ") failed the call with chunks of its work unfinished (",
        end - header.done.load(std::memory_order_acquire),
        " left, which no rank will finish): ", transport::failure_text(transport.slot(abandoned))));
  }
}

}  // namespace

std::string describe(const OpDescriptor& shared_descriptor) {
  // One copy, then only the copy: a peer's descriptor lives in shared memory, and num_splits must
  // not change between its clamp and the loop that reads that many splits.
  OpDescriptor descriptor;
  std::memcpy(&descriptor, &shared_descriptor, sizeof(descriptor));
  std::ostringstream out;
  const auto dtype = static_cast<ScalarType>(descriptor.dtype);
  out << kind_name(descriptor.kind) << (descriptor.uneven_name != 0 ? "_uneven" : "")
      << "(sequence=" << descriptor.sequence
      << ", dtype=" << (is_valid(dtype) ? dtype_name(dtype) : "invalid");
  if (reduces(descriptor.kind)) {
    out << ", op=" << reduce_op_name(static_cast<ReduceOp>(descriptor.reduce_op));
  }
  if (descriptor.kind == OpKind::kBroadcast) out << ", src=" << descriptor.root;
  out << ", input_numel=" << descriptor.input_numel << ", output_numel=" << descriptor.output_numel;
  // Only a pull differs from what the sizes imply (SHMCCL_PULL_BROADCAST_RANKS may differ).
  if (descriptor.transfer == static_cast<uint8_t>(transport::Transfer::kPull)) out << ", pull";
  const int splits = std::clamp(descriptor.num_splits, 0, transport::kMaxRanks);
  if (splits > 0) {
    out << ", splits=[";
    for (int r = 0; r < splits; ++r)
      out << (r ? ", " : "") << descriptor.splits[r];
    out << "] rows of " << descriptor.row_elements;
  }
  out << ")";
  return out.str();
}

namespace {

// Whose arrivals a rank needs before it can finish an inline collective: everyone's, the root's
// only (a broadcast's receivers), or nobody's (a broadcast's root, a reduce-scatter rank that
// receives no rows). The data of an inline collective lives in the control block, so a rank that
// needs nobody's data may return as soon as it has arrived, as an MPI rank returns from an eager
// send: when ranks outnumber cores it does not wait for a scheduling round of its peers.
enum class Needs { kEveryone, kRoot, kNobody };

Needs inline_needs(const OpPlan& plan, int rank) {
  switch (plan.kind) {
    case OpKind::kBroadcast:
      return rank == plan.root ? Needs::kNobody : Needs::kRoot;
    case OpKind::kReduceScatter:
      return plan.splits[static_cast<size_t>(rank)] * plan.row_elements == 0 ? Needs::kNobody
                                                                             : Needs::kEveryone;
    default:
      return Needs::kEveryone;
  }
}

RemoteError mismatch(const char* call, int rank, const OpDescriptor& mine, int peer,
                     const OpDescriptor& theirs) {
  return RemoteError(detail::concat("collective mismatch in ", call, ": rank ", rank, " called ",
                                    describe(mine), " but rank ", peer, " called ",
                                    describe(theirs)));
}

// Before collective `plan` writes its slot entry (and inline area), when
// EarlyFinishes::entry_free() says it may not yet: waits until every rank arrived at the call
// after the entry's last one (none reads it any more), comparing the fingerprints of the calls this
// rank finished early as their arrivals come. After a pull broadcast that finished early, also
// until every rank arrived there, then until the other receivers have read the root's tensor:
// waiting here names a receiver that stalls mid-copy on every rank, not only on the root (a rank
// that disagreed on the call never reads it: the check reported it first).
[[gnu::noinline]] void settle_before_entry(detail::GroupState& state, const OpPlan& plan,
                                           uint64_t ring) {
  EarlyFinishes& early = state.early();
  transport::GroupTransport& transport = state.transport();
  const uint64_t sequence = plan.sequence;
  const uint64_t pull = early.pull_sequence();
  const int pull_root = early.pull_root();
  early.pull_settled();
  uint64_t needed = sequence >= ring ? sequence - ring + 1 : 0;
  needed = std::max(needed, pull);
  if (early.all_arrived() < needed) {
    transport.wait_until(
        [&] { return early.poll(transport, sequence) || early.all_arrived() >= needed; },
        state.timeout(),
        [&] {
          return detail::concat("before ", plan.name, " (sequence ", sequence, ", timeout ",
                                state.timeout().count(), " ms): ",
                                transport::ranks_have_not(transport::late_ranks(transport, needed),
                                                          "called collective "),
                                needed);
        });
    early.throw_if_mismatch(transport, sequence);
  }
  if (pull != 0) wait_for_receivers(state, pull_root, pull, "before", plan.name, sequence);
}

// Before the zero-copy paths touch the peers' tensors: a peer that failed this call after it
// arrived (it timed out waiting for this late rank, or an exception of its own came) gave up on
// it and may have returned the error to its caller, who may free or reuse its tensors; so the
// call fails here too, naming it. (Inline calls carry their data in the control block: their
// other ranks complete them.) A rank departs right after it gives up (a seq_cst increment of the
// header's `departures`), so while nobody departed this is one load.
void throw_if_a_peer_gave_up(const transport::GroupTransport& transport, const OpPlan& plan) {
  if (transport.header().departures.load(std::memory_order_seq_cst) == 0) [[likely]]
    return;
  const uint64_t sequence = plan.sequence;
  // The first to give up: later ones may have failed for it (its chunks left undone).
  const int peer = transport.first_departed([&](const transport::RankSlot& slot) {
    return slot.gave_up.load(std::memory_order_acquire) == sequence;
  });
  if (peer < 0) [[likely]]
    return;
  const transport::RankSlot& slot = transport.slot(peer);
  const std::string who = detail::concat("in ", plan.name, " (sequence ", plan.sequence, "): rank ",
                                         peer, " (pid ", transport.peer_pid(peer));
  if (transport::timed_out(slot)) {
    throw TimeoutError(detail::concat(who,
                                      ") gave up on the call before this rank came, and its "
                                      "tensors may be reused: ",
                                      transport::failure_text(slot)));
  }
  throw RemoteError(detail::concat(who,
                                   ") failed the call before this rank began to move data, and "
                                   "its tensors may be reused: ",
                                   transport::failure_text(slot)));
}

// The work pool's entry. The store, then the check above, pair with a peer's give-up, then its
// look at the ranks inside (wait_for_peers_in_zero_copy): of a rank entering and a peer giving
// up at the same moment, at least one sees the other (Dekker's pattern). The full fence that
// needs sits on the giver's side where membarrier can put it there (asymmetric_fence.h): the
// entry, on every call, then costs a plain store.
void enter_zero_copy(transport::GroupTransport& transport, const OpPlan& plan) {
  std::atomic<uint64_t>& entered = transport.slot(transport.rank()).zero_copy_entered;
  const uint64_t sequence = plan.sequence;
  if (transport::asymmetric_fences_enabled()) {
    entered.store(sequence, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    entered.store(sequence, std::memory_order_seq_cst);
  }
  throw_if_a_peer_gave_up(transport, plan);
}

// This rank failed collective `sequence` after it arrived, and has given up and departed. Peers
// that entered the zero-copy phase (the work pool, or the host pipeline's reads of NPU inputs)
// before the give-up reached them read and write this rank's tensors: its caller gets the error,
// and may reuse them, only once every such peer is out (its share done, or it gave up too, or its
// process exited). Such a peer entered before this rank's give-up, or saw the give-up and
// fails the call (enter_zero_copy): a peer that came late as this rank timed out, or peers
// that go on in the pool after this rank's own copy failed there. They are running, so this
// wait is short; it is bounded by the group's timeout all the same, and ignores the group's
// health (an abort or a dead third rank must not cut it short while a live peer is inside).
void wait_for_peers_in_zero_copy(detail::GroupState& state, uint64_t sequence) {
  transport::GroupTransport& transport = state.transport();
  auto inside = [&](int peer) {
    const transport::RankSlot& slot = transport.slot(peer);
    return slot.zero_copy_entered.load(std::memory_order_seq_cst) == sequence &&
           slot.pool_finished.load(std::memory_order_acquire) != sequence &&
           slot.gave_up.load(std::memory_order_acquire) != sequence && !transport.peer_exited(peer);
  };
  // The other half of enter_zero_copy's fence: every running thread of the ranks' processes
  // passes a full barrier, so an entry stored before it is seen below.
  transport::sleeper_fence();
  auto ranks_inside = [&] {
    std::string ranks;
    for (int peer = 0; peer < transport.size(); ++peer) {
      if (peer != transport.rank() && inside(peer))
        ranks += (ranks.empty() ? "" : ",") + std::to_string(peer);
    }
    return ranks;
  };
  std::string ranks = ranks_inside();
  if (ranks.empty()) [[likely]]
    return;
  SHMCCL_INFO(kColl, "group ", state.comm_name(), ": collective ", sequence, " failed while ranks ",
              ranks, " were in its tensors; waiting for them to leave");
  fault::point(fault::Point::kAwaitsPeers, global_rank(state), sequence);
  const auto deadline = detail::deadline_after(state.timeout());
  for (int i = 0;; ++i) {
    // Yield first (the peers are likely in the middle of a chunk), then sleep a millisecond at
    // a time on the wake word, which a departure bumps.
    const uint32_t observed = transport.header().wake_word.load(std::memory_order_seq_cst);
    ranks = ranks_inside();
    if (ranks.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (i < 64) {
      sched_yield();
    } else {
      transport::futex_wait(&transport.header().wake_word, observed, std::chrono::milliseconds(1));
    }
  }
  SHMCCL_WARN(kColl, "group ", state.comm_name(), ": after failing collective ", sequence,
              ", ranks ", ranks, " are still in this rank's tensors after the group's timeout (",
              state.timeout().count(), " ms): its caller must not reuse them while they live");
}

// A barrier's wait for every arrival. When ranks outnumber cores the other ranks also wait for
// rank 0's release, so rank 0 leaves first: a collective rooted at rank 0 that follows (barrier,
// then broadcast from 0) finds its root ahead of the receivers, as MPI's barriers have it.
// Without it, the receivers that held the cores when the barrier completed waited for the root's
// next time slice (4-6 us at 4 ranks on 2 cores); a loop of barriers pays the wait for rank 0's
// slice instead (3.0 -> 4.2 us there; docs/performance.md). With a core per rank the root runs
// anyway and the release would only add a line transfer: no wait. Rank 0 releases from barriers
// only: a rank 0 that called something else is a mismatch, which run()'s check reports.
[[gnu::noinline]] void wait_in_barrier(detail::GroupState& state, const OpPlan& plan) {
  transport::GroupTransport& transport = state.transport();
  EarlyFinishes& early = state.early();
  const uint64_t sequence = plan.sequence;
  const int entry = transport::ring_entry(sequence);
  const transport::RankSlot& first = transport.slot(0);
  const transport::RankSlot& mine = transport.slot(transport.rank());
  auto arrived = [&](int r) {
    return transport.slot(r).arrivals[entry].sequence.load(std::memory_order_seq_cst) == sequence;
  };
  // Rank 0 that gave up after arriving (it timed out waiting for a later rank) never releases:
  // once every rank arrived the barrier is complete anyway, as a late rank's small calls are.
  auto released = [&] {
    if (!transport.awaits_release() || transport.barrier_released(sequence)) return true;
    if (transport::gave_up_on(first, sequence)) [[unlikely]]
      return true;
    return arrived(0) && first.arrivals[entry].fingerprint.load(std::memory_order_relaxed) !=
                             mine.arrivals[entry].fingerprint.load(std::memory_order_relaxed);
  };
  transport.wait_until(
      [&] {
        if (early.poll_if_pending(transport, sequence)) [[unlikely]]
          return true;
        if (!released()) return false;
        for (int r = 0; r < transport.size(); ++r) {
          if (!arrived(r)) return false;
        }
        return true;
      },
      state.timeout(),
      [&] {
        const std::string late = transport::late_ranks(transport, sequence);
        return detail::concat("in ", plan.name, " (sequence ", sequence, ", timeout ",
                              state.timeout().count(), " ms): ",
                              late.empty() ? "rank 0 has not released it (every rank arrived)"
                                           : transport::ranks_have_not(late, "called it"));
      });
  early.throw_if_mismatch(transport, sequence);
  if (transport.rank() == 0) transport.release_barrier(sequence);
}

// The flight record of a collective that is not a small synchronous repeat of the call before
// it: an asynchronous call was recorded when it was scheduled and starts now; any other gets an
// entry; a new call starts a run.
[[gnu::noinline]] void record_call(TraceRing& trace, const OpPlan& plan, bool repeat) {
  if (plan.async_op) {
    trace.started(plan.sequence);
  } else {
    trace.scheduled(plan, false);
  }
  if (!repeat) trace.start_run(plan.sequence);
}

// The collective itself, recorded as it goes (execute() adds failure handling around it).
void run(detail::GroupState& state, const OpPlan& plan) {
  transport::GroupTransport& transport = state.transport();
  // A dead peer fails the waits below, not this check: the collective may still complete when
  // every rank it needs has arrived (a peer may finish early and exit, see Needs).
  if (transport.header().abort_flag.load(std::memory_order_acquire) != 0) [[unlikely]]
    transport.check_healthy();
  const int rank = transport.rank();
  const int size = transport.size();
  const int me = global_rank(state);
  const uint64_t sequence = plan.sequence;
  const int entry = transport::ring_entry(sequence);
  const Algorithm& algorithm = algorithm_for(plan.kind);
  transport::RankSlot& mine = transport.slot(rank);
  OpDescriptor& descriptor = mine.descriptors[entry];
  transport::ArrivalLine& arrival = mine.arrivals[entry];
  const uint64_t payload_bytes = algorithm.inline_bytes(plan, size);
  const bool inline_payload = payload_bytes <= inline_limit();
  // Tiny payloads ride in the arrival line itself: one cache-line transfer per peer.
  const bool in_arrival_line = payload_bytes <= transport::kArrivalPayloadBytes;
  // A broadcast too large for the slots may pull instead (the same choice on every rank).
  const bool pull = !inline_payload && pulls(plan, size);
  const transport::Transfer transfer =
      inline_payload
          ? (in_arrival_line ? transport::Transfer::kArrivalLine : transport::Transfer::kInlineArea)
          : (pull ? transport::Transfer::kPull : transport::Transfer::kArenas);
  const uint64_t ring =
      transport::ring_of_payload(transfer == transport::Transfer::kInlineArea, payload_bytes);
  EarlyFinishes& early = state.early();
  if (!early.entry_free(sequence, ring)) [[unlikely]]
    settle_before_entry(state, plan, ring);
  // The call's fingerprint and descriptor: a call that repeats the last one (a training loop)
  // reuses its hash, and its full descriptor when this entry of the slot already holds it.
  collectives::CallCache& calls = state.calls();
  TraceRing* const trace = state.trace();
  uint64_t hash = 0;
  bool repeat = false;  // the same call as the one before
  if (state.mismatch_check_active() || trace != nullptr) repeat = calls.remember(plan, transfer);
  // A small synchronous repeat of the call before: a member of its flight record's run.
  const bool extends_run = repeat && inline_payload && !plan.async_op;
  if (state.mismatch_check_active()) [[likely]] {
    hash = calls.hash();
    if (calls.descriptor_call(entry) != calls.id()) {
      fill_descriptor(plan, descriptor);
      descriptor.transfer = static_cast<uint8_t>(transfer);
      calls.set_descriptor_call(entry, calls.id());
    } else {
      descriptor.sequence = sequence;
    }
  } else {
    descriptor.sequence = sequence;
    calls.set_descriptor_call(entry, 0);
  }
  // A pull's receivers need the root alone (unless it has no arena to offer: see below).
  Needs needs = inline_payload              ? inline_needs(plan, rank)
                : pull && rank != plan.root ? Needs::kRoot
                                            : Needs::kEveryone;
  if (inline_payload && needs != Needs::kEveryone) claim_next_arrivals(mine, sequence);

  if (inline_payload) {
    algorithm.stage_inline(
        plan, rank,
        in_arrival_line ? arrival.payload : transport::inline_area(mine, sequence, payload_bytes));
  } else {
    descriptor.input = buffer_ref(plan.input());
    descriptor.output = buffer_ref(plan.output());
    for (size_t j = 0; j < plan.outputs().size(); ++j) {
      descriptor.outputs[j] = buffer_ref(plan.outputs()[j]);
    }
    describe_host_sides(state, plan, descriptor);
  }
  const uint64_t fingerprint = transport::call_fingerprint(sequence, hash);
  arrival.fingerprint.store(fingerprint, std::memory_order_relaxed);
  fault::point(fault::Point::kBeforeArrival, me, sequence, plan.kind == OpKind::kBarrier);
  // Release: descriptor, payload and fingerprint happen-before any peer that sees this arrival.
  // (seq_cst under TSan, which has no fences: see the fence below.)
  detail::release_to_peers();
  arrival.sequence.store(
      sequence, detail::kThreadSanitizer ? std::memory_order_seq_cst : std::memory_order_release);
  // A synchronous call is recorded now, while the arrival's line travels to the peers (the
  // store's ownership request is still under way: a seq_cst store would stall here until it
  // completes). A small one that repeats the last call extends its run, which it records once it
  // has completed (with the recorder on or off, this stretch then runs the same instructions).
  if (trace != nullptr && !extends_run) [[unlikely]]
    record_call(*trace, plan, repeat);
  // The arrival, then the reads of the others' arrivals and of notify()'s sleeper count, in the
  // single total order (Dekker with sleepers and with a racing last arrival): this fence makes the
  // release store above act as the seq_cst store they pair with. It waits for the arrival line's
  // ownership, a line transfer on every call. Where the sleepers make a barrier for everyone
  // instead (transport/asymmetric_fence.h), a rank that waits for one rank or none (a broadcast's
  // ranks, a reduce-scatter rank that receives nothing) uses a compiler barrier and wakes any
  // sleeper it sees (two racing last arrivals may miss each other without the fence): broadcast
  // of 8 B 0.065 -> 0.058 us. Ranks that wait for everyone keep the fence: without it their
  // 8 B all-reduce took 0.126 -> 0.133 us (they start polling before their line has left).
  const bool light_fence = needs != Needs::kEveryone && transport.light_arrival_fence();
  if (light_fence) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    detail::fence(std::memory_order_seq_cst);
  }
  auto arrived = [&](int r) {
    return transport.slot(r).arrivals[entry].sequence.load(std::memory_order_seq_cst) == sequence;
  };
  auto everyone_arrived = [&] {
    for (int r = 0; r < size; ++r) {
      if (!arrived(r)) return false;
    }
    return true;
  };
  // Most sleepers wait for everyone, so only the arrival that completes the set needs to wake
  // them (no thundering herd when ranks outnumber cores); a broadcast's receivers wait for the
  // root alone, so the root wakes them too. Two last arrivals racing: each store is fenced and
  // precedes its check, so at least one of them sees the other and wakes. With nobody asleep
  // (the fence orders this read after the arrival) no peer's line is read here.
  if (transport.someone_sleeps() &&
      (light_fence || (plan.kind == OpKind::kBroadcast && rank == plan.root) ||
       everyone_arrived())) {
    transport.notify();
  }
  // (After the wake-up: a rank that stalls here has arrived completely, sleepers included.)
  fault::point(fault::Point::kAfterArrival, me, sequence);

  const auto timeout = state.timeout();
  bool root_offers_arena = true;  // a pull's receivers: as the root's descriptor said
  // While earlier calls this rank finished early are unchecked, the waits check them too: a peer
  // that found one of them to differ reports it and never comes.
  auto or_mismatch = [&] { return early.poll_if_pending(transport, sequence); };
  if (needs == Needs::kRoot) {
    transport.wait_until([&] { return arrived(plan.root) || or_mismatch(); }, timeout,
                         [&] {
                           return detail::concat(
                               "in ", plan.name, " (sequence ", sequence, ", timeout ",
                               state.timeout().count(), " ms): rank ", plan.root,
                               " has not called it (its source, the rank it waits for)");
                         });
    early.throw_if_mismatch(transport, sequence);
    // The root of a pull has its tensor on the host: every rank takes the host pipeline
    // instead. (A root that called something else fails the fingerprint check below.) Read
    // once: the decision must not change under a corrupt peer's writes.
    if (pull && !offers_arena(transport.slot(plan.root).descriptors[entry])) [[unlikely]] {
      root_offers_arena = false;
      needs = Needs::kEveryone;
    }
  }
  if (plan.kind == OpKind::kBarrier) [[unlikely]] {
    wait_in_barrier(state, plan);
  } else if (needs == Needs::kEveryone) {
    auto describe = [&] {
      return detail::concat(
          "in ", plan.name, " (sequence ", sequence, ", timeout ", state.timeout().count(),
          " ms): ",
          transport::ranks_have_not(transport::late_ranks(transport, sequence), "called it"));
    };
    // Every rank that waits here waits for the same arrivals: a shared wait (the collective's
    // sequence names it), beside which ranks sharing a core spin instead of yielding to each
    // other (transport/core_mates.h). Not for an asynchronous call on a stream's thread: the
    // caller's thread may need the core meanwhile (but a waiter running it is that thread).
    const uint64_t shared_wait =
        plan.async_op && !npu::detail::running_helped_task() ? 0 : sequence;
    // A payload of a few lines in the inline areas costs one line transfer more than one in the
    // arrival line, unless its lines are asked for while the arrival is awaited (its writer
    // stores them first): asked for before each check, they travel with the arrival line in the
    // check that sees it. (Broadcast receivers, which wait for the root alone, mostly find it
    // arrived: setting this up cost them more than it saved.)
    if (inline_payload && !in_arrival_line && payload_bytes <= kPrefetchedPayloadBytes) {
      PayloadPrefetch prefetch;
      transport.wait_until(
          [&] {
            prefetch.fetch_all(transport, algorithm, plan, payload_bytes);
            return everyone_arrived() || or_mismatch();
          },
          timeout, describe, shared_wait);
    } else {
      transport.wait_until([&] { return everyone_arrived() || or_mismatch(); }, timeout, describe,
                           shared_wait);
    }
    early.throw_if_mismatch(transport, sequence);
  }
  if (needs == Needs::kEveryone) early.all_arrived_at(transport, sequence);

  ExecContext context(transport, plan, rank, size, transport.chunk_bytes());
  static config::CachedSetting<uint64_t, config::get_bytes> streaming_bytes(
      "SHMCCL_STREAMING_BYTES");
  context.streaming = !inline_payload && output_bytes(plan, size) >= streaming_bytes.get();
  auto throw_if_differs = [&](int r) {
    const transport::RankSlot& slot = transport.slot(r);
    if (slot.arrivals[entry].fingerprint.load(std::memory_order_relaxed) != fingerprint)
        [[unlikely]] {
      throw mismatch(plan.name, rank, descriptor, r, slot.descriptors[entry]);
    }
  };
  for (int r = 0; r < size; ++r) {
    const transport::RankSlot& slot = transport.slot(r);
    // A small early finish compares only the root it needed (a broadcast receiver), or nobody;
    // later waits compare the rest (EarlyFinishes). Two ranks that differ cannot both match the
    // root, so one of them still reports the mismatch at once. (Reading the other receivers'
    // lines here cost line transfers on every call of a loop of small broadcasts.) A pull's
    // receiver compares every rank there before it reads the root's memory: a root that saw a
    // mismatch leaves at once, and its memory may be gone.
    if (needs != Needs::kEveryone &&
        (inline_payload ? !(needs == Needs::kRoot && r == plan.root) : !arrived(r))) {
      continue;
    }
    throw_if_differs(r);
    context.descriptors[r] = &slot.descriptors[entry];
    context.payloads[r] = in_arrival_line ? slot.arrivals[entry].payload
                                          : transport::inline_area(slot, sequence, payload_bytes);
  }
  const bool pulling = pull && (rank == plan.root ? offers_arena(descriptor) : root_offers_arena);
  if (needs != Needs::kEveryone) early.finished_early(sequence, pulling ? plan.root : -1);
  fault::point(fault::Point::kBeforeCopy, me, sequence);
  if (inline_payload) {
    algorithm.finish_inline(context);
    fault::point(fault::Point::kMidCopy, me, sequence);
    fault::point(fault::Point::kAfterCopy, me, sequence);
    if (trace != nullptr) [[likely]] {
      if (extends_run) [[likely]] {
        trace->run_member_completed(sequence);
      } else {
        trace->finished(sequence, true, /*timed=*/plan.async_op);
      }
    }
    return;
  }
  // Work-pool collectives are long enough to afford precise times.
  if (trace != nullptr && !plan.async_op) trace->started(sequence);
  if (pulling) {
    if (rank == plan.root) {
      fault::point(fault::Point::kMidCopy, me, sequence);  // (it copies nothing)
      wait_for_receivers(state, plan.root, sequence, "in", plan.name, sequence);
    } else {
      pull_from_root(context, me);
      // A root that fails the call (a rank that differs came late, a timeout) gives up on it
      // before its caller sees the error and may reuse the tensor; a copy that overlapped that is
      // no result. If the copy read anything written after the give-up, the fence makes the
      // give-up visible here (x86 is multi-copy atomic).
      detail::fence(std::memory_order_seq_cst);
      if (transport::gave_up_on(transport.slot(plan.root), sequence)) [[unlikely]] {
        for (int r = 0; r < size; ++r) {
          if (arrived(r)) throw_if_differs(r);
        }
        transport.check_healthy();  // a dead peer, if this rank has noticed it yet
        throw RemoteError(detail::concat("in ", plan.name, " (sequence ", sequence, "): rank ",
                                         plan.root,
                                         ", its source, failed the call while this rank copied "
                                         "its tensor: ",
                                         transport::failure_text(transport.slot(plan.root))));
      }
    }
  } else if (uses_host_pipeline(context)) {
    // Peers read this rank's NPU input here too (only outputs on the host are staged).
    enter_zero_copy(transport, plan);
    run_host_pipeline(state, context, timeout);
    transport.slot(rank).pool_finished.store(sequence, std::memory_order_release);
  } else {
    enter_zero_copy(transport, plan);
    run_pool(state, context, algorithm, timeout);
  }
  fault::point(fault::Point::kAfterCopy, me, sequence);
  if (trace != nullptr) trace->finished(sequence, true, /*timed=*/true);
}

}  // namespace

void execute(detail::GroupState& state, const OpPlan& plan) {
  state.set_executing(plan.sequence);
  auto record_failure = [&] {
    TraceRing* trace = state.trace();
    if (trace == nullptr) return;
    // A synchronous call that failed before it arrived has no record yet.
    if (!plan.async_op && !trace->has(plan.sequence)) trace->scheduled(plan, false);
    trace->finished(plan.sequence, false, true);
  };
  try {
    state.check_not_failed();
  } catch (const Error&) {
    record_failure();
    state.leave_unrun_call(plan.sequence);
    throw;
  }
  // A failed call is given up (RankSlot::gave_up) before the caller sees the error and may
  // reuse its tensors: a pull's receiver may still be reading them.
  transport::RankSlot& mine = state.transport().slot(state.transport().rank());
  try {
    run(state, plan);
    plan.bump_output_versions();
  } catch (const std::exception& error) {  // shmccl::Error, and std::bad_alloc and the like
    transport::GroupTransport& transport = state.transport();
    const bool timed_out = dynamic_cast<const TimeoutError*>(&error) != nullptr;
    if (timed_out) fault::point(fault::Point::kTimedOut, global_rank(state), plan.sequence);
    transport.give_up(
        plan.sequence, error.what(),
        timed_out ? transport::FailureKind::kTimeout : transport::FailureKind::kRemote);
    record_failure();
    // Another thread may have failed the group first (an abort, which made this call fail, or
    // another call's timeout): this call still departs, and still waits for the peers in its
    // tensors before its caller may reuse them. Only the first failure is reported.
    const bool first_failure = state.mark_failed(error.what());
    // This rank runs no more collectives on the group: its peers must not wait for it (in this
    // call too, if it never arrived).
    const bool arrived = transport::arrived_at(mine, plan.sequence);
    transport.depart(arrived ? plan.sequence + 1 : plan.sequence);
    fault::point(fault::Point::kGaveUp, global_rank(state), plan.sequence);
    // A rank that timed out inside the pool waited its whole timeout for a peer there, which may
    // stay stalled: it does not wait again (docs/errors.md).
    const bool entered = mine.zero_copy_entered.load(std::memory_order_relaxed) == plan.sequence;
    if (arrived && !(timed_out && entered)) wait_for_peers_in_zero_copy(state, plan.sequence);
    if (first_failure) {
      SHMCCL_WARN(kColl, "group ", state.comm_name(), ": ", error.what());
      FlightRecorder::instance().dump(
          detail::concat("group ", state.comm_name(), ": ", error.what()), DumpTrigger::kFailure);
    }
    plan.bump_output_versions();  // partly written, maybe, and no peer writes them any more
    throw;
  }
}

void settle_early_finishes_before_leaving(detail::GroupState& state) {
  EarlyFinishes& early = state.early();
  // A failed group reported its failure; its ranks may disagree on where the calls stand.
  if (!early.pending() || state.failed()) return;
  transport::GroupTransport& transport = state.transport();
  const uint64_t next = state.executing() + 1;  // as if a next call came
  transport.wait_until(
      [&] { return early.poll(transport, next) || !early.pending(); }, state.timeout(),
      [&] {
        const uint64_t needed = early.all_arrived() + 1;
        return detail::concat("leaving the group (timeout ", state.timeout().count(), " ms): ",
                              transport::ranks_have_not(transport::late_ranks(transport, needed),
                                                        "called collective "),
                              needed);
      });
  early.throw_if_mismatch(transport, next);
}

const Algorithm& algorithm_for(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kAllGatherList:
      return kAllGatherAlgorithm;
    case OpKind::kReduceScatter:
      return kReduceScatterAlgorithm;
    case OpKind::kAllReduce:
      return kAllReduceAlgorithm;
    case OpKind::kBroadcast:
      return kBroadcastAlgorithm;
    case OpKind::kBarrier:
    case OpKind::kNone:
      break;
  }
  return kBarrierAlgorithm;
}

}  // namespace shmccl::collectives
