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

// "all_gather_into_tensor_uneven(dtype=int32, input=2, output=5, splits=[2, 3])".
std::string describe(const transport::OpDescriptor& descriptor);

}  // namespace shmccl::collectives
