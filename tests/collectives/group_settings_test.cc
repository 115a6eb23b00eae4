// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Settings that every rank of a group must share. The work pool's chunk numbers are counted in
// the control block, so ranks that cut their data into chunks of different sizes would claim
// overlapping or missing ranges: the group takes its first rank's SHMCCL_CHUNK_BYTES
// (ControlHeader::chunk_bytes), whatever the others were started with.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/group_state.h"
#include "core/config.h"
#include "multiprocess.h"
#include "transport/group_transport.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

constexpr int64_t kRows = 1 << 18;  // 1 MiB of int32 per rank: the work pool, many chunks

uint64_t group_chunk_bytes(const ProcessGroupPtr& group) {
  return group->state().transport().chunk_bytes();
}

// Every collective of the work pool, checked against what each rank contributed.
void require_pool_collectives_right(const ProcessGroupPtr& group, const std::string& what) {
  const int rank = group->rank();
  const int size = group->size();
  const int32_t sum = size * (size + 1) / 2;

  Tensor reduced = full({kRows}, rank + 1, kInt32).npu();
  all_reduce(reduced, ReduceOp::SUM, group);
  require(reduced.cpu().to_vector<int32_t>() == std::vector<int32_t>(kRows, sum),
          what + ": all_reduce");

  Tensor gathered = zeros({kRows * size}, kInt32).npu();
  all_gather_into_tensor(gathered, full({kRows}, rank + 1, kInt32).npu(), group);
  const std::vector<int32_t> rows = gathered.cpu().to_vector<int32_t>();
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < kRows; ++i) {
      if (rows[static_cast<size_t>(r * kRows + i)] != r + 1)
        require(false, str(what, ": all_gather row ", r * kRows + i, " of rank ", r));
    }
  }

  Tensor scattered = zeros({kRows}, kInt32).npu();
  reduce_scatter_tensor(scattered, full({kRows * size}, rank + 1, kInt32).npu(), ReduceOp::SUM,
                        group);
  require(scattered.cpu().to_vector<int32_t>() == std::vector<int32_t>(kRows, sum),
          what + ": reduce_scatter");
}

TEST(GroupSettingsTest, RanksStartedWithDifferentChunkSizesUseTheFirstRanks) {
  for (int world : {2, 3, 4}) {
    auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
      // Rank 0 creates the default group, rank 1 the sub-group of ranks 1 and up.
      const std::vector<std::string> chunk_bytes = {"4096", "64K", "12345"};
      setenv("SHMCCL_CHUNK_BYTES", chunk_bytes[static_cast<size_t>(ctx.rank % 3)].c_str(), 1);
      config::reload();
      npu::set_device(ctx.rank);
      ctx.init();
      require(group_chunk_bytes(default_group()) == 4096,
              str("the default group cuts chunks of ", group_chunk_bytes(default_group()),
                  " bytes on rank ", ctx.rank));
      require_pool_collectives_right(default_group(), "default group");

      std::vector<int> upper;
      for (int r = 1; r < ctx.world; ++r)
        upper.push_back(r);
      ProcessGroupPtr sub = new_group(upper);
      if (!sub->is_member()) return;  // rank 0
      require(group_chunk_bytes(sub) == 64 * 1024,
              str("the sub-group cuts chunks of ", group_chunk_bytes(sub), " bytes on rank ",
                  ctx.rank));
      require_pool_collectives_right(sub, "sub-group");
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

}  // namespace
}  // namespace shmccl
