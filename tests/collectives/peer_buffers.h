// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tests that resolve peers' buffers themselves (GroupTransport::resolve) need the descriptors a
// collective keeps to itself: they exchange them through an all-gather of host tensors, which
// touches no arena.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "device/arena.h"
#include "device/device_context.h"
#include "shmccl/shmccl.hpp"
#include "transport/control_block.h"

namespace shmccl::testing {

// Every rank's descriptor of its NPU tensor `mine` (on its current device), by rank.
inline std::vector<transport::BufferRef> exchange_buffer_refs(const Tensor& mine) {
  device::Arena& arena = device::arena(mine.device().index);
  transport::BufferRef own;
  own.arena = arena.handle();
  own.offset = static_cast<uint64_t>(static_cast<const char*>(mine.data_ptr()) - arena.base());
  own.bytes = mine.nbytes();
  const int world = get_world_size();
  Tensor refs = zeros({world * static_cast<int64_t>(sizeof(own))}, kUInt8);
  all_gather_into_tensor(refs, from_blob_copy(&own, {static_cast<int64_t>(sizeof(own))}, kUInt8));
  std::vector<transport::BufferRef> all(static_cast<size_t>(world));
  std::memcpy(all.data(), refs.data_ptr(), all.size() * sizeof(own));
  return all;
}

}  // namespace shmccl::testing
