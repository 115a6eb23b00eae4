// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Fault injection for the reliability suite: SHMCCL_FAULT=<point>:<rank>[:<action>][:<sequence>]
// makes global rank <rank> kill itself (SIGKILL, the default action), stall (sleep until killed),
// exit (_exit(kFaultExitCode)), stop (SIGSTOP itself, and go on after a SIGCONT: a rank
// descheduled at the worst moment) or bad_alloc (throw std::bad_alloc: a local failure that is
// not a shmccl::Error) when it reaches <point> in collective number <sequence> of a group (any
// collective when omitted), once per process. Points (docs/reliability.md):
//
//   before_arrival  a collective, before this rank publishes its arrival
//   after_arrival   right after its arrival, before it waits for the others
//   before_copy     everyone arrived and agreed, before any data moves
//   mid_copy        work pool: after this rank ran its first chunk, before it counted it done
//                   (when it claims none: once the pool is empty); inline collectives: as
//                   after_copy
//   after_copy      the data moved, before the collective returns
//   joins_group     group creation, before this rank makes (its first rank) or opens the group's
//                   control block; <sequence> counts group creations (1: the default group)
//   publishes_group group creation, its first rank: the control block made, its name not yet
//                   published
//   rendezvous      group creation: attached to the control block, before waiting for the
//                   others
//   barrier         as before_arrival, in barriers only
//   timed_out       a wait of the collective timed out, before this rank gives up on the call
//   gave_up         this rank gave up on the failed call and departed, before its caller sees
//                   the error (and before it waits for peers still in its tensors)
//   awaits_peers    after gave_up, when peers are still in its tensors: before it waits for them
//   queues          an asynchronous call (or a synchronous one behind stream work), after it took
//                   its number, before it is queued on the group's stream
//   gemm            npu_grouped_mat_mul_all_reduce on a group of 2 or more, before the GEMMs of
//                   a round; <sequence> counts the call's rounds (1: the first)
//
// Compiled in when SHMCCL_FAULT_INJECTION is on (CMake; default: on with the tests). A point then
// costs one relaxed load of a global flag and a predicted branch; without it, nothing.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#ifndef SHMCCL_FAULT_INJECTION
#define SHMCCL_FAULT_INJECTION 0
#endif

namespace shmccl::collectives::fault {

enum class Point : uint8_t {
  kBeforeArrival,
  kAfterArrival,
  kBeforeCopy,
  kMidCopy,
  kAfterCopy,
  kRendezvous,
  kBarrier,
  kTimedOut,
  kGaveUp,
  kAwaitsPeers,
  kJoinsGroup,
  kPublishesGroup,
  kQueues,
  kGemm,
};

enum class Action : uint8_t { kKill, kStall, kExit, kStop, kBadAlloc };

inline constexpr int kFaultExitCode = 86;  // the exit code of the "exit" action

struct Spec {
  Point point = Point::kBeforeArrival;
  int rank = -1;
  Action action = Action::kKill;
  uint64_t sequence = 0;  // 0: the first time the point is reached
};

// Parses "<point>:<rank>[:<action>][:<sequence>]"; InvalidArgument names what is wrong.
Spec parse(const std::string& text);
const char* point_name(Point point);
const char* action_name(Action action);

// Reads SHMCCL_FAULT (init_process_group calls it; tests may call it again after a change).
void configure();

// For tests that stage an interleaving of ranks: `hook` runs at every point this process
// reaches (null: none), before SHMCCL_FAULT's action. Set it before the collectives run.
using Hook = void (*)(Point point, uint64_t sequence);
void set_hook(Hook hook);

namespace detail {
extern std::atomic<bool> g_armed;  // relaxed: a plain load on x86
void reached(Point point, int rank, uint64_t sequence, bool barrier);
}  // namespace detail

// The check at each point: cheap when nothing is armed.
inline void point(Point where, int rank, uint64_t sequence, bool barrier = false) {
#if SHMCCL_FAULT_INJECTION
  if (detail::g_armed.load(std::memory_order_relaxed)) [[unlikely]]
    detail::reached(where, rank, sequence, barrier);
#else
  (void)where, (void)rank, (void)sequence, (void)barrier;
#endif
}

// Whether injection is compiled into this build.
constexpr bool compiled_in() {
  return SHMCCL_FAULT_INJECTION != 0;
}

}  // namespace shmccl::collectives::fault
