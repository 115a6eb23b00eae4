// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The work pool's stripes cover every chunk exactly once, in rank order, with sizes that differ by
// at most one: a gap would leave a chunk uncopied (the collective would wait for it until the
// timeout), an overlap would copy a chunk twice and overcount the done counter.
#include "collectives/work_stripes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace shmccl::collectives {
namespace {

TEST(WorkStripes, PartitionEveryChunkContiguouslyAndEvenly) {
  for (int size = 1; size <= 64; ++size) {
    for (uint64_t total :
         {0ULL, 1ULL, 2ULL, 3ULL, 7ULL, 8ULL, 63ULL, 64ULL, 65ULL, 1000ULL, (1ULL << 40) + 3}) {
      uint64_t next = 0;
      uint64_t smallest = UINT64_MAX;
      uint64_t largest = 0;
      for (int stripe = 0; stripe < size; ++stripe) {
        const WorkStripe mine = work_stripe(total, size, stripe);
        ASSERT_EQ(mine.first, next)
            << "total " << total << ", size " << size << ", stripe " << stripe;
        next += mine.count;
        smallest = std::min(smallest, mine.count);
        largest = std::max(largest, mine.count);
        // The larger stripes come first, so stripe i never holds fewer chunks than stripe i + 1.
        if (stripe > 0) {
          EXPECT_GE(work_stripe(total, size, stripe - 1).count, mine.count);
        }
      }
      EXPECT_EQ(next, total) << "total " << total << ", size " << size;
      EXPECT_LE(largest - smallest, 1U) << "total " << total << ", size " << size;
    }
  }
}

TEST(WorkStripes, OneRankTakesEverything) {
  const WorkStripe all = work_stripe(12, 1, 0);
  EXPECT_EQ(all.first, 0U);
  EXPECT_EQ(all.count, 12U);
}

}  // namespace
}  // namespace shmccl::collectives
