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

#include "device/arena.h"
#include "device/caching_allocator.h"

namespace {

using shmccl::device::Arena;
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

// A cold allocate_segment: take a range and fallocate (commit, zero) its pages. The decommit
// (punch hole) after each iteration is timed separately as `decommit_per_MiB`.
void BM_ArenaCommit(benchmark::State& state) {
  const int64_t mib = state.range(0);
  Arena arena(0, 2ull << 30);
  double decommit_seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    const uint64_t offset = arena.allocate_segment(static_cast<uint64_t>(mib * kMiB));
    auto committed = std::chrono::steady_clock::now();
    arena.free_segment(offset, static_cast<uint64_t>(mib * kMiB));
    auto released = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(committed - start).count());
    decommit_seconds += std::chrono::duration<double>(released - committed).count();
  }
  const double total_mib = static_cast<double>(state.iterations() * mib);
  state.SetBytesProcessed(state.iterations() * mib * kMiB);
  state.counters["commit_per_MiB"] =
      benchmark::Counter(total_mib, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["decommit_per_MiB"] = benchmark::Counter(decommit_seconds / total_mib);
}
BENCHMARK(BM_ArenaCommit)->Arg(2)->Arg(8)->Arg(64)->Arg(512)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
