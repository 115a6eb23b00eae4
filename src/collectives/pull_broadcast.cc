// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/pull_broadcast.h"

#include <algorithm>

#include "collectives/fault_injection.h"
#include "core/config.h"
#include "core/logging.h"
#include "core/memory_order.h"

namespace shmccl::collectives {
namespace {

uint64_t pulled(const transport::RankSlot& slot) {
  return slot.pulled.load(std::memory_order_acquire);
}

// True when every rank but `root` has finished reading broadcast `sequence`.
bool everyone_pulled(const transport::GroupTransport& transport, int root, uint64_t sequence) {
  for (int r = 0; r < transport.size(); ++r) {
    if (r != root && pulled(transport.slot(r)) < sequence) return false;
  }
  return true;
}

// Marks this rank done reading `sequence`; the receiver that completes the set wakes the root
// (and anyone else asleep on the group's word).
void mark_pulled(transport::GroupTransport& transport, int root, uint64_t sequence) {
  // Release: this rank's reads of the root's tensor happen-before the root's return.
  detail::release_to_peers();
  transport.slot(transport.rank())
      .pulled.store(sequence, detail::kThreadSanitizer ? std::memory_order_seq_cst
                                                       : std::memory_order_release);
  // The store, then the reads of the others' marks and of notify()'s sleeper count, in the
  // single total order: of two receivers finishing together, at least one sees the other.
  detail::fence(std::memory_order_seq_cst);
  if (everyone_pulled(transport, root, sequence)) transport.notify();
}

}  // namespace

bool pulls(const OpPlan& plan, int size) {
  if (plan.kind != transport::OpKind::kBroadcast || size <= 1) return false;
  static config::CachedSetting<int64_t, config::get_int> from_ranks("SHMCCL_PULL_BROADCAST_RANKS");
  const int64_t threshold = from_ranks.get();
  return threshold > 0 && size >= threshold;
}

void pull_from_root(const ExecContext& context, int fault_rank) {
  const OpPlan& plan = context.plan;
  const uint64_t sequence = plan.sequence;
  const uint64_t bytes = plan.input_bytes();
  try {
    // The size comes from the (agreed) plan; resolve() checks it against the root's arena.
    const char* source = context.transport.resolve(context.descriptors[plan.root]->input, bytes,
                                                   element_size(plan.dtype));
    char* destination = static_cast<char*>(plan.output().data_ptr());
    for (uint64_t offset = 0; offset < bytes; offset += context.chunk_bytes) {
      context.copy(destination + offset, source + offset,
                   std::min<uint64_t>(context.chunk_bytes, bytes - offset));
      if (offset == 0) fault::point(fault::Point::kMidCopy, fault_rank, sequence);
    }
  } catch (...) {
    // This rank reads no more: the root need not wait for it (it reports its own error).
    mark_pulled(context.transport, plan.root, sequence);
    throw;
  }
  mark_pulled(context.transport, plan.root, sequence);
}

void wait_for_receivers(detail::GroupState& state, int root, uint64_t sequence, const char* where,
                        const char* call, uint64_t at) {
  transport::GroupTransport& transport = state.transport();
  // A receiver that gave up on the broadcast before it read (it timed out waiting for a late
  // root, say) never will: it departed only after the broadcast, which the group's health does
  // not count, so the wait must look for it.
  const transport::RankSlot* const root_slot = &transport.slot(root);
  auto gave_up_unread = [&] {
    return transport.first_departed([&](const transport::RankSlot& slot) {
      return &slot != root_slot && transport::gave_up_on(slot, sequence) && pulled(slot) < sequence;
    });
  };
  transport.wait_until(
      [&] { return everyone_pulled(transport, root, sequence) || gave_up_unread() >= 0; },
      state.timeout(),
      [&] {
        return detail::concat(
            where, " ", call, " (sequence ", at, ", timeout ", state.timeout().count(), " ms): ",
            transport::ranks_have_not(transport::ranks_below(transport, sequence, pulled, root),
                                      "finished copying broadcast "),
            sequence, " from rank ", root);
      });
  if (everyone_pulled(transport, root, sequence)) return;
  const int peer = gave_up_unread();
  const transport::RankSlot& slot = transport.slot(peer);
  const std::string message =
      detail::concat(where, " ", call, " (sequence ", at, "): rank ", peer, " (pid ",
                     transport.peer_pid(peer), ") gave up on broadcast ", sequence, " from rank ",
                     root, " before it read the root's tensor: ", transport::failure_text(slot));
  if (transport::timed_out(slot)) throw TimeoutError(message);
  throw RemoteError(message);
}

void settle_pull_before_leaving(detail::GroupState& state) noexcept {
  const int root = state.early().pull_root();
  const uint64_t sequence = state.early().pull_sequence();
  if (root < 0 || sequence == 0) return;
  try {
    state.check_not_failed();
    wait_for_receivers(state, root, sequence, "leaving", "the group", sequence);
  } catch (const std::exception& error) {
    SHMCCL_WARN(kColl, "group ", state.comm_name(), ": ", error.what());
  }
}

}  // namespace shmccl::collectives
