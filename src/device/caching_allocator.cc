// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "device/caching_allocator.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "core/process_id.h"
#include "shmccl/error.hpp"

namespace shmccl::device {
namespace {

constexpr uint64_t kSmallSegmentBytes = 2ull << 20;

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

// A range of a segment, free or allocated. Blocks of one segment form a doubly linked list in
// address order; the segment's first block stays the same object for the segment's lifetime
// (splits keep the front, merges keep the lower block). Owned by State; guarded by its mutex.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  uint64_t size = 0;       // multiple of kMinBlockSize
  uint64_t requested = 0;  // while allocated: the request rounded to kMinBlockSize (for stats)
  uint64_t segment_offset = 0;
  uint64_t segment_bytes = 0;
  bool small = false;  // carved from a small (2 MiB) segment: lives in the small pool when free
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;

  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

// Everything behind the one mutex. Free blocks are in exactly one pool; allocated blocks are in
// `live`; every segment's first block is in `segments`.
struct CachingAllocator::State {
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  explicit State(Arena& arena_in) : arena(arena_in) {}

  Arena& arena;
  std::mutex mutex;
  Pool small_pool;
  Pool large_pool;
  std::unordered_map<const void*, Block*> live;
  std::map<uint64_t, Block*> segments;  // segment offset -> its first block
  npu::MemoryStats stats;

  Pool& pool_of(const Block* block) { return block->small ? small_pool : large_pool; }

  // Removes the smallest free block of at least `size` bytes from `pool` and returns it in its
  // node (empty if there is none), which puts it back without allocating (see allocate).
  Pool::node_type take_best_fit(Pool& pool, uint64_t size) {
    Block key;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end()) return {};
    return pool.extract(it);
  }

  // Cuts `block` (free, in no pool) down to `size`, when the tail is worth keeping as its own
  // block (>= 512 bytes in small segments, >= 1 MiB in large ones); the tail goes to the pool.
  // Unchanged if this throws (no memory for the tail or its pool node).
  void split(Block* block, uint64_t size) {
    const uint64_t rest = block->size - size;
    if (rest < (block->small ? kMinBlockSize : kSmallRequest)) return;
    auto tail = std::make_unique<Block>(*block);
    tail->ptr = block->ptr + size;
    tail->size = rest;
    tail->prev = block;
    pool_of(tail.get()).insert(tail.get());
    if (tail->next != nullptr) tail->next->prev = tail.get();
    block->next = tail.get();
    block->size = size;
    tail.release();
  }

  // Merges the free `block` (in no pool) with its free neighbours; returns the merged block.
  Block* coalesce(Block* block) {
    if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
      pool_of(prev).erase(prev);  // before its size (the set's key) changes
      prev->size += block->size;
      prev->next = block->next;
      if (prev->next != nullptr) prev->next->prev = prev;
      delete block;
      block = prev;
    }
    if (Block* next = block->next; next != nullptr && !next->allocated) {
      pool_of(next).erase(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next != nullptr) block->next->prev = block;
      delete next;
    }
    return block;
  }

  // Commits a new segment for a block of `size` bytes; on a full arena releases the cached free
  // segments and retries once. Returns the segment's one (free, unpooled) block.
  Block* new_segment(uint64_t size, uint64_t requested) {
    const bool small = size <= kSmallRequest;
    const uint64_t segment_bytes =
        small ? kSmallSegmentBytes : round_up(size, Arena::kSegmentGranularity);
    auto block = std::make_unique<Block>();
    uint64_t offset = 0;
    try {
      offset = arena.allocate_segment(segment_bytes);
    } catch (const OutOfMemoryError& error) {
      SHMCCL_INFO(kDevice, error.what());
      const uint64_t released = release_free_segments();
      if (released == 0) throw out_of_memory(requested);
      SHMCCL_INFO(kDevice, "NPU ", arena.device(), ": released ", format_bytes(released),
                  " of cached segments, retrying");
      try {
        offset = arena.allocate_segment(segment_bytes);
      } catch (const OutOfMemoryError& retry_error) {
        SHMCCL_INFO(kDevice, retry_error.what());
        throw out_of_memory(requested);
      }
    }
    block->ptr = arena.base() + offset;
    block->size = segment_bytes;
    block->segment_offset = offset;
    block->segment_bytes = segment_bytes;
    block->small = small;
    try {
      segments.emplace(offset, block.get());
    } catch (...) {
      arena.free_segment(offset, segment_bytes);
      throw;
    }
    stats.reserved_bytes += segment_bytes;
    stats.max_reserved_bytes = std::max(stats.max_reserved_bytes, stats.reserved_bytes);
    ++stats.num_segments;
    return block.release();
  }

