// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Arena: the memory of one simulated NPU in one process. A memfd of the device's capacity is
// reserved (sparse) and mapped once, MAP_SHARED, so that any peer process can map the same pages
// (ArenaMapping) and address device pointers directly: the basis of zero-copy collectives.
// Physical memory is committed per segment with fallocate, so a full machine is an
// OutOfMemoryError at allocation time, never a SIGBUS later. Each committed segment is then made
// of 2 MiB pages where the kernel can (MADV_COLLAPSE, Linux 6.1; whatever the system's shmem
// huge-page setting): a process maps 2 MiB with one page-table entry instead of 512, so the first
// touch of a peer's tensor costs a fault per 2 MiB, not per 4 KiB (a trap to the hypervisor each
// in a guest whose page tables the hypervisor shadows, 5-7 us). Thread-safe.
//
// File layout of the memfd (size kHeaderBytes + capacity):
//   [0, kHeaderBytes)                      header: its first page (kHeaderPageBytes) holds magic,
//                                          token, capacity, owner pid, device, written once by
//                                          the owner before any handle exists and checked by
//                                          ArenaMapping::open; the rest is never committed, and
//                                          aligns the address space to huge pages.
//                                          At kDecommitsOffset: how many segments the owner has
//                                          decommitted (populate() starts over when it moved)
//   [kHeaderBytes, kHeaderBytes+capacity)  the device's address space; base() points here, and
//                                          segment offsets are relative to it
// Every mapping of the file (the owner's, each peer's) starts on a 2 MiB boundary.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace shmccl::device {

// What a peer needs to map an arena: the owner's pid and fd number (taken with pidfd_getfd, or
// through /proc where that is refused: core/peer_process.h), plus the size and a random token
// checked on import. Plain data; lives in shared memory.
struct ArenaHandle {
  int32_t pid = 0;
  int32_t fd = -1;
  int32_t device = -1;
  int32_t reserved = 0;
  uint64_t capacity = 0;
  uint64_t token = 0;
};
static_assert(sizeof(ArenaHandle) == 32);

class Arena {
 public:
  // Reserves `capacity` bytes (rounded up to the 2 MiB segment granularity: a smaller tail could
  // hold no segment) for `device`; with `huge_pages`,
  // segments are made of 2 MiB pages where the kernel can. Throws SystemError (InvalidArgument
  // for a capacity of 0).
  Arena(int device, uint64_t capacity, bool huge_pages = true);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  int device() const { return device_; }
  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  bool contains(const void* pointer) const {
    auto p = static_cast<const char*>(pointer);
    return p >= base_ && p < base_ + capacity_;
  }

  // Takes a free range of at least `bytes` (rounded to the 2 MiB segment granularity) from the
  // address space and commits its memory. Returns its offset. Throws OutOfMemoryError when the
  // address space or the machine's memory is exhausted (message names sizes).
  uint64_t allocate_segment(uint64_t bytes);
  // Releases the memory of a segment and returns its range. `bytes` as passed to allocate_segment.
  // A range that allocate_segment did not return is an shmccl::Error.
  void free_segment(uint64_t offset, uint64_t bytes);

  uint64_t committed_bytes() const;
  // Of those, the bytes in 2 MiB pages.
  uint64_t huge_page_bytes() const;
  ArenaHandle handle() const;

  static constexpr uint64_t kHugePageBytes = 2ull << 20;
  static constexpr uint64_t kSegmentGranularity = kHugePageBytes;
  // The header in front of the address space, and its one committed page (see the layout above).
  static constexpr uint64_t kHeaderBytes = kHugePageBytes;
  static constexpr uint64_t kHeaderPageBytes = 4096;
  // Where the header page keeps the decommit count (a std::atomic<uint64_t>, its own line).
  static constexpr uint64_t kDecommitsOffset = 64;

 private:
  // Puts [offset, offset + length) back into free_ranges_, merged with adjacent free ranges.
  // Requires mutex_.
  void return_range_locked(uint64_t offset, uint64_t length);
  // Turns the committed range [offset, offset + length) into 2 MiB pages, best effort; returns
  // whether it did. Stops trying for good where the kernel cannot.
  bool make_huge(uint64_t offset, uint64_t length);

