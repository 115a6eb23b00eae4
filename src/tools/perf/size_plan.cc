// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "size_plan.h"

#include <algorithm>
#include <numeric>

namespace shmccl::perf {
namespace {

// splitmix64: a portable generator, so every rank (and every machine) draws the same numbers.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Rank r gets the elements between floor(count * W(r) / W(n)) and floor(count * W(r+1) / W(n)),
// where W(r) is the sum of the weights before r: shares proportional to the weights, rounded so
// that they sum to count exactly.
std::vector<int64_t> split_by_weights(int64_t count, const std::vector<int64_t>& weights) {
  const size_t n = weights.size();
  std::vector<int64_t> splits(n, 0);
  const int64_t total = std::accumulate(weights.begin(), weights.end(), int64_t{0});
  if (total == 0) {
    splits.back() = count;
    return splits;
  }
  int64_t before = 0;  // W(r)
  int64_t boundary = 0;
  for (size_t r = 0; r < n; ++r) {
    before += weights[r];
    const auto next = static_cast<int64_t>(static_cast<__int128>(count) * before / total);
    splits[r] = next - boundary;
    boundary = next;
  }
  return splits;
}

}  // namespace

std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  std::vector<int64_t> sizes;
  for (int64_t size = min_bytes; size > 0 && size <= max_bytes; size *= factor) {
    sizes.push_back(size);
    if (size > max_bytes / factor) break;  // the next step would pass max (or overflow)
  }
  return sizes;
}

std::vector<int64_t> split_counts(int64_t count, int world, const SplitPattern& pattern) {
  const size_t n = static_cast<size_t>(world);
  switch (pattern.kind) {
    case SplitPattern::Kind::kLinear: {
      std::vector<int64_t> weights(n);
      std::iota(weights.begin(), weights.end(), int64_t{1});
      return split_by_weights(count, weights);
    }
    case SplitPattern::Kind::kZero: {
      std::vector<int64_t> weights(n, 1);
      weights[0] = 0;
      return split_by_weights(count, weights);
    }
    case SplitPattern::Kind::kRandom: {
      uint64_t state = pattern.seed ^ (static_cast<uint64_t>(count) * 0xD1B54A32D192ED03ull);
      std::vector<int64_t> cuts(n - 1);
      for (int64_t& cut : cuts) {
        cut = static_cast<int64_t>(splitmix64(state) % (static_cast<uint64_t>(count) + 1));
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.push_back(count);
      std::vector<int64_t> splits(n);
      int64_t previous = 0;
      for (size_t r = 0; r < n; ++r) {
        splits[r] = cuts[r] - previous;
        previous = cuts[r];
      }
      return splits;
    }
  }
  return std::vector<int64_t>(n, 0);
}

int64_t SizePlan::offset(int rank) const {
  return std::accumulate(splits.begin(), splits.begin() + rank, int64_t{0});
}

SizePlan plan_size(Collective collective, ScalarType dtype, int64_t requested_bytes, int world,
                   const SplitPattern& pattern) {
  SizePlan plan;
  plan.requested_bytes = requested_bytes;
  const auto element = static_cast<int64_t>(element_size(dtype));
  plan.count = requested_bytes / element;
  if (is_split(collective)) {
    if (is_uneven(collective)) {
      plan.splits = split_counts(plan.count, world, pattern);
    } else {
      plan.count -= plan.count % world;
      plan.splits.assign(static_cast<size_t>(world), plan.count / world);
    }
  }
  plan.bytes = plan.count * element;
  return plan;
}

}  // namespace shmccl::perf