  // Returns the segment of `block` (free, the segment's only block, in no pool) to the arena.
  void release_segment(Block* block) {
    const uint64_t offset = block->segment_offset;
    const uint64_t bytes = block->segment_bytes;
    segments.erase(offset);
    stats.reserved_bytes -= bytes;
    --stats.num_segments;
    delete block;
    arena.free_segment(offset, bytes);  // state is consistent even if this throws
  }

  // Releases every wholly free segment; returns the bytes released.
  uint64_t release_free_segments() {
    uint64_t released = 0;
    for (Pool* pool : {&small_pool, &large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (!block->whole_segment()) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        released += block->segment_bytes;
        release_segment(block);
      }
    }
    return released;
  }

  OutOfMemoryError out_of_memory(uint64_t requested) const {
    const uint64_t capacity = arena.capacity();
    return OutOfMemoryError(detail::concat(
        "NPU out of memory: tried to allocate ", format_bytes(requested), "; ",
        format_bytes(capacity - stats.allocated_bytes), " free of ", format_bytes(capacity), " (",
        format_bytes(stats.allocated_bytes), " allocated, ", format_bytes(stats.reserved_bytes),
        " reserved by the caching allocator)"));
  }
};

CachingAllocator::CachingAllocator(Arena& arena, bool caching)
    : arena_(arena),
      caching_(caching),
      owner_pid_(detail::current_pid()),
      state_(std::make_unique<State>(arena)) {}

CachingAllocator::~CachingAllocator() {
  if (!state_->live.empty()) {
    SHMCCL_INFO(kDevice, "NPU ", arena_.device(), " caching allocator destroyed with ",
                state_->live.size(), " live blocks (", format_bytes(state_->stats.allocated_bytes),
                ")");
  }
  // The allocator owns its segments: return them all, even those with live blocks left.
  for (auto& [offset, first] : state_->segments) {
    const uint64_t segment_bytes = first->segment_bytes;
    for (Block* block = first; block != nullptr;)
      delete std::exchange(block, block->next);
    try {
      arena_.free_segment(offset, segment_bytes);
    } catch (const std::exception& error) {
      SHMCCL_WARN(kDevice, error.what());
    }
  }
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (bytes > arena_.capacity()) throw state.out_of_memory(bytes);
  const uint64_t size = round_up(bytes, kMinBlockSize);
  const bool small = size <= kSmallRequest;
  State::Pool& pool = small ? state.small_pool : state.large_pool;
  State::Pool::node_type taken = state.take_best_fit(pool, size);
  Block* block = taken ? taken.value() : state.new_segment(size, bytes);
  // The bookkeeping's own allocations may fail (std::bad_alloc): the block then goes back where
  // it came from, its pool (in its node: no allocation) or the arena, and nothing leaks.
  try {
    state.live.emplace(block->ptr, block);
  } catch (...) {
    taken ? void(pool.insert(std::move(taken))) : state.release_segment(block);
    throw;
  }
  try {
    state.split(block, size);
  } catch (...) {
    state.live.erase(block->ptr);
    taken ? void(pool.insert(std::move(taken))) : state.release_segment(block);
    throw;
  }
  block->allocated = true;
  block->requested = size;
  state.stats.allocated_bytes += size;
  state.stats.max_allocated_bytes =
      std::max(state.stats.max_allocated_bytes, state.stats.allocated_bytes);
  ++state.stats.num_allocs;
  return block->ptr;
}

void CachingAllocator::free(void* pointer) {
  if (pointer == nullptr) return;
  // A fork child's tensors inherited from its parent: this is the child's copy of the parent's
  // allocator, whose mutex a parent thread may have held at the fork, and the arena's memory is
  // the parent's (shared): releasing a segment would punch a hole into the parent's live
  // tensors. The child leaves the block alone (the child gets a device state of its own).
  if (detail::current_pid() != owner_pid_) [[unlikely]]
    return;
  State& state = *state_;
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.live.find(pointer);
  if (it == state.live.end()) {
    throw Error(detail::concat("NPU ", arena_.device(), " caching allocator: free of ", pointer,
                               ", which is not a live block (",
                               arena_.contains(pointer) ? "double free or not the start of a block"
                                                        : "not memory of this device",
                               ")"));
  }
  Block* block = it->second;
  state.live.erase(it);
  state.stats.allocated_bytes -= block->requested;
  ++state.stats.num_frees;
  block->allocated = false;
  block->requested = 0;
  block = state.coalesce(block);
  if (!caching_ && block->whole_segment()) {
    state.release_segment(block);
  } else {
    state.pool_of(block).insert(block);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_free_segments();
}

npu::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  npu::MemoryStats stats = state_->stats;
  stats.capacity_bytes = arena_.capacity();
  stats.huge_page_bytes = arena_.huge_page_bytes();
  return stats;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.max_allocated_bytes = state_->stats.allocated_bytes;
  state_->stats.max_reserved_bytes = state_->stats.reserved_bytes;
}

}  // namespace shmccl::device
