// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/core_mates.h"

#include <sched.h>

namespace shmccl::transport {

CoreMates::CoreMates(RankSlot* slots, int rank, int size, uint64_t wait_id)
    : slots_(slots), rank_(rank), size_(size), wait_id_(wait_id) {
  if (wait_id_ == 0) return;
  refresh_cpu();
  slots_[rank_].waits_in.store(wait_id_, std::memory_order_relaxed);
}

CoreMates::~CoreMates() {
  if (wait_id_ != 0) slots_[rank_].waits_in.store(0, std::memory_order_relaxed);
}

void CoreMates::refresh_cpu() {
  const int cpu = sched_getcpu();  // the vDSO: no system call
  cpu_ = cpu < 0 ? 0 : static_cast<uint32_t>(cpu);
  // Stored only when it changed: peers read this line in their waits.
  std::atomic<uint32_t>& published = slots_[rank_].wait_cpu;
  if (published.load(std::memory_order_relaxed) != cpu_)
    published.store(cpu_, std::memory_order_relaxed);
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
