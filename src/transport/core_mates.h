// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Waiting beside core-mates when ranks outnumber cores. A waiting rank yields so that the ranks
// sharing its core can run and arrive. But once they have arrived and wait for the very same
// thing (every rank's arrival at one collective), a yield only hands the core to a rank that
// checks and yields it back: a context switch each way (1.4 us in this VM), and the arrival from
// the other core that completes the collective is noticed a switch late. A rank whose
// core-mates all wait where it waits spins instead, for a bounded time, so that each core
// switches about once per rank and collective (tracing a loop of tiny all-reduces at 4 ranks on
// 2 cores: ~1.6 switches per core and call before, ~1.2 after).
//
// Each rank publishes in its slot the CPU it runs on and the shared wait it is in. Both are
// hints: a rank that migrated, or a thread of another program on the same core, costs at most
// one spin budget (SHMCCL_MATE_SPIN_TIME) before the waiter yields again.
#pragma once

#include <cstdint>

#include "transport/control_block.h"

namespace shmccl::transport {

// Publishes in `slot` the CPU the calling thread runs on (a store only when it changed: peers read
// the line in their waits) and returns it. Ranks publish it as they attach, too, so that a rank
// that never waited is not taken for one on CPU 0.
uint32_t publish_cpu(RankSlot& slot);

class CoreMates {
 public:
  // Publishes the CPU of rank `rank`, and that it waits in shared wait `wait_id` (0: none, and
  // all_wait_here() is always false). A shared wait is one in which every rank waits for the same
  // condition, so a rank in it cannot finish before any other rank in it can.
  CoreMates(RankSlot* slots, int rank, int size, uint64_t wait_id);
  ~CoreMates();
  CoreMates(const CoreMates&) = delete;
  CoreMates& operator=(const CoreMates&) = delete;

  // True when every other rank last seen on this rank's CPU is in the same shared wait: none of
  // them can make progress with the core before this rank can.
  bool all_wait_here() const;
  // Publishes the CPU again (after a yield, which may have let the scheduler move this rank) and
  // returns it. Every waiter publishes it, in a shared wait or not (core_balance.h reads it).
  uint32_t refresh_cpu();

 private:
  RankSlot* const slots_;
  const int rank_;
  const int size_;
  const uint64_t wait_id_;
  uint32_t cpu_ = 0;
};

}  // namespace shmccl::transport
