// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Runs one checked collective (an OpPlan) on a group: publish, wait for every rank, compare the
// calls, then move the data inline or through the work pool. Throws RemoteError (mismatch, dead
// peer, abort) or TimeoutError; either marks the group failed.
#pragma once

#include "collectives/group_state.h"
#include "collectives/op_plan.h"

namespace shmccl::collectives {

void execute(detail::GroupState& state, const OpPlan& plan);

// Before this rank leaves the group (ProcessGroup::shutdown): the calls it finished before every
// peer had arrived (a broadcast's root, a reduce-scatter rank that receives nothing) are compared
// with every rank's, as a later collective would have. Waits for the peers to arrive at them (the
// group's timeout at most); RemoteError on a mismatch or a peer that died or left without calling
// them, TimeoutError when one never comes. Without it, ranks that disagreed on their last such
// call (each its own broadcast root, say) all returned as if it had succeeded.
void settle_early_finishes_before_leaving(detail::GroupState& state);

// "all_gather_into_tensor_uneven(dtype=int32, input=2, output=5, splits=[2, 3])".
std::string describe(const transport::OpDescriptor& descriptor);

}  // namespace shmccl::collectives
