// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/host_staging.h"

#include <algorithm>

#include "collectives/group_state.h"
#include "collectives/op_plan.h"
#include "core/config.h"
#include "core/logging.h"
#include "device/caching_allocator.h"
#include "device/device_context.h"
#include "shmccl/npu.hpp"

namespace shmccl::collectives {

HostStaging::HostStaging() {
  // Whole cache lines keep every slot and piece aligned for every dtype; the cap keeps
  // kStagingDepth windows addressable without overflow.
  const uint64_t configured = config::get_bytes("SHMCCL_HOST_WINDOW_BYTES");
  window_ = std::clamp<uint64_t>(configured, kMinStagingWindow, uint64_t{1} << 30) / 64 * 64;
}

HostStaging::~HostStaging() {
  if (arena_ == nullptr) return;
  try {
    arena_->free_segment(area_.offset, area_.bytes);
  } catch (const Error& error) {  // a destructor must not throw; the range stays taken
    SHMCCL_WARN(kColl, "releasing a host staging area: ", error.what());
  }
}

transport::BufferRef HostStaging::area() {
  if (arena_ == nullptr) {
    const int device = npu::current_device();
    device::Arena& arena = device::arena(device);
    const uint64_t bytes = kStagingDepth * window_;
    uint64_t offset = 0;
    try {
      offset = arena.allocate_segment(bytes);
    } catch (const OutOfMemoryError&) {
      device::allocator(device).empty_cache();  // as the caching allocator does on OOM
      offset = arena.allocate_segment(bytes);
    }
    arena_ = &arena;
    area_.arena = arena.handle();
    area_.offset = offset;
    area_.bytes = bytes;
  }
  return area_;
}

bool sends_data(const OpPlan& plan, int rank) {
  switch (plan.kind) {
    case transport::OpKind::kAllGather:
    case transport::OpKind::kAllGatherList:
      return plan.splits[static_cast<size_t>(rank)] * plan.row_bytes() > 0;
    case transport::OpKind::kReduceScatter:
    case transport::OpKind::kAllReduce:
      return plan.input_bytes() > 0;
    case transport::OpKind::kBroadcast:
      return rank == plan.root && plan.input_bytes() > 0;
    case transport::OpKind::kBarrier:
    case transport::OpKind::kNone:
      break;
  }
  return false;
}

void describe_host_sides(detail::GroupState& state, const OpPlan& plan,
                         transport::OpDescriptor& descriptor) {
  HostStaging& staging = state.host_staging();
  uint8_t sides = 0;
  if (plan.input().defined() && plan.input().is_cpu()) sides |= transport::kHostInput;
  if (plan.output().defined() && plan.output().is_cpu()) sides |= transport::kHostOutput;
  for (const Tensor& output : plan.outputs()) {
    if (output.is_cpu()) sides |= transport::kHostOutput;
  }
  descriptor.host_sides = sides;
  descriptor.staging_window = staging.window();
  // Only a rank with data to send needs an area (a broadcast's receivers never allocate one).
  if ((sides & transport::kHostInput) != 0 && sends_data(plan, state.rank())) {
    descriptor.input = staging.area();
  }
}

}  // namespace shmccl::collectives
