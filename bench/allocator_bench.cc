// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Device-memory costs: allocate+free of a cached block (steady state) against malloc/free and
// against the uncached path (commit + decommit every time), under 1-4 threads sharing one
// allocator (one mutex); and the cost of a cold arena commit (fallocate) per MiB.
//   shmccl_allocator_bench --benchmark_filter=AllocFree --benchmark_format=json
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "device/arena.h"
#include "device/caching_allocator.h"

namespace {

using shmccl::device::Arena;
using shmccl::device::ArenaMapping;
using shmccl::device::CachingAllocator;

constexpr int64_t kMiB = 1 << 20;

enum class Kind { kCaching, kUncached, kMalloc };

// One arena and allocator of each kind for the whole run, shared by all threads (as a device's
// are); large enough for every thread's block, committed on demand.
CachingAllocator& allocator(bool caching) {
  static Arena caching_arena(0, 4ull << 30);
  static Arena uncached_arena(1, 4ull << 30);
  static CachingAllocator cached(caching_arena, true);
  static CachingAllocator uncached(uncached_arena, false);
  return caching ? cached : uncached;
}

void BM_AllocFree(benchmark::State& state, Kind kind) {
  const auto bytes = static_cast<size_t>(state.range(0));
  if (kind == Kind::kMalloc) {
    for (auto _ : state) {
      void* p = std::malloc(bytes);
      benchmark::DoNotOptimize(p);
      std::free(p);
    }
  } else {
    CachingAllocator& device = allocator(kind == Kind::kCaching);
    device.free(device.allocate(bytes));  // steady state: the block (or its segment) is cached
    for (auto _ : state) {
      void* p = device.allocate(bytes);
      benchmark::DoNotOptimize(p);
      device.free(p);
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void alloc_free_args(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {int64_t{512}, int64_t{64} << 10, 4 * kMiB, 64 * kMiB})
    b->Arg(bytes);
}

BENCHMARK_CAPTURE(BM_AllocFree, caching, Kind::kCaching)->Apply(alloc_free_args)->ThreadRange(1, 4);
BENCHMARK_CAPTURE(BM_AllocFree, malloc, Kind::kMalloc)->Apply(alloc_free_args)->ThreadRange(1, 4);
BENCHMARK_CAPTURE(BM_AllocFree, uncached, Kind::kUncached)->Apply(alloc_free_args);

// A cold allocate_segment: take a range and fallocate (commit, zero) its pages, in 2 MiB pages
// (huge:1, the default; MADV_COLLAPSE) or 4 KiB pages (huge:0). Untimed in the iteration but
// reported per MiB: the decommit (punch hole) after it (`decommit_per_MiB`), the owner's first
// write of every byte (`write_per_MiB`: a fresh tensor's first use), and a peer's first touch
// through a fresh mapping, populate() and then a read per 4 KiB (`peer_touch_per_MiB`: a rank's
// first collective on that tensor). What huge pages save is in the last two.
void BM_ArenaCommit(benchmark::State& state) {
  const int64_t mib = state.range(0);
  const auto bytes = static_cast<uint64_t>(mib * kMiB);
  Arena arena(0, 2ull << 30, /*huge_pages=*/state.range(1) != 0);
  double decommit_seconds = 0;
  double write_seconds = 0;
  double touch_seconds = 0;
  double huge_bytes = 0;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  };
  for (auto _ : state) {
    auto start = Clock::now();
    const uint64_t offset = arena.allocate_segment(bytes);
    auto committed = Clock::now();
    huge_bytes += static_cast<double>(arena.huge_page_bytes());
    std::memset(arena.base() + offset, 1, bytes);
    auto written = Clock::now();
    {
      auto peer = ArenaMapping::open(arena.handle());
      auto opened = Clock::now();
      peer->populate(offset, bytes);
      for (uint64_t page = 0; page < bytes; page += 4096)
        benchmark::DoNotOptimize(*static_cast<volatile char*>(peer->base() + offset + page));
      touch_seconds += seconds(opened, Clock::now());
    }
    auto freed_from = Clock::now();
    arena.free_segment(offset, bytes);
    auto released = Clock::now();
    state.SetIterationTime(seconds(start, committed));
    write_seconds += seconds(committed, written);
    decommit_seconds += seconds(freed_from, released);
  }
  const double total_mib = static_cast<double>(state.iterations() * mib);
  state.SetBytesProcessed(state.iterations() * mib * kMiB);
  state.counters["commit_per_MiB"] =
      benchmark::Counter(total_mib, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["decommit_per_MiB"] = benchmark::Counter(decommit_seconds / total_mib);
  state.counters["write_per_MiB"] = benchmark::Counter(write_seconds / total_mib);
  state.counters["peer_touch_per_MiB"] = benchmark::Counter(touch_seconds / total_mib);
  state.counters["huge_share"] = huge_bytes / static_cast<double>(total_mib * kMiB);
}
BENCHMARK(BM_ArenaCommit)
    ->ArgNames({"MiB", "huge"})
    ->ArgsProduct({{2, 8, 64, 512}, {0, 1}})
    ->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
