// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Pull broadcast: past the inline sizes, each receiver copies the root's tensor straight from the
// root's arena into its own output (NPU or host), and the root only waits until every receiver
// has finished reading (its tensor must stay untouched until then). A receiver waits for the root
// alone, never for the other receivers. When ranks outnumber cores that is the difference: the
// work pool cannot start before every rank has arrived, so each of its ranks waits for a
// scheduling round of all its peers, while a receiver here copies as soon as it runs after the
// root. When every rank has a core, the work pool's split of the copies between all ranks wins
// (the root copies too): broadcasts pull from SHMCCL_PULL_BROADCAST_RANKS ranks up.
//
// Every rank derives the choice from the call and the group size (Transfer::kPull, covered by
// the fingerprint, so ranks configured differently get a mismatch, not a hang). A root whose
// tensor is on the host has no arena to read from: the others see that in its descriptor and
// all run the host-staging pipeline instead.
//
// Receivers finish early (they need the root's arrival only); like other early finishes, their
// next collective first waits until every rank arrived here (executor.cc), and, for a pull, until
// every receiver finished reading, so that a receiver stalled mid-copy is named by all.
#pragma once

#include <cstdint>

#include "collectives/group_state.h"
#include "collectives/op_plan.h"

namespace shmccl::collectives {

// True when broadcast `plan`, too large to travel inline, pulls in a group of `size` ranks.
bool pulls(const OpPlan& plan, int size);

// True when the root's descriptor offers its tensor in an arena, so the pull can run; else the
// collective takes the host-staging pipeline.
inline bool offers_arena(const transport::OpDescriptor& root) {
  return (root.host_sides & transport::kHostInput) == 0;
}

// Receiver: copies the root's tensor into this rank's output, then marks it read. `fault_rank`
// is the global rank fault injection knows this process by.
void pull_from_root(const ExecContext& context, int fault_rank);

// Waits until every receiver of pull broadcast `sequence` from `root` has read the root's tensor,
// for at most the group's timeout (TimeoutError naming the others, RemoteError when one dies).
// A receiver that gave up on the broadcast before it read ends the wait at once, named (a
// TimeoutError when it timed out).
// The root waits so in the broadcast itself; a receiver that finished early, before its next
// collective and before it leaves the group. The message begins "<where> <call> (sequence <at>".
void wait_for_receivers(detail::GroupState& state, int root, uint64_t sequence, const char* where,
                        const char* call, uint64_t at);

// Before this rank leaves the group (its ProcessGroup is destroyed): when its last collective
// was a pull it finished early, waits for the other receivers, so that its exit does not fail
// a root still waiting for them. Errors are logged, not thrown.
void settle_pull_before_leaving(detail::GroupState& state) noexcept;

}  // namespace shmccl::collectives
