// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Which sizes a run measures and, for each, how many elements every rank's tensors hold: the
// element count of the size (rounded down to what the collective needs) and, for all-gather and
// reduce-scatter, the rows of each rank (even, or per the -z pattern). Pure functions: every rank
// computes the same plan from the same options, with no communication.
#pragma once

#include <cstdint>
#include <vector>

#include "collective.h"
#include "options.h"
#include "shmccl/dtype.hpp"

namespace shmccl::perf {

// min, min*factor, min*factor^2, ... up to max (inclusive), as nccl-tests steps.
std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor);

// Splits `count` elements between `world` ranks per `pattern` (the sum is `count`). For kRandom
// the cut points depend on the seed and on `count`, so every size gets a new split.
//   linear: rank r's share is proportional to r + 1 (cumulative shares rounded down).
//   zero:   rank 0 gets none, the others equal shares (with one rank, it gets everything).
std::vector<int64_t> split_counts(int64_t count, int world, const SplitPattern& pattern);

struct SizePlan {
  int64_t requested_bytes = 0;  // the size of the sweep
  int64_t count = 0;            // elements of the size: output elements for all-gather, input
                                // elements for reduce-scatter, buffer elements otherwise
  int64_t bytes = 0;            // count * element size: the size column
  // All-gather and reduce-scatter: elements of each rank's slice (they sum to count). Empty for
  // all-reduce and broadcast.
  std::vector<int64_t> splits;

  // Elements before rank's slice.
  int64_t offset(int rank) const;
  int64_t split(int rank) const { return splits[static_cast<size_t>(rank)]; }
};

// Element counts round down to whole elements, and for the even all-gather and reduce-scatter to
// a multiple of `world` (each rank's slice is count / world). The _uneven ops take any count and
// split it per `pattern`.
SizePlan plan_size(Collective collective, ScalarType dtype, int64_t requested_bytes, int world,
                   const SplitPattern& pattern);

}  // namespace shmccl::perf
