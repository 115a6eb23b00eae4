// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// CachingAllocator: the device allocator, in front of an Arena, in the manner of PyTorch's CUDA
// caching allocator. Requests are rounded to 512 bytes; small requests (<= 1 MiB) are carved from
// 2 MiB segments, large ones from segments of their own rounded size; freed blocks stay cached,
// best-fit reused and coalesced with free neighbours in their segment. When the arena is full the
// allocator releases wholly free cached segments and retries before it gives up with
// "NPU out of memory: tried to allocate X; Y free of Z". Thread-safe: one mutex guards all state,
// and is held across the arena calls (a segment commit may take milliseconds).
//
// Statistics: allocated_bytes sums the requests of live blocks rounded to 512 bytes (a block whose
// tail was too small to split is larger; that slack counts as reserved only); reserved_bytes sums
// the committed segments.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "device/arena.h"
#include "shmccl/npu.hpp"

namespace shmccl::device {

class CachingAllocator {
 public:
  // `caching` false returns every freed segment to the arena at once
  // (SHMCCL_NPU_CACHING_ALLOCATOR=0).
  explicit CachingAllocator(Arena& arena, bool caching = true);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a 512-byte aligned block of at least `bytes` inside the arena; nullptr for 0 bytes.
  void* allocate(size_t bytes);
  // Returns a block from allocate(). nullptr is ignored; any other foreign pointer is an Error.
  // In a process forked after the allocator was made it does nothing (see free()).
  void free(void* pointer);
  // Releases wholly free segments back to the arena.
  void empty_cache();

  npu::MemoryStats stats() const;
  void reset_peak_stats();

  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallRequest = 1 << 20;

 private:
  // Implementation detail; defined in caching_allocator.cc.
  struct Block;
  struct State;
  Arena& arena_;
  const bool caching_;
  const pid_t owner_pid_;  // free() in a fork child (its inherited tensors) leaves blocks alone
  std::unique_ptr<State> state_;
};

}  // namespace shmccl::device