  struct Segment {
    uint64_t length;  // rounded to kSegmentGranularity
    bool huge;        // made of 2 MiB pages
  };

  const int device_;
  uint64_t capacity_ = 0;
  int fd_ = -1;           // owned memfd; closed by the destructor
  char* base_ = nullptr;  // owned mapping starts at base_ - kHeaderBytes
  uint64_t token_ = 0;
  std::atomic<bool> huge_pages_;              // cleared when the kernel cannot
  mutable std::mutex mutex_;                  // guards the four members below
  std::map<uint64_t, uint64_t> free_ranges_;  // offset -> length, coalesced
  std::map<uint64_t, Segment> segments_;      // offset -> segment, handed out
  uint64_t committed_ = 0;
  uint64_t huge_committed_ = 0;
};

// A peer's arena mapped into this process, read-write. Owns the fd and the mapping.
// Immutable after open(), so any thread may use it.
class ArenaMapping {
 public:
  // Maps the arena described by `handle` (the owner's fd, taken as core/peer_process.h says, then
  // mmap); verifies size and token. Throws SystemError / RemoteError naming the pid when the peer
  // is gone or unreachable.
  static std::shared_ptr<ArenaMapping> open(const ArenaHandle& handle);
  ~ArenaMapping();
  ArenaMapping(const ArenaMapping&) = delete;
  ArenaMapping& operator=(const ArenaMapping&) = delete;

  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  const ArenaHandle& handle() const { return handle_; }

  // Fills this process's page tables for [offset, offset + bytes) of the mapping, once per
  // range (remembered), so that copying into a peer's tensor does not take a page fault per page
  // (an entry maps 2 MiB where the owner's segment is in huge pages, else 4 KiB): a work-pool
  // collective writes pieces of every peer's buffer, and which rank writes which piece changes
  // from call to call, so without this the faults went on for several calls (4 KiB pages, 256 MiB
  // all-gather at 4 ranks: 46-129 ms per call, 1.5 million minor faults in a run). Best effort
  // (MADV_POPULATE_WRITE, Linux 5.14); the range must lie in the committed arena. What is
  // remembered is forgotten once the owner decommits a segment (the hole punch empties our page
  // tables there too, and the range may come back as a new tensor: npu::empty_cache() between two
  // collectives on equal sizes otherwise cost the next ones their faults again).
  // With `touch`, also reads a byte of every 4 KiB of the range, once: where the hypervisor
  // shadows the guest's page tables (a PVM guest), the first access to a 4 KiB page after
  // MADV_POPULATE_WRITE still traps, about 5 us, 20 times what copying the page costs warm (in
  // 2 MiB pages the touch costs 0.05 us per 4 KiB). A caller whose ranks take each other's work
  // touches the whole buffer on first use, so that later calls find every page warm whichever
  // rank copies which piece. Thread-safe.
  void populate(uint64_t offset, uint64_t bytes, bool touch = false);
  // How many segments the owner has decommitted so far (its count in the arena's header): a
  // range populated before a change may have been emptied since.
  uint64_t owner_decommits() const;

 private:
  ArenaMapping() = default;
  ArenaHandle handle_{};
  int fd_ = -1;           // owned; our copy of the peer's memfd
  char* base_ = nullptr;  // owned mapping starts at base_ - Arena::kHeaderBytes
  uint64_t capacity_ = 0;
  // Disjoint page-aligned [start, end) ranges, merged as they are added.
  class PageRanges {
   public:
    bool covers(uint64_t start, uint64_t end) const;
    void add(uint64_t start, uint64_t end);
    void clear() { ranges_.clear(); }

   private:
    std::map<uint64_t, uint64_t> ranges_;  // start -> end
  };
  std::mutex populated_mutex_;        // guards the three members below
  PageRanges populated_;              // what populate() has prefaulted
  PageRanges touched_;                // ... and of that, what it has touched
  uint64_t populated_decommits_ = 0;  // the owner's decommit count they were taken at
};

// "512 bytes", "64.00 KiB", "2.00 MiB", "16.00 GiB": sizes as memory errors print them.
std::string format_bytes(uint64_t bytes);

}  // namespace shmccl::device
