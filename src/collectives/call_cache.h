// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// CallCache: what a rank remembers of its last few collective calls on a group, so that a call
// a training loop repeats costs neither a new fingerprint nor a new descriptor nor a new flight
// record. Comparing a call with the remembered one is one memcmp of OpPlan's CallFields block
// and a compare per split size; hashing it is a serial chain of multiplies, and writing its
// descriptor a dozen stores: measured against a 0.2 us collective, that was the cost of the
// always-on mismatch check (bench/recorder_overhead_bench.cc measures both). A loop that
// alternates a few calls (an all-gather and a reduce-scatter, say) keeps each one's hash, and
// its descriptor in the slot entries that held it before (with an even number of calls, every
// entry of the ring holds the same call each time).
//
// The call's hash covers exactly what every rank must agree on (op, dtype, reduce op, root, the
// sizes that are common to all ranks, the split sizes, and how the data travels); a
// collective's fingerprint is that hash with its sequence number (transport::call_fingerprint).
// The remembered fields are a
// superset (a rank's own sizes too), so a call equal to the remembered one has the same hash.
// Ranks compare the fingerprints of one sequence number, which are equal exactly when the hashes
// are.
//
// Thread-safety: used by the thread that executes the group's collectives (one at a time).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "collectives/op_plan.h"

namespace shmccl::collectives {

// A sequence-free hash of the fields every rank must agree on (different calls collide with
// probability about 2^-64).
uint64_t call_hash(const OpPlan& plan, transport::Transfer transfer);

class CallCache {
 public:
  static constexpr int kCalls = 4;  // calls remembered (the least recently used one makes way)

  CallCache() = default;
  CallCache(const CallCache&) = delete;  // current_ points into the object
  CallCache& operator=(const CallCache&) = delete;

  // Makes `plan` (its data travelling as `transfer` says) the current call; true when it was
  // the current call already (the same fields: a repeat). Then hash() and id() describe it.
  bool remember(const OpPlan& plan, transport::Transfer transfer) {
    if (same(*current_, plan, transfer)) [[likely]]
      return true;
    switch_to(plan, transfer);
    return false;
  }
  // The next call is not a repeat, whatever it is (its hash and id stay remembered).
  void forget() { current_ = &none_; }
  uint64_t hash() const { return current_->hash; }
  // Distinct for each distinct call remembered (1, 2, ...; 0 is never a call's id); a call that
  // comes back while still remembered keeps its id.
  uint64_t id() const { return current_->id; }

  // Entry `entry` of this rank's slot holds the full descriptor of call `id` (so a repeat only
  // needs the new sequence number there); 0 when unknown.
  uint64_t descriptor_call(int entry) const { return descriptor_call_[entry]; }
  void set_descriptor_call(int entry, uint64_t id) { descriptor_call_[entry] = id; }

 private:
  struct Remembered {
    CallFields fields{.name = nullptr};  // (no call's name: matches no call)
    std::array<int64_t, transport::kMaxRanks> splits{};
    uint64_t hash = 0;
    uint64_t id = 0;
    uint64_t last_used = 0;
    transport::Transfer transfer = transport::Transfer::kArenas;
  };
  static bool same(const Remembered& call, const OpPlan& plan, transport::Transfer transfer);
  // Makes the remembered call equal to `plan` current, or else refills the least recently used.
  void switch_to(const OpPlan& plan, transport::Transfer transfer);

  std::array<Remembered, kCalls> calls_{};
  Remembered none_{};  // current after forget(), and at first
  Remembered* current_ = &none_;
  uint64_t next_id_ = 0;
  uint64_t switches_ = 0;  // the clock of last_used
  uint64_t descriptor_call_[transport::kCallRing] = {};
};

inline bool CallCache::same(const Remembered& call, const OpPlan& plan,
                            transport::Transfer transfer) {
  // Only what the others do not imply (a repeat is what the hot path sees, so each compare
  // costs): the name identifies the API function and hence the op kind; every output size
  // follows from the input's and the split sizes (which the API checked against the tensors).
  // The transfer follows from the sizes and from settings a config::reload() may change (a
  // broadcast that pulls, SHMCCL_PULL_BROADCAST_RANKS): it is compared too.
  if (call.transfer != transfer) return false;
  if (std::memcmp(static_cast<const CallFields*>(&plan), &call.fields, sizeof(CallFields)) != 0)
    return false;
  for (int r = 0; r < plan.num_splits; ++r)
    if (plan.splits[static_cast<size_t>(r)] != call.splits[static_cast<size_t>(r)]) return false;
  return true;
}

}  // namespace shmccl::collectives
