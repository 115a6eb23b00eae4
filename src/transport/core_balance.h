// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Spreading a group's unbound ranks over the cores they may use. When ranks outnumber cores and
// are not bound, Linux can leave three of four ranks on one core and one on the other for
// 50-100 ms at a time (a sched_switch trace of tiny 4-rank calls on 2 cores: 0-20% of a run):
// the three waiters hand their core around by yields and stay cache-hot, so the load balancer
// declines to move one, and every call then takes twice its time. A waiting rank that sees its
// core hold two ranks more than another core it may run on, at two looks in a row, moves itself
// there, by narrowing its affinity to that core and widening it back at once: the scheduler's
// choice again from there. The CPUs compared are the ones the ranks publish as they wait
// (core_mates.h); a look reads shared lines and makes no system call unless this rank is the
// highest on a shared core. Measured in docs/performance.md ("Crowded cores", session 47).
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "transport/control_block.h"

namespace shmccl::transport {

// Where rank `rank` should move, given the CPU each rank of the job was last seen on and the CPUs
// it may run on: a CPU with at least two ranks fewer than its own, the one with fewest; -1 when
// there is none or another rank on its CPU has a higher number (that one moves instead).
int crowded_core_target(const std::vector<uint32_t>& rank_cpus, int rank, const cpu_set_t& allowed);

class CoreBalance {
 public:
  using Clock = std::chrono::steady_clock;
  CoreBalance(RankSlot* slots, int rank, int size) : slots_(slots), rank_(rank), size_(size) {}

  // Called by a waiting rank between yields, `cpu` being where it runs now. Looks at most every
  // kLookInterval; moves when two looks in a row found the same target, then looks again only
  // after kMoveInterval. True when it moved the calling thread.
  bool maybe_move(uint32_t cpu, Clock::time_point now);

  // A look at most this often: placements last milliseconds, and a look reads every rank's slot.
  static constexpr std::chrono::milliseconds kLookInterval{1};
  // After a move, none for this long: the scheduler's own balancing and wake-up placement get
  // their turn, and two ranks that judged from the same stale view cannot ping-pong fast.
  static constexpr std::chrono::milliseconds kMoveInterval{20};

 private:
  bool look(uint32_t cpu, Clock::time_point now);

  RankSlot* const slots_;
  const int rank_;
  const int size_;
  std::atomic<bool> looking_{false};
  // Written by the looking thread, read by any before it tries to look: a stale read only makes
  // a look early or late.
  std::atomic<Clock::time_point> next_look_{Clock::time_point{}};
  std::vector<uint32_t> rank_cpus_;
  int pending_target_ = -1;  // the target the last look found (-1: none)
};

}  // namespace shmccl::transport
