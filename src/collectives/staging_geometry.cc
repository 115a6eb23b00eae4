// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/staging_geometry.h"

#include "collectives/host_staging.h"

namespace shmccl::collectives {

using transport::OpKind;

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
      // Two ranks: each reduces whole windows from both sources; the two-phase form would read
      // as much, write more and synchronise once more per window.
      if (size > 2) break;
      [[fallthrough]];
    case OpKind::kBroadcast:
      for (int j = 0; j < size; ++j)
        g.source_bytes[j] = plan.input().nbytes();
      g.windows = ceil_div(plan.input().nbytes(), g.window);
      return g;
    case OpKind::kReduceScatter:
      break;
    case OpKind::kBarrier:
    case OpKind::kNone:
      return g;
  }
  g.pieces = true;
  const uint64_t total = plan.input().nbytes();
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
