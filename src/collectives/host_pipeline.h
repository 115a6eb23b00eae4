// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The host-staging pipeline: how a collective runs when some rank's tensors are on the host
// (the zero-copy work pool needs every tensor in an arena). The bytes are cut into windows
// w = 0, 1, ...; every rank with a host input copies its share of window w into its staging
// slot w % kStagingDepth (host_staging.h) and advances its `staged` counter (control_block.h);
// NPU inputs are read in place. Every rank then computes its own output of window w from every
// rank's source and advances `consumed`; a slot is rewritten only once every rank consumed the
// window it held, so a rank copies window w + 1 in while its peers copy window w out.
//   all-gather       rank j's window w: bytes [wW, (w+1)W) of its rows; each rank copies every
//                    rank's window into its output (or its per-rank output of the list form).
//   reduce-scatter   window w holds, for every destination rank i, the w-th piece of i's rows
//                    (pieces sized in proportion to the rows); rank i reduces its piece from
//                    every rank's slot into its output.
//   all-reduce       the same with an even split of the tensor: rank i reduces piece i into its
//                    own slot (or NPU tensor), advances `reduced`, and every rank copies every
//                    reduced piece out: a reduce-scatter and an all-gather per window. Small
//                    all-reduces (staging_geometry.cc) have every rank reduce whole windows from
//                    every source instead (one synchronisation less); an NPU tensor, which peers
//                    read in place, then receives window w once every peer consumed it.
//   broadcast        the root stages, the others copy.
// Reductions use the work pool's kernels in the same source order, so results are identical.
// A rank leaves once every rank consumed every window (its NPU input, read in place, stays
// untouched until then). Every wait has the group's timeout and fails on a dead peer or abort;
// every counter read from a peer is checked against the collective's window range.
#pragma once

#include <chrono>

#include "collectives/group_state.h"
#include "collectives/op_plan.h"

namespace shmccl::collectives {

// True when some rank's descriptor has a host tensor (the same answer on every rank: all read
// the same descriptors).
bool uses_host_pipeline(const ExecContext& context);

// Runs the collective of `context` through the pipeline; every rank has arrived.
void run_host_pipeline(detail::GroupState& state, ExecContext& context,
                       std::chrono::milliseconds timeout);

}  // namespace shmccl::collectives
