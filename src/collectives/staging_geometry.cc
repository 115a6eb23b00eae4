// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/staging_geometry.h"

#include "collectives/host_staging.h"

namespace shmccl::collectives {

using transport::OpKind;

// All-reduces reading at most this much per rank reduce whole windows (no reduce phase).
constexpr uint64_t kWholeReduceBytes = 256 << 10;

namespace {

// Ranks whose input peers read in place (on the NPU), by the agreed descriptors.
int ranks_in_place(const ExecContext& context) {
  int count = 0;
  for (int r = 0; r < context.size; ++r) {
    if ((context.descriptors[r]->host_sides & transport::kHostInput) == 0) ++count;
  }
  return count;
}

}  // namespace

StagingGeometry staging_geometry(const ExecContext& context) {
  const OpPlan& plan = context.plan;
  const int size = context.size;
  StagingGeometry g;
  // The smallest window of any rank: every rank's slots hold at least that much. Read once per
  // descriptor (shared memory) and clamped, so a corrupt value cannot shrink it below a sane size
  // (a too small area then fails resolve()'s bounds check).
  uint64_t window = uint64_t{1} << 30;
  for (int r = 0; r < size; ++r) {
    const uint64_t theirs = context.descriptors[r]->staging_window;
    window = std::min(window, theirs);
  }
  g.window = std::max(window, kMinStagingWindow) / 64 * 64;
  const auto row_bytes = static_cast<uint64_t>(plan.row_bytes());
  switch (plan.kind) {
    case OpKind::kAllGather:
    case OpKind::kAllGatherList:
      for (int j = 0; j < size; ++j) {
        g.source_bytes[j] = static_cast<uint64_t>(plan.splits[static_cast<size_t>(j)]) * row_bytes;
        g.windows = std::max(g.windows, ceil_div(g.source_bytes[j], g.window));
      }
      return g;
    case OpKind::kAllReduce:
      // Small all-reduces are bound by synchronisation, not bandwidth: each rank reduces whole
      // windows from every source, which saves the reduce phase's synchronisation. Larger ones
      // split the reduction between the ranks (measured: at 2 ranks the whole-window form is
      // faster at 64 KiB, slower from 256 KiB).
      // An NPU tensor is reduced in place, so it may receive a window only once every peer read
      // it: two such ranks would wait for each other, so at most one may read in place.
      if (plan.input_bytes() * static_cast<uint64_t>(size) > kWholeReduceBytes ||
          ranks_in_place(context) > 1) {
        break;
      }
      [[fallthrough]];
    case OpKind::kBroadcast:
      for (int j = 0; j < size; ++j)
        g.source_bytes[j] = plan.input_bytes();
      g.windows = ceil_div(plan.input_bytes(), g.window);
      return g;
    case OpKind::kReduceScatter:
      break;
    case OpKind::kBarrier:
    case OpKind::kNone:
      return g;
  }
  g.pieces = true;
  const uint64_t total = plan.input_bytes();
  const uint64_t element = element_size(plan.dtype);
  const auto numel = static_cast<uint64_t>(plan.input().numel());
  for (int i = 0; i < size; ++i) {
    g.source_bytes[i] = total;
    if (plan.kind == OpKind::kReduceScatter) {
      g.begin[i] = static_cast<uint64_t>(plan.rows_before(i)) * row_bytes;
      g.length[i] = static_cast<uint64_t>(plan.splits[static_cast<size_t>(i)]) * row_bytes;
    } else {  // an even split of the elements
      g.begin[i] = numel * static_cast<uint64_t>(i) / static_cast<uint64_t>(size) * element;
      g.length[i] =
          numel * static_cast<uint64_t>(i + 1) / static_cast<uint64_t>(size) * element - g.begin[i];
    }
  }
  // Pieces in proportion to the destinations' bytes, so that uneven splits still fill the slots
  // and all destinations finish in about the same number of windows: 64 bytes each (every dtype,
  // cache-line aligned) plus their share of the rest. window >= 4096 >= 64 * kMaxRanks.
  const uint64_t spare = g.window - 64 * static_cast<uint64_t>(size);
  uint64_t offset = 0;
  for (int i = 0; i < size; ++i) {
    g.piece[i] = 0;
    if (g.length[i] > 0) {
      const auto share = static_cast<uint64_t>(static_cast<unsigned __int128>(spare) * g.length[i] /
                                               std::max<uint64_t>(total, 1));
      g.piece[i] = 64 + share / 64 * 64;
    }
    g.slot_offset[i] = offset;
    offset += g.piece[i];
    g.windows = std::max(g.windows, ceil_div(g.length[i], g.piece[i]));
  }
  return g;
}

}  // namespace shmccl::collectives
