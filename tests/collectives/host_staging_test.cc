// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Host tensors staged through the pipelined per-group windows (collectives/host_pipeline.h), at
// 2, 3, 4 and 8 ranks: 4 KiB windows, so a few KiB span many windows and every slot is reused;
// uneven splits with zeros; every op, dtype and reduce op; host on every rank, host on some
// ranks and NPU on the others, host input with NPU output and the reverse; in place; the list
// form of all-gather; results against a locally computed reference. Also: a dead or stalled peer
// fails the pipeline promptly with the late ranks named.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <random>
#include <thread>

#include "collectives/fault_injection.h"
#include "collectives/group_state.h"
#include "collectives/reference.h"
#include "core/config.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::kAllOps;
using testing::kAllTypes;
using testing::make_input;
using testing::random_splits;
using testing::require;
using testing::require_close;
using testing::str;

// 4 KiB windows (the smallest): a few KiB are many windows and reuse every slot; a small inline
// limit sends all but the tiniest collectives through the pipeline.
void use_small_windows() {
  setenv("SHMCCL_HOST_WINDOW_BYTES", "4096", 1);
  setenv("SHMCCL_INLINE_BYTES", "512", 1);
  config::reload();
}

// Where a rank keeps its input and its output.
enum class Placement {
  kHost,          // both on the host, every rank
  kHostToNpu,     // host input, NPU output
  kNpuToHost,     // NPU input, host output
  kAlternating,   // even ranks on the host, odd ranks on the NPU
  kAlternating2,  // even ranks host input + NPU output, odd ranks the reverse
};
constexpr Placement kPlacements[] = {Placement::kHost, Placement::kHostToNpu, Placement::kNpuToHost,
                                     Placement::kAlternating, Placement::kAlternating2};

Device npu_device() {
  return Device::npu(npu::current_device());
}
Device input_place(Placement placement, int rank) {
  switch (placement) {
    case Placement::kHost:
    case Placement::kHostToNpu:
      return Device::cpu();
    case Placement::kNpuToHost:
      return npu_device();
    case Placement::kAlternating:
    case Placement::kAlternating2:
      return rank % 2 == 0 ? Device::cpu() : npu_device();
  }
  return Device::cpu();
}
Device output_place(Placement placement, int rank) {
  switch (placement) {
    case Placement::kHost:
    case Placement::kNpuToHost:
      return Device::cpu();
    case Placement::kHostToNpu:
      return npu_device();
    case Placement::kAlternating:
      return rank % 2 == 0 ? Device::cpu() : npu_device();
    case Placement::kAlternating2:
      return rank % 2 == 0 ? npu_device() : Device::cpu();
  }
  return Device::cpu();
}

int64_t sum(const std::vector<int64_t>& values, size_t count) {
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i)
    total += values[i];
  return total;
}

void start(const testing::RankContext& ctx) {
  use_small_windows();
  npu::set_device(ctx.rank % npu::device_count());
  ctx.init();
}

class HostStagingTest : public ::testing::TestWithParam<int> {};

