// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/core_balance.h"

#include <array>
#include <vector>

namespace shmccl::transport {

int crowded_core_target(const std::vector<uint32_t>& rank_cpus, int rank,
                        const cpu_set_t& allowed) {
  const uint32_t mine = rank_cpus[static_cast<size_t>(rank)];
  if (CPU_COUNT(&allowed) < 2) return -1;
  std::array<uint16_t, CPU_SETSIZE> ranks_on{};  // on the stack: a wait allocates nothing
  for (size_t r = 0; r < rank_cpus.size(); ++r) {
    const uint32_t cpu = rank_cpus[r];
    if (cpu >= CPU_SETSIZE) continue;
    ++ranks_on[cpu];
    // Only the highest rank on a crowded core moves: ranks that share a view of the placement
    // must not all leave together.
    if (cpu == mine && static_cast<int>(r) > rank) return -1;
  }
  if (mine >= CPU_SETSIZE) return -1;
  // A move must leave both cores no worse off: the target holds at least two ranks fewer.
  int target = -1;
  int fewest = ranks_on[mine] - 1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed) && ranks_on[cpu] < fewest) {
      fewest = ranks_on[cpu];
      target = cpu;
    }
  }
  return target;
}

bool CoreBalance::maybe_move(uint32_t cpu, Clock::time_point now) {
  if (now < next_look_.load(std::memory_order_relaxed)) return false;
  // One thread looks at a time (a rank's stream threads wait in its groups too).
  if (looking_.exchange(true, std::memory_order_acquire)) return false;
  const bool moved = look(cpu, now);
  looking_.store(false, std::memory_order_release);
  return moved;
}

bool CoreBalance::look(uint32_t cpu, Clock::time_point now) {
  next_look_.store(now + kLookInterval, std::memory_order_relaxed);
  rank_cpus_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r)
    rank_cpus_[static_cast<size_t>(r)] =
        r == rank_ ? cpu : slots_[r].wait_cpu.load(std::memory_order_relaxed);
  // First with every CPU allowed: only the highest rank on a shared CPU goes on to read its
  // thread's mask (a system call).
  static const cpu_set_t everywhere = [] {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      CPU_SET(c, &all);
    return all;
  }();
  if (crowded_core_target(rank_cpus_, rank_, everywhere) < 0) {
    pending_target_ = -1;
    return false;
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  const int target = crowded_core_target(rank_cpus_, rank_, allowed);
  // Only a crowding seen at two looks in a row: a sleeping rank's CPU is where it last ran, and a
  // view that mixes it with fresh ones may show a crowding that is already gone.
  const bool seen_before = target >= 0 && target == pending_target_;
  pending_target_ = target;
  if (!seen_before) return false;
  pending_target_ = -1;
  // Narrowed to the target, the kernel migrates this thread at once; widened back, it stays
  // there until the scheduler chooses otherwise.
  cpu_set_t only;
  CPU_ZERO(&only);
  CPU_SET(target, &only);
  if (sched_setaffinity(0, sizeof(only), &only) != 0) return false;
  sched_setaffinity(0, sizeof(allowed), &allowed);
  next_look_.store(now + kMoveInterval, std::memory_order_relaxed);
  return true;
}

}  // namespace shmccl::transport
