// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// How the host pipeline cuts a collective into windows (see host_pipeline.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "collectives/op_plan.h"

namespace shmccl::collectives {

// A piece of one window in a source tensor: bytes [offset, offset + bytes).
struct Span {
  uint64_t offset;
  uint64_t bytes;
};

inline Span clamp_span(uint64_t begin, uint64_t length, uint64_t start, uint64_t most) {
  if (start >= length) return {begin + length, 0};
  return {begin + start, std::min(most, length - start)};
}

inline uint64_t ceil_div(uint64_t a, uint64_t b) {
  return b == 0 ? 0 : (a + b - 1) / b;
}

// The shape of the host pipeline (host_pipeline.h) for one collective: how many windows, and
// which bytes of each rank's input window w holds. Computed from the agreed plan and the ranks'
// windows only, so every rank computes the same one; plain data.
struct StagingGeometry {
  bool pieces = false;   // reduce-scatter, all-reduce: one piece per destination rank per window
  uint64_t window = 0;   // bytes per slot
  uint64_t windows = 0;  // windows of this collective
  uint64_t source_bytes[transport::kMaxRanks];  // bytes of each rank's input the collective reads
  // With pieces: destination i's bytes [begin, begin + length) of every input, `piece` of them
  // per window, at `slot_offset` in each slot.
  uint64_t begin[transport::kMaxRanks];
  uint64_t length[transport::kMaxRanks];
  uint64_t piece[transport::kMaxRanks];
  uint64_t slot_offset[transport::kMaxRanks];

  // Piece `i` (0 without pieces) of window `w` (counted from the collective's first) of rank
  // `source`'s input.
  Span span(int source, uint64_t w, int i) const {
    if (pieces) return clamp_span(begin[i], length[i], w * piece[i], piece[i]);
    return clamp_span(0, source_bytes[source], w * window, window);
  }
  // Windows in which piece `i` (or rank `source`'s input without pieces) has data.
  uint64_t active_windows(int source, int i) const {
    return pieces ? ceil_div(length[i], piece[i]) : ceil_div(source_bytes[source], window);
  }
};

StagingGeometry staging_geometry(const ExecContext& context);

}  // namespace shmccl::collectives
