// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// CallCache: what a rank remembers of its last collective call on a group, so that the call a
// training loop repeats costs neither a new fingerprint nor a new descriptor nor a new flight
// record. Comparing a call with the remembered one is one memcmp of OpPlan's CallFields block
// and a compare per split size; hashing it is a serial chain of multiplies, and writing its
// descriptor a dozen stores: measured against a 0.2 us collective, that was the cost of the
// always-on mismatch check (bench/recorder_overhead_bench.cc measures both).
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
  // Makes `plan` (its data travelling as `transfer` says) the remembered
  // call; true when it already was (same fields). Then hash() and id() describe it.
  bool remember(const OpPlan& plan, transport::Transfer transfer) {
    if (same(plan)) [[likely]]
      return true;
    refill(plan, transfer);
    return false;
  }
  // The next call is a new one, whatever it is.
  void forget() { fields_.name = nullptr; }
  uint64_t hash() const { return hash_; }
  // Distinct for each distinct call remembered in a row (1, 2, ...; 0 is never a call's id).
  uint64_t id() const { return id_; }

  // Entry `entry` of this rank's slot holds the full descriptor of call `id` (so a repeat only
  // needs the new sequence number there); 0 when unknown.
  uint64_t descriptor_call(int entry) const { return descriptor_call_[entry]; }
  void set_descriptor_call(int entry, uint64_t id) { descriptor_call_[entry] = id; }

 private:
  bool same(const OpPlan& plan) const;
  void refill(const OpPlan& plan, transport::Transfer transfer);

  // The remembered call.
  CallFields fields_{.name = nullptr};  // (no call's name: the first call is new)
  std::array<int64_t, transport::kMaxRanks> splits_{};

  uint64_t hash_ = 0;
  uint64_t id_ = 0;
  uint64_t descriptor_call_[transport::kCallRing] = {};
};

inline bool CallCache::same(const OpPlan& plan) const {
  // Only what the others do not imply (a repeat is what the hot path sees, so each compare
  // costs): the name identifies the API function and hence the op kind; the transfer follows
  // from the sizes; every output size follows from the input's and the split sizes (which the
  // API checked against the tensors).
  if (std::memcmp(static_cast<const CallFields*>(&plan), &fields_, sizeof(CallFields)) != 0)
    return false;
  for (int r = 0; r < plan.num_splits; ++r)
    if (plan.splits[static_cast<size_t>(r)] != splits_[static_cast<size_t>(r)]) return false;
  return true;
}

}  // namespace shmccl::collectives
