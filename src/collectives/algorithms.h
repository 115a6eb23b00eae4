// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The algorithm table's rows, one file each.
#pragma once

#include "collectives/op_plan.h"

namespace shmccl::collectives {

extern const Algorithm kAllGatherAlgorithm;      // kAllGather and kAllGatherList
extern const Algorithm kReduceScatterAlgorithm;  // kReduceScatter
extern const Algorithm kAllReduceAlgorithm;      // kAllReduce
extern const Algorithm kBroadcastAlgorithm;      // kBroadcast
extern const Algorithm kBarrierAlgorithm;        // kBarrier

}  // namespace shmccl::collectives
