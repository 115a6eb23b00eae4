// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/call_cache.h"

namespace shmccl::collectives {
namespace {

using transport::OpKind;

bool reduces(OpKind kind) {
  return kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce;
}

}  // namespace

uint64_t call_hash(const OpPlan& plan, transport::Transfer transfer) {
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](uint64_t value) {
    hash ^= value;
    hash *= 0x100000001b3ull;
    hash ^= hash >> 29;
  };
  mix(static_cast<uint64_t>(plan.kind) |
      (static_cast<uint64_t>(static_cast<uint8_t>(plan.dtype)) << 8) |
      (static_cast<uint64_t>(transfer) << 16));
  mix(static_cast<uint64_t>(plan.row_elements));
  mix(static_cast<uint64_t>(plan.num_splits));
  if (reduces(plan.kind)) mix(static_cast<uint64_t>(plan.reduce_op));
  if (plan.kind == OpKind::kBroadcast) mix(static_cast<uint64_t>(plan.root));
  // Sizes every rank shares (a rank's own part is checked against the split locally).
  if (plan.kind == OpKind::kAllReduce || plan.kind == OpKind::kBroadcast ||
      plan.kind == OpKind::kReduceScatter) {
    mix(static_cast<uint64_t>(plan.input_numel()));
  }
  if (plan.kind == OpKind::kAllGather) mix(static_cast<uint64_t>(plan.output_numel()));
  for (int r = 0; r < plan.num_splits; ++r)
    mix(static_cast<uint64_t>(plan.splits[static_cast<size_t>(r)]));
  return hash;
}

void CallCache::switch_to(const OpPlan& plan, transport::Transfer transfer) {
  Remembered* least_recent = &calls_[0];
  for (Remembered& call : calls_) {
    if (same(call, plan, transfer)) {
      call.last_used = ++switches_;
      current_ = &call;
      return;
    }
    if (call.last_used < least_recent->last_used) least_recent = &call;
  }
  Remembered& call = *least_recent;
  call.fields = plan;
  for (int r = 0; r < plan.num_splits; ++r)
    call.splits[static_cast<size_t>(r)] = plan.splits[static_cast<size_t>(r)];
  call.hash = call_hash(plan, transfer);
  call.transfer = transfer;
  call.id = ++next_id_;
  call.last_used = ++switches_;
  current_ = &call;
}

}  // namespace shmccl::collectives
