// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/early_finish.h"

#include "collectives/executor.h"
#include "core/check.h"
#include "shmccl/error.hpp"

namespace shmccl::collectives {

bool EarlyFinishes::check_call(const transport::GroupTransport& transport, uint64_t sequence) {
  const int entry = transport::ring_entry(sequence);
  const uint64_t mine = my_fingerprint(transport, entry);
  // (The size in a local: the atomic loads would make the compiler read it again each time.)
  const int size = transport.size();
  for (int r = 0; r < size; ++r) {
    // Every rank arrived at `sequence` (acquire before this call).
    if (!agrees(transport.slot(r).arrivals[entry], mine, sequence, r)) return false;
  }
  return true;
}

bool EarlyFinishes::poll(const transport::GroupTransport& transport, uint64_t current) {
  if (mismatch_rank_ >= 0) return true;
  // One pass over the ranks per call, each rank's fingerprint compared right after its arrival
  // was seen (that arrival is all check_call needs of it); the call counts as checked once every
  // rank passed. (Two passes and a call per check cost a rank that finishes every call early
  // about 65 instructions a call.)
  const int size = transport.size();
  while (all_arrived_ + 1 < current) {
    const uint64_t next = all_arrived_ + 1;
    const int entry = transport::ring_entry(next);
    const uint64_t bit = uint64_t{1} << entry;
    const bool check = (unchecked_ & bit) != 0;
    const uint64_t mine = my_fingerprint(transport, entry);
    for (int r = 0; r < size; ++r) {
      const transport::ArrivalLine& line = transport.slot(r).arrivals[entry];
      if (line.sequence.load(std::memory_order_acquire) < next) return false;
      if (check && !agrees(line, mine, next, r)) return true;
    }
    unchecked_ &= ~bit;
    all_arrived_ = next;
  }
  return false;
}

void EarlyFinishes::check_through(const transport::GroupTransport& transport, uint64_t through,
                                  uint64_t current) {
  for (uint64_t sequence = all_arrived_ + 1; sequence <= through && unchecked_ != 0; ++sequence) {
    const uint64_t bit = uint64_t{1} << transport::ring_entry(sequence);
    if ((unchecked_ & bit) == 0) continue;
    if (!check_call(transport, sequence)) throw_if_mismatch(transport, current);
    unchecked_ &= ~bit;
  }
}

void EarlyFinishes::throw_mismatch(const transport::GroupTransport& transport,
                                   uint64_t current) const {
  const int entry = transport::ring_entry(mismatch_sequence_);
  const char* which =
      mismatch_sequence_ + 1 == current ? "the previous collective" : "an earlier collective";
  throw RemoteError(detail::concat(
      "collective mismatch in ", which, ": rank ", transport.rank(), " called ",
      describe(transport.slot(transport.rank()).descriptors[entry]), " but rank ", mismatch_rank_,
      " called ", describe(transport.slot(mismatch_rank_).descriptors[entry])));
}

}  // namespace shmccl::collectives
