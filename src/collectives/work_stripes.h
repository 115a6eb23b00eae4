// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The work pool's chunks [0, total) of one collective, cut into one contiguous stripe per rank.
// Each rank takes the chunks of its own stripe first and then helps with the others' (executor.cc),
// so with a core per rank every rank touches the same pages of the peers' buffers in every call.
// That matters where the first touch of a page through a process's own mapping is dear: in this
// project's PVM guests (shadow page tables) a cold 4 KiB page cost 11-16 us to write and a cold
// 256 MiB copy took 880 ms against 17 ms warm, and with every rank taking any chunk a 4-rank
// 32 MiB all-gather needed some 25 calls before each rank had touched every page
// (docs/performance.md).
#pragma once

#include <cstdint>

namespace shmccl::collectives {

struct WorkStripe {
  uint64_t first;  // its first chunk
  uint64_t count;  // its chunks: total / size or one more (the first total % size stripes)
};

inline WorkStripe work_stripe(uint64_t total, int size, int stripe) {
  const uint64_t ranks = static_cast<uint64_t>(size);
  const uint64_t s = static_cast<uint64_t>(stripe);
  const uint64_t share = total / ranks;
  const uint64_t extra = total % ranks;
  return {s * share + (s < extra ? s : extra), share + (s < extra ? 1 : 0)};
}

}  // namespace shmccl::collectives