// Rows of 7 elements: windows split rows, and row offsets are not cache-line aligned.
TEST_P(HostStagingTest, AllGatherEveryPlacementTensorAndListForms) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    start(ctx);
    const int64_t cols = 7;
    int salt = 0;
    for (int64_t max_rows : {1, 40, 700}) {  // under one window, about one, many
      for (ScalarType dtype : {kUInt8, kFloat16, kFloat32, kFloat64}) {
        for (Placement placement : kPlacements) {
          ++salt;
          const auto splits = random_splits(ctx.world, salt * 13 + max_rows, max_rows);
          const int64_t mine = splits[ctx.rank];
          Tensor input = make_input(ReduceOp::SUM, dtype, ctx.rank, {mine, cols}, salt)
                             .to(input_place(placement, ctx.rank));
          const bool list = salt % 3 == 0;
          const bool async = salt % 4 == 1;
          std::vector<Tensor> pieces;
          Tensor output;
          if (list) {
            for (int r = 0; r < ctx.world; ++r) {
              // The list form's outputs may live apart: alternate them between host and NPU.
              const Device where = (r + salt) % 2 ? output_place(placement, ctx.rank)
                                                  : input_place(placement, ctx.rank);
              pieces.push_back(zeros({splits[r], cols}, dtype, where));
            }
            all_gather(pieces, input, nullptr, async)->wait();
          } else {
            output =
                zeros({sum(splits, splits.size()), cols}, dtype, output_place(placement, ctx.rank));
            all_gather_into_tensor_uneven(output, input, splits, nullptr, async)->wait();
          }
          int64_t row = 0;
          for (int r = 0; r < ctx.world; ++r) {
            const Tensor expected = make_input(ReduceOp::SUM, dtype, r, {splits[r], cols}, salt);
            const Tensor got = list ? pieces[r] : output.narrow(0, row, splits[r]);
            require_close(
                got, expected,
                str("all_gather", list ? " list" : "", " dtype ", dtype, " placement ",
                    static_cast<int>(placement), " max_rows ", max_rows, " rows of rank ", r));
            row += splits[r];
          }
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(HostStagingTest, ReduceScatterEveryOpDtypeAndPlacement) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    start(ctx);
    const int64_t cols = 3;
    int salt = 0;
    for (int64_t max_rows : {30, 900}) {
      for (ScalarType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (dtype == kBool && op == ReduceOp::AVG) continue;
          ++salt;
          const Placement placement = kPlacements[salt % 5];
          const auto splits = random_splits(ctx.world, salt * 17 + max_rows, max_rows);
          const int64_t total = sum(splits, splits.size());
          Tensor input = make_input(op, dtype, ctx.rank, {total, cols}, salt)
                             .to(input_place(placement, ctx.rank));
          Tensor output = zeros({splits[ctx.rank], cols}, dtype, output_place(placement, ctx.rank));
          reduce_scatter_tensor_uneven(output, input, splits, op, nullptr, salt % 4 == 1)->wait();
          const int64_t first_row = sum(splits, static_cast<size_t>(ctx.rank));
          std::vector<double> expected(static_cast<size_t>(splits[ctx.rank] * cols));
          for (size_t e = 0; e < expected.size(); ++e) {
            std::vector<double> values;
            for (int r = 0; r < ctx.world; ++r) {
              values.push_back(testing::input_value(op, dtype, r, first_row * cols + e, salt));
            }
            expected[e] = testing::reduce_values(op, dtype, values);
          }
          require_close(output, from_vector<double>(expected, {splits[ctx.rank], cols}).to(dtype),
                        str("reduce_scatter dtype ", dtype, " op ", op, " placement ",
                            static_cast<int>(placement), " max_rows ", max_rows));
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(HostStagingTest, AllReduceEveryOpAndDtypeHostOnSomeRanks) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    start(ctx);
    int salt = 0;
    for (int64_t numel : {700, 9001}) {  // one window or so, many windows
      for (ScalarType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (dtype == kBool && op == ReduceOp::AVG) continue;
          ++salt;
          // Every rank on the host, or the even ranks only.
          const Device where = salt % 2 == 0 || ctx.rank % 2 == 0 ? Device::cpu() : npu_device();
          Tensor tensor = make_input(op, dtype, ctx.rank, {numel}, salt).to(where);
          all_reduce(tensor, op, nullptr, salt % 3 == 0)->wait();
          std::vector<double> expected(static_cast<size_t>(numel));
          for (int64_t e = 0; e < numel; ++e) {
            std::vector<double> values;
            for (int r = 0; r < ctx.world; ++r)
              values.push_back(testing::input_value(op, dtype, r, e, salt));
            expected[static_cast<size_t>(e)] = testing::reduce_values(op, dtype, values);
          }
          require_close(tensor, from_vector<double>(expected).to(dtype),
                        str("all_reduce dtype ", dtype, " op ", op, " numel ", numel));
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(HostStagingTest, BroadcastFromEveryRootEveryPlacement) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    start(ctx);
    int salt = 0;
    for (int64_t numel : {300, 20000}) {
      for (int root = 0; root < ctx.world; ++root) {
        for (int mode = 0; mode < 3; ++mode) {  // all host; host root only; host receivers only
          ++salt;
          const bool on_host = mode == 0 || (mode == 1) == (ctx.rank == root);
          const ScalarType dtype = salt % 2 ? kInt32 : kFloat16;
          Tensor data = make_input(ReduceOp::SUM, dtype, ctx.rank, {numel}, salt)
                            .to(on_host ? Device::cpu() : npu_device());
          broadcast(data, root, nullptr, salt % 4 == 0)->wait();
          require_close(data, make_input(ReduceOp::SUM, dtype, root, {numel}, salt),
                        str("broadcast from ", root, " mode ", mode, " numel ", numel));
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(HostStagingTest, InPlaceFormsOnHostAndMixed) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    start(ctx);
    int salt = 0;
    for (int64_t max_rows : {20, 5000}) {
      for (int mode = 0; mode < 2; ++mode) {  // all host; even ranks host, odd ranks NPU
        ++salt;
        const Device where = mode == 0 || ctx.rank % 2 == 0 ? Device::cpu() : npu_device();
        const auto splits = random_splits(ctx.world, salt * 7 + max_rows, max_rows);
        const int64_t first = sum(splits, static_cast<size_t>(ctx.rank));
        // All-gather with the input being this rank's rows of the output.
        Tensor output = zeros({sum(splits, splits.size())}, kFloat32, where);
        Tensor slice = output.narrow(0, first, splits[ctx.rank]);
        slice.fill_(ctx.rank + 1);
        all_gather_into_tensor_uneven(output, slice, splits);
        int64_t row = 0;
        for (int r = 0; r < ctx.world; ++r) {
          require_close(output.narrow(0, row, splits[r]), full({splits[r]}, r + 1, kFloat32),
                        str("in-place all_gather mode ", mode, " rows of rank ", r));
          row += splits[r];
        }
        // Reduce-scatter with the output being this rank's rows of the input.
        Tensor input =
            make_input(ReduceOp::SUM, kInt32, ctx.rank, {sum(splits, splits.size())}, salt)
                .to(where);
        Tensor mine = input.narrow(0, first, splits[ctx.rank]);
        reduce_scatter_tensor_uneven(mine, input, splits, ReduceOp::SUM);
        std::vector<double> expected(static_cast<size_t>(splits[ctx.rank]));
        for (size_t e = 0; e < expected.size(); ++e) {
          std::vector<double> values;
          for (int r = 0; r < ctx.world; ++r) {
            values.push_back(testing::input_value(ReduceOp::SUM, kInt32, r, first + e, salt));
          }
          expected[e] = testing::reduce_values(ReduceOp::SUM, kInt32, values);
        }
        require_close(mine, from_vector<double>(expected).to(kInt32),
                      str("in-place reduce_scatter mode ", mode));
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostStagingTest, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The default window (hundreds of KiB) with tensors of a few MiB: several windows, all slots.
// Host tensors take no device memory of the caller's (the staging area is the group's own arena
// segment, not an allocation; it used to be a full-size device copy of each tensor).
TEST(HostStagingDefaultWindowTest, MegabyteTensorsAtTwoAndFourRanks) {
  for (int world : {2, 4}) {
    auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % npu::device_count());
      ctx.init();
      const uint64_t peak = npu::max_memory_allocated();
      const int64_t numel = (3 << 20) / 4 + 5;  // 3 MiB of float32 and a bit
      Tensor tensor = full({numel}, ctx.rank + 1, kFloat32);
      all_reduce(tensor);
      require_close(tensor, full({numel}, ctx.world * (ctx.world + 1) / 2.0, kFloat32),
                    "all_reduce");
      Tensor gathered = zeros({ctx.world * numel}, kFloat32);
      all_gather_into_tensor(gathered, full({numel}, ctx.rank, kFloat32));
      for (int r = 0; r < ctx.world; ++r)
        require_close(gathered.narrow(0, r * numel, numel), full({numel}, r, kFloat32), "gather");
      require(npu::max_memory_allocated() == peak,
              str("host collectives allocated device memory: peak ", npu::max_memory_allocated(),
                  " bytes, ", peak, " before"));
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// A peer's window counter beyond the collective's windows (a corrupt or hostile control block)
// is reported as such, not trusted: rank 1 stalls after its first window while a thread of its
// claims it staged every window there will ever be.
TEST(HostStagingFailureTest, CounterBeyondTheCollectiveIsAnError) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "fault injection not compiled in";
  testing::RunOptions options;
  options.reap_when_others_end = {1};
  auto results = testing::run_ranks(
      2,
      [](const testing::RankContext& ctx) {
        setenv("SHMCCL_FAULT", "mid_copy:1:stall", 1);
        start(ctx);
        default_group()->set_timeout(std::chrono::milliseconds(5000));
        std::thread corrupter;
        if (ctx.rank == 1) {
          transport::RankSlot& slot = default_group()->state().transport().slot(1);
          corrupter = std::thread([&slot] {
            while (true)
              slot.staged.store(~uint64_t{0}, std::memory_order_relaxed);
          });
          corrupter.detach();  // runs until the harness reaps the stalled rank
        }
        Tensor input = full({40000}, ctx.rank, kFloat32);
        Tensor output = zeros({80000}, kFloat32);
        std::string text = "no error";
        try {
          all_gather_into_tensor(output, input);
        } catch (const RemoteError& error) {
          text = error.what();
        }
        require(text.find("rank 1 published host-staging window 18446744073709551615 beyond this "
                          "collective's last window") != std::string::npos,
                text);
      },
      options);
  EXPECT_EQ(results[0].exit_code, 0) << results[0].message;
}

// A rank killed after its first window: the others are waiting for its next one and fail fast,
// naming it, instead of hanging until the timeout.
TEST(HostStagingFailureTest, DeadPeerMidPipelineFailsSurvivorsPromptly) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "fault injection not compiled in";
  for (int world : {3, 8}) {
    const std::string job = testing::unique_job_id();
    testing::SurvivorBarrier survivors;
    auto results = testing::run_ranks(
        world,
        [&survivors](const testing::RankContext& ctx) {
          setenv("SHMCCL_FAULT", "mid_copy:1:kill", 1);
          start(ctx);
          Tensor input = full({40000}, ctx.rank, kFloat32);  // 40 windows per rank
          Tensor output = zeros({40000 * ctx.world}, kFloat32);
          testing::require_death_noticed(ctx, survivors, /*victim=*/1, /*bound_seconds=*/2.0,
                                         [&] { all_gather_into_tensor(output, input); });
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::only_victim_killed(results, /*victim=*/1)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

// A rank that stalls mid-pipeline: the others time out with the group's timeout, and the
// message names the stage and the late rank.
TEST(HostStagingFailureTest, StalledPeerTimesOutNamingIt) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "fault injection not compiled in";
  testing::RunOptions options;
  options.reap_when_others_end = {2};
  // Shared with the forked ranks: how many have timed out. Nobody exits before both did, so no
  // exit is reported instead of the timeout.
  void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* gave_up = new (shared) std::atomic<int>(0);
  auto results = testing::run_ranks(
      3,
      [gave_up](const testing::RankContext& ctx) {
        setenv("SHMCCL_FAULT", "mid_copy:2:stall", 1);
        start(ctx);
        default_group()->set_timeout(std::chrono::milliseconds(300));
        Tensor tensor = full({40000}, ctx.rank, kFloat32);
        std::string text = "no error";
        try {
          all_reduce(tensor);
        } catch (const TimeoutError& error) {
          text = error.what();
        }
        gave_up->fetch_add(1);
        while (gave_up->load() < 2)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        require(text.find("in all_reduce (sequence 1, timeout 300 ms): staging host tensors: "
                          "rank 2 has not") != std::string::npos,
                text);
      },
      options);
  for (const auto& result : results) {
    if (result.rank != 2) {
      EXPECT_EQ(result.exit_code, 0) << result.message;
    }
  }
  munmap(shared, sizeof(std::atomic<int>));
}

}  // namespace
}  // namespace shmccl
