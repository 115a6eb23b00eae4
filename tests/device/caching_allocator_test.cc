// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tests of the caching device allocator: reuse, splitting, coalescing, releasing cached segments,
// exact statistics, the out-of-memory message, and a multi-threaded stress that tags every block.
#include "device/caching_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/arena.h"
#include "shmccl/error.hpp"

// Fault injection for the bookkeeping's own allocations: while g_failing_allocation > 0, the
// g_failing_allocation-th operator new from now throws std::bad_alloc. (Through malloc, which the
// sanitizers still see. GCC, inlining these into their callers, takes the replaced new and
// delete for a mismatched pair.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<int> g_failing_allocation{0};
}  // namespace

void* operator new(std::size_t bytes) {
  if (g_failing_allocation.load(std::memory_order_relaxed) > 0 &&
      g_failing_allocation.fetch_sub(1) == 1) {
    throw std::bad_alloc();
  }
  if (void* memory = std::malloc(bytes != 0 ? bytes : 1)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept {
  std::free(memory);
}
void operator delete(void* memory, std::size_t) noexcept {
  std::free(memory);
}

namespace shmccl::device {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;

template <typename E>
std::string error_text(const std::function<void()>& body) {
  try {
    body();
  } catch (const E& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

char* as_bytes(void* p) {
  return static_cast<char*>(p);
}

class CachingAllocatorTest : public ::testing::Test {
 protected:
  Arena arena_{0, 64 * kMiB};
  CachingAllocator allocator_{arena_};
};

TEST_F(CachingAllocatorTest, ZeroBytesAndNullptr) {
  EXPECT_EQ(allocator_.allocate(0), nullptr);
  allocator_.free(nullptr);
  const npu::MemoryStats stats = allocator_.stats();
  EXPECT_EQ(stats.num_allocs, 0u);
  EXPECT_EQ(stats.num_frees, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
}

// A fork child that drops the tensors it inherited frees into its copy of the parent's
// allocator. Without caching that used to give the segment back to the arena, which the two
// processes share: the hole punched into it zeroed the parent's live tensor.
TEST(CachingAllocatorForkTest, AForkChildsFreeLeavesTheParentsBlocksAlone) {
  Arena arena{0, 64 * kMiB};
  CachingAllocator allocator{arena, /*caching=*/false};
  const uint64_t bytes = 4 * kMiB;  // a segment of its own
  void* block = allocator.allocate(bytes);
  std::memset(block, 7, bytes);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    allocator.free(block);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const char* bytes_of_block = as_bytes(block);
  uint64_t changed = 0;
  for (uint64_t i = 0; i < bytes; ++i)
    changed += bytes_of_block[i] != 7;
  EXPECT_EQ(changed, 0u) << "the child's free changed the parent's block";
  EXPECT_EQ(allocator.stats().allocated_bytes, bytes);
  allocator.free(block);
  EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
}

// Every allocation of memory for the bookkeeping (blocks, pool and map nodes, in the allocator
// and in the arena) fails in turn, once from a cached free block and once from a new segment:
// each failure leaves the allocator and the arena as they were. A block lost on the way would
// keep its segment from ever being wholly free (reserved_bytes > 0 after empty_cache), and a
// range lost by the arena would leave no room for a segment of its whole capacity.
TEST_F(CachingAllocatorTest, AFailedBookkeepingAllocationLeaksNothing) {
  for (bool cached : {true, false}) {
    SCOPED_TRACE(cached ? "from a cached block" : "from a new segment");
    int failures = 0;
    for (int nth = 1;; ++nth) {
      allocator_.empty_cache();
      if (cached) allocator_.free(allocator_.allocate(1000));  // a 2 MiB segment, cached free
      const npu::MemoryStats before = allocator_.stats();
      g_failing_allocation = nth;
      void* block = nullptr;
      try {
        block = allocator_.allocate(1000);
      } catch (const std::bad_alloc&) {
      }
      const bool failed = g_failing_allocation.exchange(0) <= 0;
      if (!failed) {
        ASSERT_NE(block, nullptr);
        allocator_.free(block);
        break;
      }
      ++failures;
      ASSERT_EQ(block, nullptr) << "allocation " << nth;
      const npu::MemoryStats after = allocator_.stats();
      EXPECT_EQ(after.allocated_bytes, 0u) << "allocation " << nth;
      EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << "allocation " << nth;
      void* again = allocator_.allocate(1000);  // the allocator still works
      allocator_.free(again);
      allocator_.empty_cache();
      EXPECT_EQ(allocator_.stats().reserved_bytes, 0u) << "a block leaked at allocation " << nth;
      const uint64_t whole = arena_.allocate_segment(arena_.capacity());
      arena_.free_segment(whole, arena_.capacity());
    }
    EXPECT_GE(failures, cached ? 2 : 4) << "fewer bookkeeping allocations than expected";
  }
}

TEST_F(CachingAllocatorTest, BlocksAre512ByteAlignedAndInsideTheArena) {
  std::vector<void*> blocks;
  for (size_t bytes : {size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{1000}, size_t{4097},
                       kMiB - 1, kMiB, kMiB + 1, 3 * kMiB + 5}) {
    void* p = allocator_.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u) << bytes;
    EXPECT_TRUE(arena_.contains(p));
    EXPECT_TRUE(arena_.contains(as_bytes(p) + bytes - 1));
    blocks.push_back(p);
  }
  for (void* p : blocks)
    allocator_.free(p);
}

TEST_F(CachingAllocatorTest, FreedBlocksAreReused) {
  void* small = allocator_.allocate(1000);
  allocator_.free(small);
  EXPECT_EQ(allocator_.allocate(1000), small);
  void* large = allocator_.allocate(4 * kMiB);
  allocator_.free(large);
  EXPECT_EQ(allocator_.allocate(4 * kMiB), large);
  EXPECT_EQ(allocator_.stats().reserved_bytes, 6 * kMiB);
  EXPECT_EQ(allocator_.stats().num_segments, 2u);
}

TEST_F(CachingAllocatorTest, SmallSegmentsAreSplit) {
  char* a = as_bytes(allocator_.allocate(512));
  EXPECT_EQ(as_bytes(allocator_.allocate(512)), a + 512);
  EXPECT_EQ(as_bytes(allocator_.allocate(kMiB)), a + 1024);
  EXPECT_EQ(allocator_.stats().reserved_bytes, 2 * kMiB);
  // 2 MiB - 1 MiB - 1 KiB is left: a 1 MiB request needs a second segment.
  char* b = as_bytes(allocator_.allocate(kMiB));
  EXPECT_FALSE(b >= a && b < a + 2 * kMiB);
  EXPECT_EQ(allocator_.stats().num_segments, 2u);
}

TEST_F(CachingAllocatorTest, FreeBlocksCoalesceWithNeighbours) {
  char* a = as_bytes(allocator_.allocate(512 * kKiB));
  char* b = as_bytes(allocator_.allocate(512 * kKiB));
  char* c = as_bytes(allocator_.allocate(512 * kKiB));
  char* d = as_bytes(allocator_.allocate(512 * kKiB));
  EXPECT_EQ(b, a + 512 * kKiB);
  EXPECT_EQ(c, b + 512 * kKiB);
  EXPECT_EQ(d, c + 512 * kKiB);
  allocator_.free(a);
  allocator_.free(c);
  allocator_.free(b);  // a, b and c merge into one 1.5 MiB block
  EXPECT_EQ(as_bytes(allocator_.allocate(kMiB)), a);
  EXPECT_EQ(as_bytes(allocator_.allocate(512 * kKiB)), a + kMiB);
  EXPECT_EQ(allocator_.stats().num_segments, 1u);
  allocator_.free(a);
  allocator_.free(a + kMiB);
  allocator_.free(d);
  allocator_.empty_cache();  // only possible if the segment is one free block again
  EXPECT_EQ(allocator_.stats().reserved_bytes, 0u);
  EXPECT_EQ(arena_.committed_bytes(), 0u);
}

TEST_F(CachingAllocatorTest, LargeBlocksSplitOnlyForAtLeastOneMiB) {
  char* p = as_bytes(allocator_.allocate(8 * kMiB));
  allocator_.free(p);
  EXPECT_EQ(as_bytes(allocator_.allocate(3 * kMiB)), p);
  EXPECT_EQ(as_bytes(allocator_.allocate(5 * kMiB)), p + 3 * kMiB);
  EXPECT_EQ(allocator_.stats().reserved_bytes, 8 * kMiB);

  // 5.5 MiB takes a 6 MiB segment; the 0.5 MiB tail stays part of the block.
  char* q = as_bytes(allocator_.allocate(5 * kMiB + 512 * kKiB));
  allocator_.free(q);
  EXPECT_EQ(as_bytes(allocator_.allocate(6 * kMiB)), q);
  EXPECT_EQ(allocator_.stats().reserved_bytes, 14 * kMiB);
}

TEST_F(CachingAllocatorTest, BestFitPicksTheSmallestSufficientBlock) {
  char* big = as_bytes(allocator_.allocate(8 * kMiB));
  char* fence = as_bytes(allocator_.allocate(2 * kMiB));
  char* medium = as_bytes(allocator_.allocate(4 * kMiB));
  allocator_.free(big);
  allocator_.free(medium);
  EXPECT_EQ(as_bytes(allocator_.allocate(3 * kMiB)), medium);
  EXPECT_EQ(as_bytes(allocator_.allocate(5 * kMiB)), big);
  allocator_.free(fence);
}

TEST(CachingAllocatorFragmentation, CoalescingAndReleasingCachedSegments) {
  Arena arena(0, 32 * kMiB);
  CachingAllocator allocator(arena);
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i)
    blocks.push_back(allocator.allocate(256 * kKiB));
  EXPECT_EQ(allocator.stats().reserved_bytes, 16 * kMiB);
  for (size_t i = 0; i < blocks.size(); i += 2)
    allocator.free(blocks[i]);
  // 8 MiB is free but in 256 KiB holes: large requests take new segments.
  void* large1 = allocator.allocate(8 * kMiB);
  void* large2 = allocator.allocate(8 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 32 * kMiB);
  EXPECT_THROW(allocator.allocate(kMiB + 512), OutOfMemoryError);  // nothing wholly free
  // Freeing the rest makes the small segments wholly free (coalesced); a large request now
  // releases them back to the arena and succeeds.
  for (size_t i = 1; i < blocks.size(); i += 2)
    allocator.free(blocks[i]);
  EXPECT_EQ(allocator.stats().reserved_bytes, 32 * kMiB);
  void* large3 = allocator.allocate(12 * kMiB);
  EXPECT_NE(large3, nullptr);
  EXPECT_EQ(allocator.stats().reserved_bytes, 28 * kMiB);
  EXPECT_EQ(allocator.stats().num_segments, 3u);
  for (void* p : {large1, large2, large3})
    allocator.free(p);
}

TEST_F(CachingAllocatorTest, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  void* kept = allocator_.allocate(1000);
  void* dropped = allocator_.allocate(3 * kMiB);
  void* neighbour = allocator_.allocate(1000);  // same small segment as `kept`
  allocator_.free(dropped);
  allocator_.free(neighbour);
  EXPECT_EQ(allocator_.stats().reserved_bytes, 6 * kMiB);
  EXPECT_EQ(arena_.committed_bytes(), 6 * kMiB);
  allocator_.empty_cache();
  EXPECT_EQ(allocator_.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(allocator_.stats().num_segments, 1u);
  EXPECT_EQ(arena_.committed_bytes(), 2 * kMiB);
  allocator_.free(kept);
  allocator_.empty_cache();
  EXPECT_EQ(allocator_.stats().reserved_bytes, 0u);
  EXPECT_EQ(arena_.committed_bytes(), 0u);
}

TEST_F(CachingAllocatorTest, StatsAndPeaksAreExact) {
  void* a = allocator_.allocate(1000);          // 1 KiB of a 2 MiB segment
  void* b = allocator_.allocate(3 * kMiB + 1);  // 3 MiB + 512 of a 4 MiB segment
  npu::MemoryStats stats = allocator_.stats();
  EXPECT_EQ(stats.allocated_bytes, 3 * kMiB + 1536);
  EXPECT_EQ(stats.reserved_bytes, 6 * kMiB);
  EXPECT_EQ(stats.max_allocated_bytes, 3 * kMiB + 1536);
  EXPECT_EQ(stats.max_reserved_bytes, 6 * kMiB);
  EXPECT_EQ(stats.num_allocs, 2u);
  EXPECT_EQ(stats.num_frees, 0u);
  EXPECT_EQ(stats.num_segments, 2u);
  EXPECT_EQ(stats.capacity_bytes, 64 * kMiB);
  // Both segments in 2 MiB pages, or none where the kernel makes none (arena_test.cc's test).
  EXPECT_EQ(stats.huge_page_bytes, arena_.huge_page_bytes());
  EXPECT_TRUE(stats.huge_page_bytes == 0 || stats.huge_page_bytes == 6 * kMiB)
      << stats.huge_page_bytes;

  allocator_.free(b);
  stats = allocator_.stats();
  EXPECT_EQ(stats.allocated_bytes, 1024u);
  EXPECT_EQ(stats.max_allocated_bytes, 3 * kMiB + 1536);
  EXPECT_EQ(stats.reserved_bytes, 6 * kMiB);
  EXPECT_EQ(stats.num_frees, 1u);

  allocator_.empty_cache();
  allocator_.reset_peak_stats();
  stats = allocator_.stats();
  EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(stats.max_allocated_bytes, 1024u);
  EXPECT_EQ(stats.max_reserved_bytes, 2 * kMiB);
  EXPECT_EQ(stats.num_segments, 1u);

  void* c = allocator_.allocate(kMiB);
  allocator_.free(c);
  stats = allocator_.stats();
  EXPECT_EQ(stats.max_allocated_bytes, kMiB + 1024);
  EXPECT_EQ(stats.max_reserved_bytes, 2 * kMiB);
  EXPECT_EQ(stats.num_allocs, 3u);
  EXPECT_EQ(stats.num_frees, 2u);
  allocator_.free(a);
  EXPECT_EQ(allocator_.stats().allocated_bytes, 0u);
}

TEST(CachingAllocatorNoCaching, FreedSegmentsReturnToTheArenaAtOnce) {
  Arena arena(0, 16 * kMiB);
  CachingAllocator allocator(arena, /*caching=*/false);
  void* a = allocator.allocate(kMiB);
  void* b = allocator.allocate(512);
  EXPECT_EQ(arena.committed_bytes(), 2 * kMiB);
  allocator.free(a);  // the segment still holds b
  EXPECT_EQ(arena.committed_bytes(), 2 * kMiB);
  allocator.free(b);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
  EXPECT_EQ(allocator.stats().num_segments, 0u);
  void* large = allocator.allocate(10 * kMiB);
  allocator.free(large);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(allocator.stats().max_reserved_bytes, 10 * kMiB);
}

TEST(CachingAllocatorOutOfMemory, MessageNamesTheSizes) {
  Arena arena(0, 8 * kMiB);
  CachingAllocator allocator(arena);
  void* p = allocator.allocate(6 * kMiB);
  EXPECT_EQ(error_text<OutOfMemoryError>([&] { allocator.allocate(4 * kMiB); }),
            "NPU out of memory: tried to allocate 4.00 MiB; 2.00 MiB free of 8.00 MiB "
            "(6.00 MiB allocated, 6.00 MiB reserved by the caching allocator)");
  EXPECT_EQ(error_text<OutOfMemoryError>([&] { allocator.allocate(16ull << 30); }),
            "NPU out of memory: tried to allocate 16.00 GiB; 2.00 MiB free of 8.00 MiB "
            "(6.00 MiB allocated, 6.00 MiB reserved by the caching allocator)");
  // The failures left the state intact: the cached 6 MiB is released for an 8 MiB request.
  allocator.free(p);
  void* all = allocator.allocate(8 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes, 8 * kMiB);
  EXPECT_EQ(allocator.stats().num_allocs, 2u);
  allocator.free(all);
}

TEST_F(CachingAllocatorTest, FreeOfAForeignPointerIsAnError) {
  char* p = as_bytes(allocator_.allocate(4096));
  EXPECT_THAT(error_text<Error>([&] { allocator_.free(p + 512); }),
              HasSubstr("double free or not the start of a block"));
  int host = 0;
  EXPECT_THAT(error_text<Error>([&] { allocator_.free(&host); }),
              HasSubstr("not memory of this device"));
  allocator_.free(p);
  EXPECT_THAT(error_text<Error>([&] { allocator_.free(p); }), HasSubstr("not a live block"));
  EXPECT_EQ(allocator_.stats().num_frees, 1u);
}

// 4 threads x 10,000 operations on one allocator. Every live block carries its owner's tag in
// every 512-byte granule; since blocks are 512-aligned multiples of 512, any overlap of two live
// blocks shares a granule, and the overwritten tag is found when the block is checked and freed.
TEST(CachingAllocatorStress, ConcurrentAllocFreeNeverOverlaps) {
  constexpr int kThreads = 4;
  constexpr int kOps = 10000;
  constexpr size_t kMaxLive = 48;
  Arena arena(0, 1ull << 30);
  CachingAllocator allocator(arena);

  struct Live {
    char* ptr;
    size_t bytes;
    uint64_t tag;
  };
  auto tag_of = [](uint64_t tag, size_t granule) { return tag * 1000003 + granule; };
  auto write_tags = [&](const Live& block) {
    for (size_t g = 0; g * 512 < block.bytes; ++g) {
      const uint64_t value = tag_of(block.tag, g);
      std::memcpy(block.ptr + g * 512, &value, std::min<size_t>(8, block.bytes - g * 512));
    }
  };
  auto tags_intact = [&](const Live& block) {
    for (size_t g = 0; g * 512 < block.bytes; ++g) {
      uint64_t value = 0;
      const uint64_t want = tag_of(block.tag, g);
      const size_t n = std::min<size_t>(8, block.bytes - g * 512);
      std::memcpy(&value, block.ptr + g * 512, n);
      if (std::memcmp(&value, &want, n) != 0) return false;
    }
    return true;
  };

  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      std::vector<Live> live;
      uint64_t serial = 0;
      auto random_size = [&]() -> size_t {
        const uint64_t kind = rng() % 100;
        if (kind < 70) return 1 + rng() % (64 * kKiB);
        if (kind < 95) return 64 * kKiB + rng() % (960 * kKiB);
        return kMiB + rng() % (3 * kMiB);
      };
      auto release = [&](size_t index) {
        if (!tags_intact(live[index])) ++failures[static_cast<size_t>(t)];
        allocator.free(live[index].ptr);
        live[index] = live.back();
        live.pop_back();
      };
      for (int op = 0; op < kOps; ++op) {
        if (live.empty() || (live.size() < kMaxLive && rng() % 2 == 0)) {
          const size_t bytes = random_size();
          Live block{as_bytes(allocator.allocate(bytes)), bytes,
                     (static_cast<uint64_t>(t) << 40) | ++serial};
          if (reinterpret_cast<uintptr_t>(block.ptr) % 512 != 0) ++failures[static_cast<size_t>(t)];
          write_tags(block);
          live.push_back(block);
        } else {
          release(rng() % live.size());
        }
      }
      while (!live.empty())
        release(live.size() - 1);
    });
  }
  for (auto& thread : threads)
    thread.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << "thread " << t;
  const npu::MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.num_allocs, stats.num_frees);
  EXPECT_GE(stats.num_allocs, static_cast<uint64_t>(kThreads) * kOps / 2);
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0u);
  EXPECT_EQ(arena.committed_bytes(), 0u);
}

}  // namespace
}  // namespace shmccl::device
