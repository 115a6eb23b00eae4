// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/core_mates.h"

#include <sched.h>

namespace shmccl::transport {

CoreMates::CoreMates(RankSlot* slots, int rank, int size, uint64_t wait_id)
    : slots_(slots), rank_(rank), size_(size), wait_id_(wait_id) {
  refresh_cpu();
  if (wait_id_ == 0) return;
  slots_[rank_].waits_in.store(wait_id_, std::memory_order_relaxed);
}

CoreMates::~CoreMates() {
  if (wait_id_ != 0) slots_[rank_].waits_in.store(0, std::memory_order_relaxed);
}

uint32_t publish_cpu(RankSlot& slot) {
  const int current = sched_getcpu();  // the vDSO: no system call
  const uint32_t cpu = current < 0 ? 0 : static_cast<uint32_t>(current);
  if (slot.wait_cpu.load(std::memory_order_relaxed) != cpu)
    slot.wait_cpu.store(cpu, std::memory_order_relaxed);
  return cpu;
}

uint32_t CoreMates::refresh_cpu() {
  cpu_ = publish_cpu(slots_[rank_]);
  return cpu_;
}

bool CoreMates::all_wait_here() const {
  if (wait_id_ == 0) return false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const RankSlot& slot = slots_[r];
    if (slot.wait_cpu.load(std::memory_order_relaxed) == cpu_ &&
        slot.waits_in.load(std::memory_order_relaxed) != wait_id_)
      return false;
  }
  return true;
}

}  // namespace shmccl::transport
