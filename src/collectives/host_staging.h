// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// HostStaging: the bounded area through which one process group stages host tensors. Peers
// cannot address another process's heap, so a rank copies its host input, one window at a time,
// into one of kStagingDepth slots of `window()` bytes in its own device arena, where peers map
// it as they map NPU tensors (BufferRef, GroupTransport::resolve). The area is an arena segment
// of its own, taken at the group's first collective that stages something and released with the
// group: memory is bounded whatever the tensor sizes, and, like NCCL's buffers in torch, it is
// not a user allocation (npu::memory_allocated() does not count it). The pipeline that uses it
// is host_pipeline.h.
//
// Owned by GroupState; used by the thread executing the group's collectives (one at a time), so
// not thread-safe.
#pragma once

#include <cstdint>

#include "device/arena.h"
#include "transport/control_block.h"

namespace shmccl::detail {
class GroupState;
}

namespace shmccl::collectives {

struct OpPlan;

// Slots per rank: windows w and w + kStagingDepth share a slot, so a rank may stage up to
// kStagingDepth - 1 windows ahead of the slowest reader.
inline constexpr uint64_t kStagingDepth = 4;
inline constexpr uint64_t kMinStagingWindow = 4096;

class HostStaging {
 public:
  // Reads SHMCCL_HOST_WINDOW_BYTES (rounded to whole cache lines, at least 4 KiB); allocates
  // nothing yet.
  HostStaging();
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  uint64_t window() const { return window_; }

  // This rank's area, kStagingDepth * window() bytes of the current NPU's arena, taken on first
  // use (OutOfMemoryError when the arena is full even without the allocator's cached blocks).
  transport::BufferRef area();

  // The first window number of the next staged collective; the next one starts `windows` later.
  // Every rank takes the same counts in the same order, so the numbers agree across ranks.
  uint64_t take_windows(uint64_t windows) {
    const uint64_t first = next_window_;
    next_window_ += windows;
    return first;
  }

 private:
  uint64_t window_;
  device::Arena* arena_ = nullptr;  // arenas live as long as the process
  transport::BufferRef area_;       // valid once arena_ is set
  uint64_t next_window_ = 0;
};

// True when `rank`'s input holds data the collective sends (the same answer on every rank): its
// rows of an all-gather, a reduction's input, a broadcast root's tensor.
bool sends_data(const OpPlan& plan, int rank);

// Fills the host-staging fields of this rank's descriptor of a collective that does not travel
// inline: which of its tensors are on the host (OpDescriptor::host_sides), its window, and, when
// its input is on the host and it has data to send, its staging area as the input buffer.
void describe_host_sides(detail::GroupState& state, const OpPlan& plan,
                         transport::OpDescriptor& descriptor);

}  // namespace shmccl::collectives
