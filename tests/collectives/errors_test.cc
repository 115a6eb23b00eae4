// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Bad arguments give the documented texts before any peer waits; disagreeing, dead and late
// ranks give errors on every surviving rank instead of hangs; nothing is left in /dev/shm.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "collectives/group_state.h"
#include "core/config.h"
#include "multiprocess.h"
#include "sleepers.h"
#include "transport/peer_monitor.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

// Runs `call`, requires a shmccl::Error whose text contains `text`.
template <typename Call>
void require_error(Call&& call, const std::string& text) {
  try {
    call();
  } catch (const Error& error) {
    require(std::string(error.what()).find(text) != std::string::npos,
            str("error text '", error.what(), "' lacks '", text, "'"));
    return;
  }
  throw testing::RequirementFailed("no error; expected one containing '" + text + "'");
}

// Runs `body` at 2, 3, 4 and 8 ranks; every rank must succeed and leave no segment behind.
void run_at_every_rank_count(const std::function<void(const testing::RankContext&)>& body) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    auto results = testing::run_ranks(world, body, std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job)) << world << " ranks";
  }
}

TEST(CollectiveErrorsTest, ArgumentErrorsHaveTheReferenceTextsAndLeaveTheGroupUsable) {
  const std::string job = testing::unique_job_id();
  auto results = testing::run_ranks(
      2,
      [](const testing::RankContext& ctx) {
        npu::set_device(ctx.rank);
        ctx.init();
        Tensor output = zeros({5}, kInt32).npu();
        Tensor input = zeros({ctx.rank == 0 ? 2 : 3}, kInt32).npu();
        require_error(
            [&] {
              all_gather_into_tensor_uneven(output, input, {2, 2});
            },
            "Split sizes doesn't match total dim 0 size");
        require_error(
            [&] {
              all_gather_into_tensor_uneven(output, input, {2, 2, 1});
            },
            "Number of tensor splits not equal to group size");
        require_error([&] { all_gather_into_tensor_uneven(output, input); },
                      "Tensor's dim 0 does not divide equally across group size");
        // No rows, so nothing allocated, but rows whose bytes overflow (OpPlan::row_bytes()).
        Tensor wide_in = zeros({0, int64_t{1} << 61}, kInt64).npu();
        Tensor wide_out = zeros({0, int64_t{1} << 61}, kInt64).npu();
        require_error(
            [&] {
              all_gather_into_tensor_uneven(wide_out, wide_in, {0, 0});
            },
            "its row of int64 has more than 2^63 bytes");
        require_error(
            [&] {
              reduce_scatter_tensor_uneven(wide_out, wide_in, {0, 0});
            },
            "its row of int64 has more than 2^63 bytes");
        Tensor huge_row = zeros({0, int64_t{1} << 62, 4}, kInt8).npu();
        require_error(
            [&] {
              all_gather_into_tensor_uneven(huge_row, huge_row, {0, 0});
            },
            "its row has more than 2^63 elements");
        Tensor floats = zeros({ctx.rank == 0 ? 2 : 3}, kFloat32).npu();
        require_error(
            [&] {
              all_gather_into_tensor_uneven(output, floats, {2, 3});
            },
            "output tensor must have the same type as input tensor");
        require_error(
            [&] {
              all_gather_into_tensor_uneven(output, input, {3, 2});
            },
            // This rank's own chunk disagrees with its split.
            ctx.rank == 0 ? "all_gather_into_tensor_uneven: rank 0's input has 2 rows but its "
                            "split size is 3 (split sizes [3, 2])"
                          : "all_gather_into_tensor_uneven: rank 1's input has 3 rows but its "
                            "split size is 2 (split sizes [3, 2])");
        Tensor wide = zeros({5, 2}, kInt32).npu();
        require_error(
            [&] {
              all_gather_into_tensor_uneven(wide, input, {2, 3});
            },
            "must agree in every dimension but dim 0");
        // Reduce-scatter: the same texts.
        Tensor rs_input = ones({5}, kInt32).npu();
        Tensor rs_output = zeros({ctx.rank == 0 ? 2 : 3}, kInt32).npu();
        require_error(
            [&] {
              reduce_scatter_tensor_uneven(rs_output, rs_input, {1, 1});
            },
            "Split sizes doesn't match total dim 0 size");
        require_error([&] { reduce_scatter_tensor_uneven(rs_output, rs_input, {5}); },
                      "Number of tensor splits not equal to group size");
        require_error([&] { reduce_scatter_tensor_uneven(rs_output, rs_input); },
                      "Tensor's dim 0 does not divide equally across group size");
        require_error(
            [&] {
              reduce_scatter_tensor_uneven(rs_output, rs_input, {3, 2});
            },
            ctx.rank == 0
                ? "reduce_scatter_tensor_uneven: rank 0's output has 2 rows but its split size is 3"
                : "reduce_scatter_tensor_uneven: rank 1's output has 3 rows but its split size is "
                  "2");
        // Every form checks the types itself (each calls the check on its own path).
        const char* same_type = "output tensor must have the same type as input tensor";
        Tensor float_rows = zeros({ctx.rank == 0 ? 2 : 3}, kFloat32).npu();
        require_error(
            [&] {
              reduce_scatter_tensor_uneven(float_rows, rs_input, {2, 3});
            },
            same_type);
        Tensor gathered = zeros({4}, kInt32).npu();
        Tensor two_floats = zeros({2}, kFloat32).npu();
        require_error([&] { all_gather_into_tensor(gathered, two_floats); }, same_type);
        // The even forms check element counts only, as torch's do (any shape of that size).
        Tensor five = zeros({5}, kInt32).npu();
        require_error(
            [&] { all_gather_into_tensor(five, zeros({2}, kInt32).npu()); },
            "all_gather_into_tensor: output tensor size must be equal to world_size times input "
            "tensor size: the output has shape [5] (5 elements), not 2 times the input's 2");
        require_error([&] { reduce_scatter_tensor(five, zeros({9}, kInt32).npu()); },
                      "reduce_scatter_tensor: the input has 9 elements (shape [9]); expected 2 "
                      "times the output's 5 (shape [5])");
        Tensor four_floats = zeros({4}, kFloat32).npu();
        Tensor two_ints = zeros({2}, kInt32).npu();
        require_error([&] { reduce_scatter_tensor(two_ints, four_floats); }, same_type);
        std::vector<Tensor> float_outputs{zeros({2}, kFloat32), zeros({3}, kFloat32)};
        require_error([&] { all_gather(float_outputs, input); }, same_type);

        Tensor undefined;
        require_error([&] { all_reduce(undefined); }, "undefined");
        Tensor b = zeros({2}).npu();
        require_error([&] { broadcast(b, 5); }, "not a member of the group");
        std::vector<Tensor> too_few{zeros({2}, kInt32)};
        require_error([&] { all_gather(too_few, input); }, "expected 2 output tensors");
        require_error([&] { new_group({0, 0}); }, "duplicate ranks");
        require_error([&] { group_from_comm_name("nope"); }, "unknown communicator name");
        // An op cast from an integer the enum does not name: the rank's own error, not a
        // failure of the kernel once every rank arrived (which would fail the group).
        Tensor values = ones({4}, kInt32).npu();
        require_error([&] { all_reduce(values, static_cast<ReduceOp>(9)); },
                      "all_reduce: invalid reduce op 9");
        // c10d's ops that shmccl does not have are named (5-8: BAND, BOR, BXOR, PREMUL_SUM).
        require_error([&] { all_reduce(values, static_cast<ReduceOp>(5)); },
                      "all_reduce: invalid reduce op 5 (c10d's ReduceOp.BAND, which shmccl does "
                      "not have; ReduceOp is SUM, PRODUCT, MIN, MAX or AVG)");
        require_error([&] { all_reduce(values, static_cast<ReduceOp>(8)); },
                      "all_reduce: invalid reduce op 8 (c10d's ReduceOp.PREMUL_SUM, which shmccl");
        require_error(
            [&] { all_reduce(values, static_cast<ReduceOp>(9)); },
            "all_reduce: invalid reduce op 9 (ReduceOp is SUM, PRODUCT, MIN, MAX or AVG)");
        require_error(
            [&] {
              Tensor half = zeros({2}, kInt32).npu();
              reduce_scatter_tensor(half, values, static_cast<ReduceOp>(-1));
            },
            "invalid reduce op -1");
        Tensor flags = zeros({4}, kBool).npu();  // torch's text
        require_error([&] { all_reduce(flags, ReduceOp::AVG); },
                      "Cannot use ReduceOp.AVG with boolean inputs");
        Tensor flag_rows = zeros({2}, kBool).npu();
        require_error(
            [&] { reduce_scatter_tensor(flag_rows, zeros({4}, kBool).npu(), ReduceOp::AVG); },
            "Cannot use ReduceOp.AVG with boolean inputs");

        // None of that consumed a collective: the group still works, as in the reference example.
        all_gather_into_tensor_uneven(output, input.fill_(ctx.rank + 1), {2, 3});
        require(output.cpu().to_vector<int32_t>() == std::vector<int32_t>{1, 1, 2, 2, 2}, "works");
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(job));
}

// Tensors a collective would read while it writes them, or on two devices, are refused on the
// rank that passed them, before its peers wait; what the call would have done is left undone.
TEST(CollectiveErrorsTest, PartlyOverlappingTensorsAndTwoDevicesAreRefused) {
  run_at_every_rank_count([](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    const int64_t n = 1000;  // rows per rank: zero-copy, where an overlap corrupted
    Tensor output = zeros({ctx.world * n}, kFloat32).npu();
    // One row off this rank's own slot.
    const int64_t shifted = ctx.rank == 0 ? 1 : ctx.rank * n - 1;
    Tensor input = output.narrow(0, shifted, n);
    require_error([&] { all_gather_into_tensor(output, input); },
                  "all_gather_into_tensor: the input and the output partly overlap");
    require_error([&] { all_gather_into_tensor(output, input); },
                  str("in place it must be exactly this rank's elements [", ctx.rank * n, ", ",
                      (ctx.rank + 1) * n, ") of the output"));
    require_error([&] { all_gather_into_tensor_uneven(output, input); },
                  "in place it must be exactly this rank's rows");
    require_error([&] { reduce_scatter_tensor(input, output); },
                  "reduce_scatter_tensor: the output and the input partly overlap");
    require_error([&] { reduce_scatter_tensor_uneven(input, output); }, "clone() the output first");
    std::vector<Tensor> outputs;
    for (int r = 0; r < ctx.world; ++r)
      outputs.push_back(output.narrow(0, r * n, n));
    Tensor other = outputs[static_cast<size_t>((ctx.rank + 1) % ctx.world)];
    require_error([&] { all_gather(outputs, other); },
                  "it must be apart from output " + std::to_string((ctx.rank + 1) % ctx.world));
    // Two outputs in the same bytes: another rank's slot given twice, or the last slot a
    // row into the one before it. This rank's own output is a tensor of its own.
    Tensor own = zeros({n}, kFloat32).npu();
    std::vector<Tensor> overlapping = outputs;
    overlapping[static_cast<size_t>(ctx.rank)] = own;
    if (ctx.world > 2) {
      std::vector<int> others;
      for (int r = 0; r < ctx.world; ++r)
        if (r != ctx.rank) others.push_back(r);
      overlapping[static_cast<size_t>(others[1])] = outputs[static_cast<size_t>(others[0])];
      require_error([&] { all_gather(overlapping, own); },
                    str("all_gather: output ", others[0], " and output ", others[1],
                        " overlap (bytes [", others[0] * n * 4, ", ", (others[0] + 1) * n * 4,
                        ") and [", others[0] * n * 4, ", ", (others[0] + 1) * n * 4,
                        ") of one storage): each rank's output needs memory of its own"));
      overlapping[static_cast<size_t>(others[1])] = outputs[static_cast<size_t>(others[1])];
    }
    if (ctx.rank < ctx.world - 2) {
      const int last = ctx.world - 1;
      overlapping[static_cast<size_t>(last)] = output.narrow(0, last * n - 1, n);
      require_error([&] { all_gather(overlapping, own); },
                    str("all_gather: output ", last - 1, " and output ", last, " overlap (bytes [",
                        (last - 1) * n * 4, ", ", last * n * 4, ") and [", (last * n - 1) * 4, ", ",
                        ((last + 1) * n - 1) * 4, ") of one storage)"));
      overlapping[static_cast<size_t>(last)] = outputs[static_cast<size_t>(last)];
    }
    const int next = (ctx.rank + 1) % ctx.world;  // this rank's own tensor given again
    overlapping[static_cast<size_t>(next)] = own;
    require_error([&] { all_gather(overlapping, own); },
                  str("all_gather: output ", std::min(ctx.rank, next), " and output ",
                      std::max(ctx.rank, next), " overlap (bytes [0, ", n * 4, ") and [0, ", n * 4,
                      ") of one storage)"));
    // n rows of r + base for every rank r: what an all-gather of ranks filled so gives.
    auto rows_of_every_rank = [&](int base) {
      std::vector<float> rows;
      for (int r = 0; r < ctx.world; ++r)
        rows.insert(rows.end(), static_cast<size_t>(n), static_cast<float>(r + base));
      return rows;
    };
    // Views of one buffer that do not overlap are fine.
    own.fill_(ctx.rank + 10);
    all_gather(outputs, own);
    require(output.cpu().to_vector<float>() == rows_of_every_rank(10),
            "all_gather into views of one buffer");
    // Split sizes whose sum overflows.
    const int64_t huge = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> splits(static_cast<size_t>(ctx.world), huge);
    splits[static_cast<size_t>(ctx.rank)] = n;
    require_error([&] { all_gather_into_tensor_uneven(output, input.clone(), splits); },
                  "sum to more than 2^63");
    // Two devices: the call is ordered after one device's stream only.
    Tensor elsewhere = zeros({n}, kFloat32).npu((ctx.rank + 1) % npu::device_count());
    require_error([&] { all_gather_into_tensor(output, elsewhere); },
                  "a collective's NPU tensors must be on one device");
    // In place still works, and the group was not disturbed.
    Tensor mine = output.narrow(0, ctx.rank * n, n);
    mine.fill_(ctx.rank + 1);
    all_gather_into_tensor(output, mine);
    require(output.cpu().to_vector<float>() == rows_of_every_rank(1), "in-place all_gather");
    destroy_process_group();
  });
}

TEST(CollectiveErrorsTest, NotInitializedAndDoubleInit) {
  auto results = testing::run_ranks(1, [](const testing::RankContext& ctx) {
    Tensor t = zeros({2});
    require_error([&] { all_reduce(t); }, "not initialized");
    InitOptions no_ranks;
    no_ranks.rank = 0;
    no_ranks.world_size = 0;
    require_error([&] { init_process_group(no_ranks); },
                  "world size 0: a group needs at least 1 rank");
    InitOptions too_many;  // the control block's descriptors hold 64 ranks' splits
    too_many.rank = 0;
    too_many.world_size = 65;
    too_many.job_id = testing::unique_job_id();
    require_error([&] { init_process_group(too_many); },
                  "world size 65 exceeds the maximum of 64 ranks on one host");
    // A timeout of 0 would fail every wait at once: refused as set_timeout refuses it.
    InitOptions no_time;
    no_time.rank = 0;
    no_time.world_size = 1;
    no_time.job_id = testing::unique_job_id();
    no_time.timeout = std::chrono::milliseconds(0);
    require_error([&] { init_process_group(no_time); },
                  "init_process_group: the timeout must be > 0 ms, got 0 ms");
    no_time.timeout = std::chrono::milliseconds(-1);
    setenv("SHMCCL_TIMEOUT", "0", 1);
    config::reload();
    require_error([&] { init_process_group(no_time); },
                  "init_process_group: SHMCCL_TIMEOUT=0: the timeout must be > 0 ms");
    unsetenv("SHMCCL_TIMEOUT");
    config::reload();
    ctx.init();
    require_error([&] { new_group({0}, std::chrono::milliseconds(0)); },
                  "new_group: the timeout must be > 0 ms, got 0 ms");
    require_error([&] { ctx.init(); }, "already initialized");
    destroy_process_group();
    ctx.init();  // again, after destroy
    all_reduce(t);
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST(CollectiveErrorsTest, MismatchedCallsFailOnEveryRankWithBothDescriptions) {
  run_at_every_rank_count([](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % 8);
    ctx.init();
    // A different dtype on the last rank. Each rank's text names its own call and one of
    // the other kind (which peer it compared with first is up to the timing).
    const bool odd_one = ctx.rank == ctx.world - 1;
    Tensor t = ones({8}, odd_one ? kInt32 : kFloat32).npu();
    std::string text = "no error";
    try {
      all_reduce(t);
    } catch (const RemoteError& error) {
      text = error.what();
    }
    const std::string mine = odd_one ? "dtype=int32" : "dtype=float32";
    const std::string theirs = odd_one ? "dtype=float32" : "dtype=int32";
    require(text.find(str("collective mismatch in all_reduce: rank ", ctx.rank,
                          " called "
                          "all_reduce(sequence=1, ",
                          mine)) != std::string::npos,
            text);
    require(text.find(str(" but rank ")) != std::string::npos &&
                text.find(str("called all_reduce(sequence=1, ", theirs)) != std::string::npos,
            text);
    if (!odd_one) {
      require(text.find(str(" but rank ", ctx.world - 1, " called")) != std::string::npos, text);
    }
    // The group is now failed for good, with the first failure in the message.
    require_error([&] { barrier(); }, "failed earlier");
  });
}

// When ranks outnumber cores (here: all on one CPU), the other ranks of a barrier wait for rank
// 0's release, which only a barrier gives: rank 0 calling something else is a mismatch on every
// rank, not a wait until the timeout.
TEST(CollectiveErrorsTest, ABarrierAgainstAnotherCallOnRankZeroIsAMismatch) {
  run_at_every_rank_count([](const testing::RankContext& ctx) {
    testing::run_on_one_cpu();
    npu::set_device(ctx.rank % 8);
    ctx.init(/*timeout_ms=*/30000);
    barrier();
    Tensor t = ones({2}, kFloat32).npu();
    if (ctx.rank == 0) {
      require_error([&] { all_reduce(t); }, "collective mismatch in all_reduce");
    } else {
      require_error([&] { barrier(); }, "collective mismatch in barrier");
    }
  });
}

TEST(CollectiveErrorsTest, DifferentSplitSizesAreAMismatchNamingBoth) {
  auto results = testing::run_ranks(2, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    const std::vector<int64_t> splits =
        ctx.rank == 0 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{1, 4};
    Tensor output = zeros({5}, kInt32).npu();
    Tensor input = zeros({splits[ctx.rank]}, kInt32).npu();
    try {
      all_gather_into_tensor_uneven(output, input, splits);
    } catch (const RemoteError& error) {
      const std::string text = error.what();
      require(text.find("splits=[2, 3]") != std::string::npos, text);
      require(text.find("splits=[1, 4]") != std::string::npos, text);
      // Both sides are named as they were called, not by the even form's name.
      require(text.find("called all_gather_into_tensor_uneven(sequence=1") != std::string::npos &&
                  text.find("called all_gather_into_tensor(") == std::string::npos,
              text);
      return;
    }
    throw testing::RequirementFailed("no mismatch error");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// The even and uneven forms of one collective interoperate (the same call with even splits); when
// they disagree, each rank's call is named by the name it was called by.
TEST(CollectiveErrorsTest, AMismatchNamesTheEvenAndUnevenFormsAsCalled) {
  auto results = testing::run_ranks(2, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    Tensor input = full({4}, ctx.rank + 1, kInt32).npu();
    Tensor output = zeros({2}, kInt32).npu();
    if (ctx.rank == 0) {
      reduce_scatter_tensor(output, input);
    } else {
      reduce_scatter_tensor_uneven(output, input, {2, 2});
    }
    require(output.cpu().to_vector<int32_t>() == std::vector<int32_t>{3, 3},
            "the two forms interoperate");
    const std::vector<int64_t> splits =
        ctx.rank == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2, 2};
    Tensor mine = zeros({splits[static_cast<size_t>(ctx.rank)]}, kInt32).npu();
    try {
      if (ctx.rank == 0) {
        reduce_scatter_tensor_uneven(mine, input, splits);
      } else {
        reduce_scatter_tensor(mine, input);
      }
    } catch (const RemoteError& error) {
      const std::string text = error.what();
      require(text.find("called reduce_scatter_tensor_uneven(sequence=2") != std::string::npos &&
                  text.find("called reduce_scatter_tensor(sequence=2") != std::string::npos,
              text);
      return;
    }
    throw testing::RequirementFailed("no mismatch error");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// A loop repeats one call, so each rank reuses its cached fingerprint and descriptors; a call
// that then differs on one rank in its split sizes only (same shapes) is still a mismatch, and
// both descriptions are the calls of that sequence number, not the cached ones.
TEST(CollectiveErrorsTest, AMismatchAfterRepeatedCallsNamesBothCurrentCalls) {
  for (int world : {2, 3}) {
    const std::string job = testing::unique_job_id();
    auto results = testing::run_ranks(
        world,
        [](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init();
          std::vector<int64_t> splits(static_cast<size_t>(ctx.world), 2);
          Tensor output = zeros({2 * ctx.world}, kInt32).npu();
          Tensor input = full({2}, ctx.rank, kInt32).npu();
          for (int i = 0; i < 7; ++i) {  // an odd count: both halves of the slot are cached
            all_gather_into_tensor_uneven(output, input, splits);
          }
          require(output.cpu().to_vector<int32_t>()[2 * (ctx.world - 1)] == ctx.world - 1,
                  "the repeated calls worked");
          std::vector<int64_t> changed = splits;
          if (ctx.rank == ctx.world - 1) {
            changed[0] = 3;
            changed[1] = 1;
          }
          Tensor mine = zeros({changed[static_cast<size_t>(ctx.rank)]}, kInt32).npu();
          try {
            all_gather_into_tensor_uneven(output, mine, changed);
          } catch (const RemoteError& error) {
            const std::string text = error.what();
            require(text.find("sequence=8") != std::string::npos, text);
            require(text.find(ctx.world == 2 ? "splits=[3, 1]" : "splits=[3, 1, 2]") !=
                        std::string::npos,
                    text);
            require(text.find(ctx.world == 2 ? "splits=[2, 2]" : "splits=[2, 2, 2]") !=
                        std::string::npos,
                    text);
            return;
          }
          throw testing::RequirementFailed("no mismatch error");
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

// Rank 0 receives no rows of this reduce-scatter, so it finishes as soon as it has arrived and
// may not see the last rank's different reduce op: the ranks that wait see the mismatch at the
// call, rank 0 at the call (when the last rank was there first) or at its next one.
TEST(CollectiveErrorsTest, AMismatchReachesARankThatFinishedEarlyAtItsNextCall) {
  for (int world : {3, 4}) {
    const std::string job = testing::unique_job_id();
    // Rank 0 stays until the others have seen the mismatch: if it exited first, they could see
    // its exit before the last rank's arrival (a failure too, but not the one tested here).
    int done_pipe[2];
    ASSERT_EQ(pipe(done_pipe), 0);
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init();
          std::vector<int64_t> splits(static_cast<size_t>(ctx.world), 2);
          splits[0] = 0;
          const int64_t rows = 2 * (ctx.world - 1);
          Tensor input = ones({rows}, kFloat32).npu();
          Tensor output = zeros({splits[static_cast<size_t>(ctx.rank)]}, kFloat32).npu();
          const ReduceOp op = ctx.rank == ctx.world - 1 ? ReduceOp::MAX : ReduceOp::SUM;
          if (ctx.rank != 0) {
            require_error([&] { reduce_scatter_tensor_uneven(output, input, splits, op); },
                          "collective mismatch");
            const char byte = 1;
            require(write(done_pipe[1], &byte, 1) == 1, "pipe write");
            return;
          }
          bool reported = false;
          try {
            reduce_scatter_tensor_uneven(output, input, splits, op);
          } catch (const Error& error) {
            require(std::string(error.what()).find("op=max") != std::string::npos, error.what());
            reported = true;
          }
          if (!reported) {
            require_error([&] { barrier(); }, "collective mismatch in the previous collective");
          }
          for (int r = 1; r < ctx.world; ++r) {
            char byte = 0;
            require(read(done_pipe[0], &byte, 1) == 1, "pipe read");
          }
        },
        std::chrono::seconds(60), job);
    close(done_pipe[0]);
    close(done_pipe[1]);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

// Joins the group with waits that neither spin nor yield, so that a rank waiting shows up in the
// group's sleeper count at once.
void join_with_waits_that_sleep_at_once(const testing::RankContext& ctx) {
  setenv("SHMCCL_SPIN_TIME", "0", 1);
  setenv("SHMCCL_YIELD_TIME", "0", 1);
  config::reload();
  npu::set_device(ctx.rank % 8);
  ctx.init();
}

// A broadcast's root needs nobody's data, so it may finish and die before the receivers even call
// the broadcast; the data is in the control block, and they get it.
TEST(CollectiveErrorsTest, ReceiversCompleteABroadcastWhoseRootAlreadyDied) {
  for (int world : {2, 3, 8}) {
    int pid_pipe[2];
    ASSERT_EQ(pipe(pid_pipe), 0);
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init();
      Tensor tensor = full({3}, ctx.rank == 0 ? 7 : 0, kInt32).npu();
      if (ctx.rank == 0) {
        broadcast(tensor, 0);
        const pid_t me = getpid();
        for (int r = 1; r < ctx.world; ++r)
          require(write(pid_pipe[1], &me, sizeof(me)) == sizeof(me), "pipe write");
        _exit(0);  // without leaving the group (destroying it would wait for the receivers)
      }
      pid_t root = 0;
      require(read(pid_pipe[0], &root, sizeof(root)) == sizeof(root), "pipe read");
      require(transport::PeerMonitor::wait_for_exit(root, std::chrono::seconds(20)),
              "the root did not exit");
      broadcast(tensor, 0);
      require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>{7, 7, 7},
              "wrong broadcast result");
      // The next collective needs the root, which is gone: a RemoteError. Its text names the
      // first failure this rank noticed: the root's exit, or another receiver that failed here
      // first and exited.
      try {
        barrier();
      } catch (const RemoteError& error) {
        const std::string text = error.what();
        require(text.find("exited") != std::string::npos ||
                    text.find("died") != std::string::npos ||
                    text.find("destroyed its side of the group") != std::string::npos,
                text);
        return;
      }
      throw testing::RequirementFailed("the barrier without the root did not fail");
    });
    close(pid_pipe[0]);
    close(pid_pipe[1]);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// A root that destroys the group right after a broadcast it finished alone waits there for the
// receivers to call it (asleep: it stays in the group), so that their calls are compared with its
// own; it leaves once they came, with no error, and they get the data.
TEST(CollectiveErrorsTest, ARootLeavingAfterItsBroadcastWaitsForTheReceivers) {
  for (int world : {2, 3, 8}) {
    const testing::TokenPipe leaving;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      join_with_waits_that_sleep_at_once(ctx);
      Tensor tensor = full({3}, ctx.rank == 0 ? 7 : 0, kInt32).npu();
      if (ctx.rank == 0) {
        broadcast(tensor, 0);
        leaving.post(ctx.world - 1);
        destroy_process_group();
        return;
      }
      require(leaving.wait(), "the root did not finish its broadcast");
      testing::await_sleepers(1, "the root left without waiting");  // it sleeps on its way out
      require(default_group()->state().transport().slot(0).departed_at.load() == 0,
              "the root left before the receivers");
      broadcast(tensor, 0);
      require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>{7, 7, 7},
              "wrong broadcast result");
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// Ranks that each finished their last collective alone, each thinking itself the broadcast's
// root, or a reduce-scatter rank that receives nothing and disagrees with the others: nothing
// compared those calls before the ranks leave, so leaving does, and every rank gets the mismatch
// (destroy_process_group throws it), none keeps a result that only looks right.
TEST(CollectiveErrorsTest, AMismatchInTheLastCallsFinishedAloneReachesEveryRankAsItLeaves) {
  for (int world : {2, 3, 4}) {
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(20000);
      Tensor tensor = full({4}, ctx.rank + 10, kInt32).npu();
      broadcast(tensor, ctx.rank == 0 ? 0 : 1);  // ranks 0 and 1 are roots
      try {
        destroy_process_group();
      } catch (const RemoteError& error) {
        const std::string text = error.what();
        require(text.find("collective mismatch in the previous collective") != std::string::npos &&
                    text.find("src=0") != std::string::npos &&
                    text.find("src=1") != std::string::npos,
                text);
        return;
      }
      throw testing::RequirementFailed(str("rank ", ctx.rank, " left without the mismatch"));
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks, broadcast";
  }
  for (int world : {3, 4}) {
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      npu::set_device(ctx.rank % 8);
      ctx.init(20000);
      // Rank 0 receives nothing either way; it splits the rest differently.
      std::vector<int64_t> splits(static_cast<size_t>(ctx.world), 2);
      splits[0] = 0;
      if (ctx.rank == 0) {
        splits[1] = 1;
        splits[2] = 3;
      }
      const Tensor input = ones({2 * (ctx.world - 1)}, kInt32).npu();
      Tensor output = zeros({splits[static_cast<size_t>(ctx.rank)]}, kInt32).npu();
      try {
        reduce_scatter_tensor_uneven(output, input, splits);
        destroy_process_group();
      } catch (const RemoteError& error) {
        require(std::string(error.what()).find("collective mismatch") != std::string::npos,
                error.what());
        return;
      }
      throw testing::RequirementFailed(str("rank ", ctx.rank, " saw no mismatch"));
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks, reduce-scatter";
  }
}

// A reduce-scatter rank that receives nothing needs nobody's data either: it finishes alone, then
// on its way out waits for the others to call it; they complete it (rank 0 asleep in it when the
// last of them comes and the leaver departs), and only the collectives it takes no part in fail,
// naming its departure.
TEST(CollectiveErrorsTest, PeersStillWaitingInACallThatALeavingRankFinishedEarlyComplete) {
  for (int world : {3, 4, 8}) {
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      join_with_waits_that_sleep_at_once(ctx);
      const int last = ctx.world - 1;
      std::vector<int64_t> splits(static_cast<size_t>(ctx.world), 2);
      splits[static_cast<size_t>(last)] = 0;  // the last rank receives nothing
      const Tensor input = ones({2 * last}, kInt32).npu();
      Tensor output = zeros({splits[static_cast<size_t>(ctx.rank)]}, kInt32).npu();
      if (ctx.rank == last) {
        reduce_scatter_tensor_uneven(output, input, splits);
        destroy_process_group();
        return;
      }
      // Rank 0 and the leaver sleep, each in its own wait for the middle ranks.
      if (ctx.rank != 0) testing::await_sleepers(2, "rank 0 and the leaver never slept");
      reduce_scatter_tensor_uneven(output, input, splits);
      require(output.cpu().to_vector<int32_t>() == std::vector<int32_t>(2, ctx.world),
              "wrong reduce-scatter result");
      // The next collective needs the last rank, which took no part after its call.
      try {
        barrier();
      } catch (const RemoteError& error) {
        const std::string text = error.what();
        require(text.find("destroyed its side of the group") != std::string::npos, text);
        return;
      }
      throw testing::RequirementFailed("the barrier without the last rank did not fail");
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  }
}

// An asynchronous collective that fails (the ranks disagree on the dtype) after Work::synchronize()
// ordered the caller's stream after it, or before: either way its error surfaces at that stream's
// next synchronisation, once, besides Work::wait().
TEST(CollectiveErrorsTest, AFailedAsyncCollectiveSurfacesAtTheSynchronizedStream) {
  for (int world : {2, 3}) {
    for (const bool synchronize_first : {true, false}) {
      for (const bool read_on_host : {false, true}) {
        const testing::TokenPipe ordered;
        auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank % 8);
          ctx.init(20000);
          Tensor tensor = full({1000}, 1, ctx.rank == 0 ? kFloat32 : kInt32).npu();
          if (ctx.rank != 0) require(ordered.wait(), "rank 0 did not issue its call");
          std::shared_ptr<Work> work =
              all_reduce(tensor, ReduceOp::SUM, nullptr, /*async_op=*/true);
          if (ctx.rank == 0) {
            if (synchronize_first) work->synchronize();  // still pending: the others wait for this
            ordered.post(ctx.world - 1);
            try {
              work->wait();
            } catch (const RemoteError&) {
            }
            if (!synchronize_first) work->synchronize();  // already failed
          } else {
            work->synchronize();
          }
          try {
            // A host read of the tensor is a synchronisation too (as torch's .cpu()): it must not
            // hand back the values the failed collective left unreduced.
            if (read_on_host) {
              tensor.cpu();
            } else {
              npu::current_stream().synchronize();
            }
            throw testing::RequirementFailed(
                str("rank ", ctx.rank, ": the stream synchronised without the error"));
          } catch (const RemoteError& error) {
            require(std::string(error.what()).find("mismatch") != std::string::npos, error.what());
          }
          npu::synchronize();  // reported once
          require(!work->is_success() && work->exception() != nullptr, "the Work succeeded");
        });
        EXPECT_TRUE(testing::all_ranks_succeeded(results))
            << world << " ranks, synchronize first: " << synchronize_first
            << ", read on the host: " << read_on_host;
      }
    }
  }
}

// Rank 1 dies between two all-reduces; the survivors, in the second, must fail within a second
// naming it. With `survivors_asleep` it dies only once they all sleep on the futex, so the peer
// monitor's wake must reach them: the suite's SHMCCL_WAKE_CHECK_TIME (60 s) makes a lost wake
// miss the bound.
void require_survivors_fail_fast(bool survivors_asleep) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    testing::SurvivorBarrier survivors;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          if (survivors_asleep) {
            join_with_waits_that_sleep_at_once(ctx);
          } else {
            npu::set_device(ctx.rank % 8);
            ctx.init(/*timeout_ms=*/60000);
          }
          Tensor t = ones({1 << 16}, kFloat32).npu();
          all_reduce(t);
          if (ctx.rank == 1) {
            if (survivors_asleep)
              testing::await_sleepers(static_cast<uint32_t>(ctx.world - 1),
                                      "the survivors never slept");
            raise(SIGKILL);
          }
          testing::require_death_noticed(ctx, survivors, /*victim=*/1, /*bound_seconds=*/1.0,
                                         [&] { all_reduce(t); });
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::only_victim_killed(results, /*victim=*/1)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

TEST(CollectiveErrorsTest, DeadPeerFailsSurvivorsWithinASecond) {
  require_survivors_fail_fast(/*survivors_asleep=*/false);
}

TEST(CollectiveErrorsTest, DeadPeerWakesSurvivorsAsleepInTheCall) {
  require_survivors_fail_fast(/*survivors_asleep=*/true);
}

TEST(CollectiveErrorsTest, LateRankIsNamedAfterTheTimeout) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    const testing::TokenPipe gave_up;
    const testing::TokenPipe leave;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank);
          ctx.init(/*timeout_ms=*/30000);
          default_group()->set_timeout(std::chrono::milliseconds(300));
          Tensor t = ones({4}, kFloat32).npu();
          const int late = ctx.world - 1;
          if (ctx.rank == late) {  // never calls the collective; lets the others leave once all
                                   // gave up
            require(gave_up.wait(ctx.world - 1), "no token on gave_up");
            leave.post(ctx.world - 1);
            return;
          }
          std::string text = "no error";
          try {
            all_reduce(t);
          } catch (const TimeoutError& error) {
            text = error.what();
          }
          gave_up.post();
          require(leave.wait(), "no token on leave");  // nobody exits before all timed out, so
                                                       // no death is reported instead
          require(text.find(str("timed out in all_reduce (sequence 1, timeout 300 ms): rank ", late,
                                " has not called it")) != std::string::npos,
                  text);
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

// Oversubscribed, the ranks of a barrier wait for rank 0's release. Rank 0 and the other early
// ranks time out waiting for a late rank and give up; the late rank then arrives last and finds
// every rank arrived: the barrier is complete, and it must return at once, not wait its own
// timeout (10 s) for a release that rank 0, which gave up, never sends.
TEST(CollectiveErrorsTest, ALateRankCompletesABarrierWhoseRankZeroGaveUp) {
  for (int world : {3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    const testing::TokenPipe gave_up;
    const testing::TokenPipe leave;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          testing::run_on_one_cpu();
          npu::set_device(ctx.rank % 8);
          ctx.init(/*timeout_ms=*/30000);
          const int late = ctx.world - 1;
          if (ctx.rank != late) {
            default_group()->set_timeout(std::chrono::milliseconds(300));
            require_error([] { barrier(); }, "has not called it");
            gave_up.post();
            require(leave.wait(), "no token on leave");  // no exit (a death) before the late call
            return;
          }
          default_group()->set_timeout(std::chrono::seconds(10));
          require(gave_up.wait(ctx.world - 1), "the early ranks did not time out");
          const auto start = std::chrono::steady_clock::now();
          std::string text = "completed";
          try {
            barrier();
          } catch (const Error& error) {
            text = error.what();
          }
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          leave.post(ctx.world - 1);
          require(text == "completed", text);
          require(seconds < 5, str("the late rank's barrier took ", seconds, " s"));
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
  }
}

TEST(CollectiveErrorsTest, MissingRankAtInitIsNamed) {
  run_at_every_rank_count([](const testing::RankContext& ctx) {
    if (ctx.rank == 1) return;  // never joins
    try {
      ctx.init(/*timeout_ms=*/500);
    } catch (const TimeoutError& error) {
      const std::string text = error.what();
      require(text.find("waiting for rank 1 to join") != std::string::npos, text);
      return;
    }
    throw testing::RequirementFailed("init succeeded without rank 1");
  });
}

// A group shut down (ProcessGroup::shutdown, or destroy_process_group while the caller still
// holds it) runs no more collectives, but still answers rank(), size() and comm_name(); shutting
// down twice or aborting afterwards does nothing; the other groups go on, and a new default group
// can be made while an old one is still held.
TEST(CollectiveErrorsTest, ShutDownGroupsRunNoMoreCollectives) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(testing::str(world, " ranks"));
    const std::string job = testing::unique_job_id();
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank);
          ctx.init();
          ProcessGroupPtr pair = new_group({0, 1});
          Tensor t = ones({4}, kFloat32).npu();
          if (pair->is_member()) {
            all_reduce(t, ReduceOp::SUM, pair);
            require(t.cpu().to_vector<float>()[0] == 2.0f, "the pair's all_reduce");
            const std::string name = pair->comm_name();
            pair->shutdown();
            pair->shutdown();
            pair->abort("after shutdown");
            require(pair->rank() == ctx.rank && pair->size() == 2 && pair->comm_name() == name,
                    "a shut-down group's rank, size and name");
            require_error([&] { all_reduce(t, ReduceOp::SUM, pair); }, "was shut down");
            require_error([&] { barrier(pair); }, "was shut down");
            require_error([&] { group_from_comm_name(name); }, "unknown communicator name");
          }
          Tensor u = ones({4}, kFloat32).npu();
          all_reduce(u);  // the default group goes on
          require(u.cpu().to_vector<float>()[0] == static_cast<float>(ctx.world), "the world's");

          ProcessGroupPtr held = default_group();
          if (ctx.rank == 0) {
            // Shut down, the default group lets no sub-group be made from it (its own rank only:
            // a sub-group of every rank would wait for this one).
            held->shutdown();
            require_error([&] { new_group({0}); }, "was shut down");
          }
          destroy_process_group();
          require(held->size() == ctx.world, "the destroyed group's size");
          require_error([&] { all_reduce(u, ReduceOp::SUM, held); }, "was shut down");
          testing::RankContext again{ctx.rank, ctx.world, ctx.job_id + "-again"};
          again.init();
          all_reduce(u);
          require(u.cpu().to_vector<float>()[0] == static_cast<float>(ctx.world * ctx.world),
                  "the new group's all_reduce");
          destroy_process_group();
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
    EXPECT_TRUE(testing::no_segments_left(job));
    EXPECT_TRUE(testing::no_segments_left(job + "-again"));
  }
}

// destroy_process_group(group), as torch's: that group only; the default group (or nullptr)
// destroys every group; a non-member's group is left alone.
TEST(CollectiveErrorsTest, DestroyingOneGroupLeavesTheOthers) {
  run_at_every_rank_count([](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank);
    ctx.init();
    ProcessGroupPtr pair = new_group({0, 1});
    ProcessGroupPtr rest = new_group(std::vector<int>{ctx.world - 1});
    Tensor t = ones({4}, kFloat32).npu();
    if (pair->is_member()) {
      all_reduce(t, ReduceOp::SUM, pair);
      const std::string name = pair->comm_name();
      destroy_process_group(pair);
      require_error([&] { all_reduce(t, ReduceOp::SUM, pair); }, "was shut down");
      require_error([&] { group_from_comm_name(name); }, "unknown communicator name");
    } else {
      destroy_process_group(pair);  // not a member: nothing happens
    }
    if (rest->is_member()) all_reduce(t, ReduceOp::SUM, rest);  // the others live on
    Tensor u = ones({4}, kFloat32).npu();
    all_reduce(u);
    require(u.cpu().to_vector<float>()[0] == static_cast<float>(ctx.world), "the world's");
    destroy_process_group(default_group());  // every group
    require(!is_initialized(), "the default group survived");
    if (rest->is_member()) {
      require_error([&] { all_reduce(u, ReduceOp::SUM, rest); }, "was shut down");
    }
  });
}

TEST(CollectiveErrorsTest, AbortFailsPendingWorkOnEveryRank) {
  for (int world : {2, 3, 4, 8}) {
    const std::string job = testing::unique_job_id();
    const testing::TokenPipe aborted;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          npu::set_device(ctx.rank);
          ctx.init();
          Tensor t = ones({16}, kFloat32).npu();
          const std::string reason = "the group was aborted by rank 0: test abort";
          if (ctx.rank == 0) {
            // The others are not there.
            auto work = all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true);
            default_group()->abort("test abort");
            aborted.post(ctx.world - 1);
            // The pending call names the abort as its waits saw it, or, when it had not started
            // yet, as the group's failure: "... failed earlier ...: aborted: test abort".
            std::string text = "no error";
            try {
              work->wait();
            } catch (const Error& error) {
              text = error.what();
            }
            require(
                text.find(reason) != std::string::npos ||
                    text.find("failed earlier and cannot run collectives: aborted: test abort") !=
                        std::string::npos,
                text);
            require(work->is_completed() && !work->is_success() && work->exception(), "work state");
          } else {
            require(aborted.wait(), "no token on aborted");
            require_error([&] { barrier(); }, reason);
          }
          // The group can be replaced in the same processes.
          destroy_process_group();
          testing::RankContext again{ctx.rank, ctx.world, ctx.job_id + "-again"};
          again.init();
          Tensor fresh = ones({16}, kFloat32).npu();
          all_reduce(fresh);
          require(fresh.cpu().to_vector<float>()[0] == static_cast<float>(ctx.world),
                  "new group works");
        },
        std::chrono::seconds(60), job);
    EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
    EXPECT_TRUE(testing::no_segments_left(job));
    EXPECT_TRUE(testing::no_segments_left(job + "-again"));
  }
}

}  // namespace
}  // namespace shmccl
