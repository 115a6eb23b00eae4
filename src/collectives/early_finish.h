// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// EarlyFinishes: what a rank still owes for the collectives it finished before every peer had
// arrived (executor.cc's Needs: a small broadcast's root and receivers, a small reduce-scatter's
// ranks that receive nothing, a pull broadcast's receivers). Such a call leaves two things open:
//  - the peers not there yet will still read this rank's slot entry of the call, so the entry
//    is written again (kCallRing calls later; a large inline area kInlineRing calls later) only
//    once every rank has arrived at the call after;
//  - their fingerprints were not compared with this rank's. They are compared as soon as every
//    rank is there: in any later wait, and at the latest before the entry is written again, so a
//    mismatch reaches this rank too, a few calls late (the ranks that waited report it at once).
// Ranks may thus run up to kCallRing - 1 calls apart, as MPI ranks run ahead on eager sends.
// A rank whose calls all wait for everyone pays one comparison per call here.
//
// A peer's entry of call s may be rewritten while this rank checks it: the fingerprint says
// which call it belongs to (call_fingerprint), and a peer rewrites it only after comparing call
// s with every rank itself, so an entry found rewritten needs no check.
//
// Used by the group's executing thread only.
#pragma once

#include <cstdint>

#include "transport/control_block.h"
#include "transport/group_transport.h"

namespace shmccl::collectives {

class EarlyFinishes {
 public:
  // Call `sequence` may write its slot entry and payload area, which it used `ring` calls ago
  // (transport::ring_of_payload), without waiting: every rank arrived at the call after that one
  // (then every earlier call is checked too), and no pull broadcast is open. The hot path's check.
  bool entry_free(uint64_t sequence, uint64_t ring) const {
    return all_arrived_ + ring > sequence && pull_sequence_ == 0;
  }
  // Every rank arrived at call `sequence`, which this rank waited for: compares the calls it
  // finished early before (RemoteError on a mismatch) and records the arrival.
  void all_arrived_at(const transport::GroupTransport& transport, uint64_t sequence) {
    if (unchecked_ != 0) [[unlikely]]
      check_through(transport, sequence, sequence);
    all_arrived_ = sequence;
  }
  // This rank finished call `sequence` early. `pull_root` >= 0: a pull broadcast from that
  // root, whose receivers may still read the root's tensor (the next call waits for them).
  void finished_early(uint64_t sequence, int pull_root) {
    unchecked_ |= uint64_t{1} << transport::ring_entry(sequence);
    if (pull_root >= 0) {
      pull_sequence_ = sequence;
      pull_root_ = pull_root;
    }
  }
  // Some early call is unchecked: a wait should call poll_if_pending() as it spins.
  bool pending() const { return unchecked_ != 0; }
  // For the ready-check of a wait: poll() when some early call is unchecked (one compare when
  // none is, the common case).
  bool poll_if_pending(const transport::GroupTransport& transport, uint64_t current) {
    return pending() && poll(transport, current);
  }
  // For waits while calls are unchecked: checks those every rank has arrived at (without
  // waiting); true when one of them is a mismatch, which throw_if_mismatch() then reports.
  bool poll(const transport::GroupTransport& transport, uint64_t current);
  // Throws the mismatch poll() found (RemoteError naming both calls), if any.
  void throw_if_mismatch(const transport::GroupTransport& transport, uint64_t current) const {
    if (mismatch_rank_ >= 0) [[unlikely]]
      throw_mismatch(transport, current);
  }

  // The pull broadcast this rank finished early (0: none) and its root.
  uint64_t pull_sequence() const { return pull_sequence_; }
  int pull_root() const { return pull_root_; }
  void pull_settled() {
    pull_sequence_ = 0;
    pull_root_ = -1;
  }
  // The last call every rank is known to have arrived at.
  uint64_t all_arrived() const { return all_arrived_; }

 private:
  // Checks the unchecked calls up to `through` (every rank arrived there); `current` is the
  // call being executed (for the message). Throws on a mismatch.
  void check_through(const transport::GroupTransport& transport, uint64_t through,
                     uint64_t current);
  [[noreturn]] void throw_mismatch(const transport::GroupTransport& transport,
                                   uint64_t current) const;
  // Compares call `sequence` with every rank; false (and the mismatch recorded) when one differs.
  bool check_call(const transport::GroupTransport& transport, uint64_t sequence);
  static uint64_t my_fingerprint(const transport::GroupTransport& transport, int entry) {
    return transport.slot(transport.rank())
        .arrivals[entry]
        .fingerprint.load(std::memory_order_relaxed);
  }
  // Rank r's arrival line of call `sequence`, read after its arrival there (acquire), against
  // this rank's fingerprint `mine`; false, and the mismatch recorded, when the call differs. The
  // line holds this call's fingerprint or a later call's, written after its owner compared this
  // call with every rank (then it needs no check).
  bool agrees(const transport::ArrivalLine& line, uint64_t mine, uint64_t sequence, int r) {
    const uint64_t theirs = line.fingerprint.load(std::memory_order_relaxed);
    if (transport::fingerprint_of_call(theirs, sequence) && theirs != mine) [[unlikely]] {
      mismatch_sequence_ = sequence;
      mismatch_rank_ = r;
      return false;
    }
    return true;
  }

  uint64_t all_arrived_ = 0;
  uint64_t unchecked_ = 0;  // bit ring_entry(s): early call s (> all_arrived_) not compared yet
  static_assert(transport::kCallRing <= 64);
  uint64_t pull_sequence_ = 0;
  int pull_root_ = -1;
  uint64_t mismatch_sequence_ = 0;  // poll() found this call to differ on mismatch_rank_
  int mismatch_rank_ = -1;
};

}  // namespace shmccl::collectives
