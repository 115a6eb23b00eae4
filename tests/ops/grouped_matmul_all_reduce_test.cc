// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// npu_grouped_mat_mul_all_reduce against a float64 reference computed here: every split_item,
// with and without bias, float16 / bfloat16 / float32, comm_turn 0 and > 0, at 1, 2, 3 and 4
// ranks with real processes; the weight cache; and every argument error.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <thread>

#include "collectives/fault_injection.h"
#include "core/check.h"
#include "core/config.h"
#include "device/stream_impl.h"
#include "multiprocess.h"
#include "ops/matmul_engine.h"
#include "shmccl/shmccl.hpp"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

// Values exactly representable in `dtype` (so the reference sees what the kernel sees).
std::vector<double> random_values(uint64_t seed, int64_t count, ScalarType dtype) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values)
    v = uniform(generator);
  return from_vector<double>(values).to(dtype).to(kFloat64).to_vector<double>();
}

ScalarType bias_type(ScalarType dtype) {
  return dtype == kFloat16 ? kFloat16 : kFloat32;
}

double tolerance(ScalarType dtype) {
  return dtype == kFloat32 ? 1e-4 : 1e-2;
}

// One group of the full (unsharded) problem: x [m, k_total], w [k_total, n], bias [n].
struct FullGroup {
  int64_t m, k_total, n;
  std::vector<double> x, w, bias;
};

struct Case {
  int64_t split_item;
  ScalarType dtype;
  bool bias;
  int64_t comm_turn;
  int64_t group_list_type = 0;
  bool weight_3d = false;
  std::vector<std::array<int64_t, 3>> shapes;  // per group: m, k per rank, n
};

std::vector<FullGroup> make_problem(const Case& c, int world, uint64_t seed) {
  std::vector<FullGroup> groups;
  for (size_t g = 0; g < c.shapes.size(); ++g) {
    FullGroup group{c.shapes[g][0], c.shapes[g][1] * world, c.shapes[g][2], {}, {}, {}};
    group.x = random_values(seed * 101 + g * 3, group.m * group.k_total, c.dtype);
    group.w = random_values(seed * 101 + g * 3 + 1, group.k_total * group.n, c.dtype);
    if (c.bias) group.bias = random_values(seed * 101 + g * 3 + 2, group.n, bias_type(c.dtype));
    groups.push_back(std::move(group));
  }
  return groups;
}

// This rank's column shard of x (rows m, columns [rank*k, (rank+1)*k)).
std::vector<double> x_shard(const FullGroup& g, int rank, int world) {
  const int64_t k = g.k_total / world;
  std::vector<double> shard;
  for (int64_t row = 0; row < g.m; ++row)
    for (int64_t col = 0; col < k; ++col)
      shard.push_back(g.x[static_cast<size_t>(row * g.k_total + rank * k + col)]);
  return shard;
}

std::vector<double> w_shard(const FullGroup& g, int rank, int world) {
  const int64_t k = g.k_total / world;
  auto begin = g.w.begin() + rank * k * g.n;
  return std::vector<double>(begin, begin + k * g.n);
}

std::vector<double> reference(const FullGroup& g) {
  std::vector<double> y(static_cast<size_t>(g.m * g.n), 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t p = 0; p < g.k_total; ++p) {
      const double a = g.x[static_cast<size_t>(i * g.k_total + p)];
      for (int64_t j = 0; j < g.n; ++j)
        y[static_cast<size_t>(i * g.n + j)] += a * g.w[static_cast<size_t>(p * g.n + j)];
    }
  if (!g.bias.empty())
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j)
        y[static_cast<size_t>(i * g.n + j)] += g.bias[static_cast<size_t>(j)];
  return y;
}

Tensor npu_tensor(const std::vector<double>& values, const std::vector<int64_t>& shape,
                  ScalarType dtype) {
  return from_vector<double>(values, shape).to(dtype).npu();
}

std::vector<double> concat(const std::vector<std::vector<double>>& parts) {
  std::vector<double> all;
  for (const auto& part : parts)
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Max |y - ref| relative to max |ref|.
void require_matches(const Tensor& y, const std::vector<double>& expected, ScalarType dtype,
                     const std::string& what) {
  require(y.numel() == static_cast<int64_t>(expected.size()),
          str(what, ": ", y.numel(), " elements, expected ", expected.size()));
  require(y.dtype() == dtype, str(what, ": dtype ", y.dtype(), ", expected ", dtype));
  const std::vector<double> got = y.cpu().to(kFloat64).to_vector<double>();
  double max_error = 0, max_ref = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    max_error = std::max(max_error, std::abs(got[i] - expected[i]));
    max_ref = std::max(max_ref, std::abs(expected[i]));
  }
  require(max_error / max_ref < tolerance(dtype),
          str(what, ": relative error ", max_error / max_ref, " (max error ", max_error,
              ", max |ref| ", max_ref, ") exceeds ", tolerance(dtype)));
}

// A case's full problem and the float64 reference of each group's output, computed once before
// the ranks are forked (they share it): every rank computing its own made the 8-rank run under
// TSan spend most of its time in the reference's instrumented loops.
struct PreparedCase {
  Case c;
  std::vector<FullGroup> groups;
  std::vector<std::vector<double>> references;  // per group
};

std::vector<PreparedCase> prepare_cases(const std::vector<Case>& cases, int world) {
  std::vector<PreparedCase> prepared;
  uint64_t seed = 1;
  for (const Case& c : cases) {
    PreparedCase p{c, make_problem(c, world, seed++), {}};
    for (const FullGroup& g : p.groups)
      p.references.push_back(reference(g));
    prepared.push_back(std::move(p));
  }
  return prepared;
}

// Runs a prepared case on this rank and checks every output.
void run_case(const PreparedCase& prepared, int rank, int world) {
  const Case& c = prepared.c;
  const std::vector<FullGroup>& groups = prepared.groups;
  const bool split_x = c.split_item == 1 || c.split_item == 3;
  const bool single_y = c.split_item == 2 || c.split_item == 3;
  std::vector<Tensor> x, w, bias;
  std::vector<int64_t> group_list;
  std::vector<std::vector<double>> x_parts, w_parts;
  int64_t rows = 0;
  for (const FullGroup& g : groups) {
    const int64_t k = g.k_total / world;
    x_parts.push_back(x_shard(g, rank, world));
    w_parts.push_back(w_shard(g, rank, world));
    if (!split_x) x.push_back(npu_tensor(x_parts.back(), {g.m, k}, c.dtype));
    if (!c.weight_3d) w.push_back(npu_tensor(w_parts.back(), {k, g.n}, c.dtype));
    if (c.bias) bias.push_back(npu_tensor(g.bias, {g.n}, bias_type(c.dtype)));
    rows += g.m;
    group_list.push_back(c.group_list_type == 0 ? rows : g.m);
  }
  const int64_t k0 = groups[0].k_total / world;
  if (split_x) x.push_back(npu_tensor(concat(x_parts), {rows, k0}, c.dtype));
  if (c.weight_3d) {
    w.push_back(npu_tensor(concat(w_parts), {static_cast<int64_t>(groups.size()), k0, groups[0].n},
                           c.dtype));
  }
  GroupedMatmulAllReduceOptions options;
  options.bias = bias;
  if (split_x) options.group_list = group_list;
  options.split_item = c.split_item;
  options.comm_turn = c.comm_turn;
  options.group_list_type = c.group_list_type;
  std::vector<Tensor> y =
      npu_grouped_mat_mul_all_reduce(x, w, default_group()->comm_name(), options);

  const std::string what = str("split_item ", c.split_item, " dtype ", c.dtype, " bias ", c.bias,
                               " comm_turn ", c.comm_turn, " rank ", rank, "/", world);
  if (single_y) {
    require(y.size() == 1, str(what, ": ", y.size(), " outputs, expected 1"));
    require(y[0].sizes() == std::vector<int64_t>{rows, groups[0].n},
            detail::concat(what, ": output shape ", y[0].sizes()));
    require_matches(y[0], concat(prepared.references), c.dtype, what);
  } else {
    require(y.size() == groups.size(), str(what, ": ", y.size(), " outputs"));
    for (size_t i = 0; i < groups.size(); ++i) {
      require(y[i].sizes() == std::vector<int64_t>{groups[i].m, groups[i].n},
              detail::concat(what, ": y[", i, "] shape ", y[i].sizes()));
      require_matches(y[i], prepared.references[i], c.dtype, str(what, " y[", i, "]"));
    }
  }
}

std::vector<Case> all_cases(int world) {
  std::vector<Case> cases;
  // The seed example's shapes (per rank k halves when the world doubles; here k is per rank).
  const std::vector<std::array<int64_t, 3>> varied{{32, 64, 32}, {0, 16, 8}, {24, 32, 64}};
  const std::vector<std::array<int64_t, 3>> same_k{{10, 48, 16}, {20, 48, 24}, {0, 48, 8}};
  const std::vector<std::array<int64_t, 3>> same_kn{{10, 40, 16}, {0, 40, 16}, {33, 40, 16}};
  for (ScalarType dtype : {kFloat16, kBFloat16, kFloat32}) {
    for (bool bias : {false, true}) {
      for (int64_t turn : {0, 3}) {
        cases.push_back({0, dtype, bias, turn, 0, false, varied});
        cases.push_back({1, dtype, bias, turn, 0, false, same_k});
        cases.push_back({2, dtype, bias, turn, 0, false, {{7, 24, 16}, {0, 40, 16}, {30, 8, 16}}});
        cases.push_back({3, dtype, bias, turn, 0, false, same_kn});
      }
    }
    cases.push_back({3, dtype, true, 0, 0, true, same_kn});   // one 3-D weight
    cases.push_back({1, dtype, true, 2, 1, false, same_k});   // row counts
    cases.push_back({3, dtype, false, 5, 1, true, same_kn});  // both
  }
  // Big enough for oneDNN's threads, several automatic rounds and rows cut between rounds. The
  // float64 reference takes k of every rank: beyond 4 ranks each rank's k halves, which keeps the
  // reference's time level from 4 ranks to 8.
  const int64_t k_share = world > 4 ? 2 : 1;
  cases.push_back(
      {0, kBFloat16, true, 0, 0, false, {{300, 256 / k_share, 520}, {64, 128 / k_share, 1000}}});
  cases.push_back(
      {1, kFloat32, true, 7, 0, false, {{130, 64 / k_share, 300}, {257, 64 / k_share, 200}}});
  cases.push_back(
      {3, kFloat16, true, 0, 0, true, {{200, 96 / k_share, 512}, {180, 96 / k_share, 512}}});
  return cases;
}

class GroupedMatmulAllReduceTest : public ::testing::TestWithParam<int> {};

// Every case at every rank count. Under TSan the 8 ranks take 12 s alone on 2 cores (26-28 s, and
// over the harness's 60 s beside another test of the suite's -j2, while every rank computed the
// references itself).
TEST_P(GroupedMatmulAllReduceTest, MatchesFloat64Reference) {
  const int world = GetParam();
  const std::vector<PreparedCase> cases = prepare_cases(all_cases(world), world);
  auto body = [&cases](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    for (const PreparedCase& prepared : cases)
      run_case(prepared, ctx.rank, ctx.world);
    destroy_process_group();
  };
  EXPECT_TRUE(testing::all_ranks_succeeded(testing::run_ranks(world, body)));
}

TEST_P(GroupedMatmulAllReduceTest, SubGroupAndRepeatedCalls) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    // A sub-group of the odd ranks (or everyone at 1 rank) runs its own operator.
    std::vector<int> members;
    for (int r = ctx.world > 1 ? 1 : 0; r<ctx.world; r += ctx.world> 1 ? 2 : 1)
      members.push_back(r);
    ProcessGroupPtr group = new_group(members);
    if (group->is_member()) {
      const int sub_rank = group->rank();
      const int sub_world = group->size();
      const Case c{0, kBFloat16, true, 0, 0, false, {{16, 32, 16}}};
      const std::vector<FullGroup> groups = make_problem(c, sub_world, 77);
      Tensor x = npu_tensor(x_shard(groups[0], sub_rank, sub_world), {16, 32}, kBFloat16);
      Tensor w = npu_tensor(w_shard(groups[0], sub_rank, sub_world), {32, 16}, kBFloat16);
      Tensor b = npu_tensor(groups[0].bias, {16}, kFloat32);
      for (int call = 0; call < 3; ++call) {
        auto y = npu_grouped_mat_mul_all_reduce({x}, {w}, group->comm_name(), {.bias = {b}});
        require_matches(y[0], reference(groups[0]), kBFloat16, str("sub-group call ", call));
      }
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// The fused operator rounds each rank's partial product to y's dtype and sums those (as the
// reference's HCCL all-reduce does), so it gives exactly what the unfused sequence gives:
// npu_grouped_matmul (the bias on one rank) then all_reduce of each output.
TEST_P(GroupedMatmulAllReduceTest, FusedEqualsGroupedMatmulThenAllReduce) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    uint64_t seed = 500;
    for (ScalarType dtype : {kFloat16, kBFloat16}) {
      const Case c{0, dtype, true, 0, 0, false, {{32, 64, 32}, {64, 32, 64}, {5, 16, 200}}};
      const std::vector<FullGroup> groups = make_problem(c, ctx.world, seed++);
      std::vector<Tensor> x, w, bias, no_bias;
      for (const FullGroup& g : groups) {
        const int64_t k = g.k_total / ctx.world;
        x.push_back(npu_tensor(x_shard(g, ctx.rank, ctx.world), {g.m, k}, dtype));
        w.push_back(npu_tensor(w_shard(g, ctx.rank, ctx.world), {k, g.n}, dtype));
        bias.push_back(npu_tensor(g.bias, {g.n}, bias_type(dtype)));
      }
      std::vector<Tensor> fused =
          npu_grouped_mat_mul_all_reduce(x, w, default_group()->comm_name(), {.bias = bias});
      std::vector<Tensor> unfused =
          npu_grouped_matmul(x, w, {.bias = ctx.rank == 0 ? bias : no_bias});
      for (size_t i = 0; i < groups.size(); ++i) {
        all_reduce(unfused[i]);
        const std::vector<double> a = fused[i].cpu().to(kFloat64).to_vector<double>();
        const std::vector<double> b = unfused[i].cpu().to(kFloat64).to_vector<double>();
        size_t differ = 0;
        for (size_t e = 0; e < a.size(); ++e)
          differ += a[e] != b[e];
        require(differ == 0, str(dtype, " y[", i, "]: ", differ, " of ", a.size(),
                                 " elements differ from npu_grouped_matmul + all_reduce"));
      }
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// comm_turn = k sends the sums in k all-reduces, each a collective of the group: the sequence
// numbers of a barrier before and after the call are k + 1 apart. (The results are the same
// whatever the rounds: only the count shows that comm_turn was honoured.) One group of 60 rows of
// n = 8: k of 1, 3, 4 and 5 divide it into k rounds at row boundaries.
TEST_P(GroupedMatmulAllReduceTest, CommTurnSendsTheSumsInThatManyRounds) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank sends nothing";
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    const int64_t m = 60, k = 4, n = 8;
    Tensor x = full({m, k}, 1.0, kFloat32).npu();
    Tensor w = full({k, n}, ctx.rank + 1.0, kFloat32).npu();
    for (int64_t comm_turn : {1, 3, 4, 5}) {
      const uint64_t before = barrier(nullptr, /*async_op=*/true)->sequence();
      std::vector<Tensor> y = npu_grouped_mat_mul_all_reduce({x}, {w}, default_group()->comm_name(),
                                                             {.comm_turn = comm_turn});
      const uint64_t after = barrier(nullptr, /*async_op=*/true)->sequence();
      require(after - before - 1 == static_cast<uint64_t>(comm_turn),
              str("comm_turn ", comm_turn, ": ", after - before - 1, " collectives"));
      const float sum = static_cast<float>(k * ctx.world * (ctx.world + 1) / 2);
      for (float value : y[0].cpu().to_vector<float>())
        require(value == sum, str("comm_turn ", comm_turn, ": ", value, ", expected ", sum));
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// A rank whose GEMMs fail (an injected bad_alloc before round `failing_round` of a call cut into
// `comm_turn` rounds) cannot make the operator's remaining all-reduces: it fails the group on
// every rank, naming itself and why (`reason`), and rethrows its own error. Its peers used to wait
// for those all-reduces: until the timeout (20 s here: they must fail within 5), or until the
// victim's next collective, which they reported as a mismatch with it (here its barrier).
void expect_a_failing_gemm_fails_the_group(int world, int failing_round, int64_t comm_turn,
                                           const std::string& reason) {
  // GTEST_SKIP returns from here, the test's only statement.
  if (world == 1) GTEST_SKIP() << "one rank sends nothing";
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  testing::RunOptions options;
  auto results = testing::run_ranks(
      world,
      [&](const testing::RankContext& ctx) {
        const int victim = 1;
        setenv("SHMCCL_FAULT", str("gemm:", victim, ":bad_alloc:", failing_round).c_str(), 1);
        config::reload();
        npu::set_device(ctx.rank % npu::device_count());
        ctx.init(/*timeout_ms=*/20000);
        Tensor x = full({30, 16}, 1.0, kBFloat16).npu();
        Tensor w = full({16, 8}, 1.0, kBFloat16).npu();
        barrier();
        const auto start = std::chrono::steady_clock::now();
        std::string text;
        try {
          npu_grouped_mat_mul_all_reduce({x}, {w}, default_group()->comm_name(),
                                         {.comm_turn = comm_turn});
          throw testing::RequirementFailed("the call succeeded");
        } catch (const std::bad_alloc&) {
          require(ctx.rank == victim, "a bad_alloc on a rank that was not the victim");
          text = "bad_alloc";
        } catch (const Error& error) {
          require(ctx.rank != victim, str("the victim threw ", error.what()));
          text = error.what();
          require(text.find("the group was aborted by rank 1: " + reason) != std::string::npos,
                  str("the error does not name the victim and why: ", text));
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        require(seconds < 5, str("the call failed after ", seconds, " s: ", text));
        bool failed = false;
        try {
          barrier();
        } catch (const Error&) {
          failed = true;
        }
        require(failed, "the group still works after the failure");
      },
      options);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(options.job_id));
}

// After its first round's all-reduce: the peers are in the second round's.
TEST_P(GroupedMatmulAllReduceTest, ARankWhoseGemmFailsFailsTheGroupOnEveryRankAtOnce) {
  expect_a_failing_gemm_fails_the_group(GetParam(), /*failing_round=*/2, /*comm_turn=*/3,
                                        "npu_grouped_mat_mul_all_reduce could not compute its "
                                        "products of round 2 of 3: std::bad_alloc");
}

// Before any all-reduce: nothing is in flight to wait for, and the peers are in the first round's.
TEST_P(GroupedMatmulAllReduceTest, ARankWhoseFirstGemmFailsFailsTheGroupOnEveryRankAtOnce) {
  expect_a_failing_gemm_fails_the_group(GetParam(), /*failing_round=*/1, /*comm_turn=*/3,
                                        "npu_grouped_mat_mul_all_reduce could not compute its "
                                        "products of round 1 of 3: std::bad_alloc");
}

// One round (the synchronous all-reduce, no stream): the reason names no round.
TEST_P(GroupedMatmulAllReduceTest, ARankWhoseOnlyGemmFailsFailsTheGroupOnEveryRankAtOnce) {
  expect_a_failing_gemm_fails_the_group(
      GetParam(), /*failing_round=*/1, /*comm_turn=*/1,
      "npu_grouped_mat_mul_all_reduce could not compute its products: std::bad_alloc");
}

// A rank that has no memory for y (its NPU is 64 MiB here, y takes 128 MiB) fails the group at
// once, naming why, so its peers are not left in the operator's all-reduces until the timeout
// (20 s here: they must fail within 5).
TEST_P(GroupedMatmulAllReduceTest, ARankWithoutMemoryForTheOutputFailsTheGroupAtOnce) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank sends nothing";
  testing::RunOptions options;
  auto results = testing::run_ranks(
      world,
      [](const testing::RankContext& ctx) {
        const int victim = 1;
        if (ctx.rank == victim) {
          setenv("SHMCCL_NPU_MEMORY", "64M", 1);
          config::reload();
        }
        npu::set_device(ctx.rank % npu::device_count());
        ctx.init(/*timeout_ms=*/20000);
        Tensor x = full({1024, 1}, 1.0, kBFloat16).npu();
        Tensor w = full({1, 65536}, 1.0, kBFloat16).npu();
        barrier();
        const auto start = std::chrono::steady_clock::now();
        std::string text = "the call succeeded";
        try {
          npu_grouped_mat_mul_all_reduce({x}, {w}, default_group()->comm_name());
        } catch (const Error& error) {
          text = error.what();
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string expected =
            ctx.rank == victim ? "NPU out of memory"
                               : "the group was aborted by rank 1: npu_grouped_mat_mul_all_reduce "
                                 "could not make its output: NPU out of memory";
        require(text.find(expected) != std::string::npos, text);
        require(seconds < 5, str("the call failed after ", seconds, " s: ", text));
      },
      options);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(options.job_id));
}

// The operator runs in the order of the current stream: with that stream busy it runs on the
// stream's worker thread, whose own current stream is the device's default one. Its all-reduce is
// then already in stream order and must not wait for the default stream's work, here held by a
// gate that opens only after 10 s (the all-reduce used to wait for it; with a task on the busy
// stream depending on the default one, it waited for good).
TEST_P(GroupedMatmulAllReduceTest, RunOnABusyStreamItDoesNotWaitForTheDefaultStream) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank sends nothing";
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    Tensor x = full({8, 4}, 1.0, kFloat32).npu();
    Tensor w = full({4, 8}, ctx.rank + 1.0, kFloat32).npu();
    std::promise<void> default_gate, stream_gate, returned;
    std::atomic<bool> default_opened{false};
    npu::default_stream().impl()->enqueue(
        [opened = default_gate.get_future().share()] { opened.wait(); });
    npu::Stream busy;
    busy.impl()->enqueue([opened = stream_gate.get_future().share()] { opened.wait(); });
    npu::StreamGuard guard(busy);
    std::future<void> returned_future = returned.get_future();
    std::thread opener([&] {
      // The operator queued behind the busy stream's task: let that task end.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (busy.impl()->pending() < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      stream_gate.set_value();
      returned_future.wait_until(deadline);  // until the operator returned, or the bound
      default_opened = true;
      default_gate.set_value();
    });
    std::vector<Tensor> y =
        npu_grouped_mat_mul_all_reduce({x}, {w}, default_group()->comm_name(), {.comm_turn = 1});
    const bool waited = default_opened.load();
    returned.set_value();
    opener.join();
    require(!waited, "the all-reduce waited for the default stream's work");
    const float sum = static_cast<float>(4 * ctx.world * (ctx.world + 1) / 2);
    for (float value : y[0].cpu().to_vector<float>())
      require(value == sum, str(value, ", expected ", sum));
    npu::synchronize();
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// comm_turn 0 lets the operator choose its rounds, which are collectives: ranks whose CPU shares
// differ must still choose the same ones. Rank 1 is bound to one CPU; rank 0 may run on all and
// is given a share of 2 (SHMCCL_OPS_CPU_SHARE: on this 2-CPU host a share is 1 otherwise, since
// rank 1 runs on one of its CPUs). Both also run a GEMM before they join the group, which must
// not fix a share as if the rank ran alone.
TEST(GroupedMatmulRounds, RanksWithUnequalCpuSharesChooseTheSameRounds) {
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  if (CPU_COUNT(&cpus) < 2) GTEST_SKIP() << "one CPU: every share is 1";
  auto results = testing::run_ranks(2, [cpus](const testing::RankContext& ctx) {
    if (ctx.rank == 0) {
      setenv("SHMCCL_OPS_CPU_SHARE", "2", 1);
      config::reload();
    } else {
      cpu_set_t one;
      CPU_ZERO(&one);
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &cpus)) {
          CPU_SET(cpu, &one);
          break;
        }
      }
      require(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
    }
    npu::set_device(ctx.rank);
    Tensor warm = ones({2, 2}, kFloat32).npu();
    npu_grouped_matmul({warm}, {warm});
    ctx.init();
    require(ctx.rank == 0 ? ops::cpu_share() == 2 : ops::cpu_share() == 1,
            str("rank ", ctx.rank, ": share ", ops::cpu_share()));
    const int64_t m = 1024, k = 8, n = 1024;  // 1M output elements: several automatic rounds
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> y = npu_grouped_mat_mul_all_reduce(
          {full({m, k}, 1.0, kFloat32).npu()}, {full({k, n}, ctx.rank + 1.0, kFloat32).npu()},
          default_group()->comm_name());
      const std::vector<float> values = y[0].cpu().to_vector<float>();
      size_t wrong = 0;
      for (float value : values)
        wrong += value != 3.0f * k;
      require(wrong == 0, str("call ", call, ": ", wrong, " of ", values.size(), " wrong"));
    }
    destroy_process_group();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GroupedMatmulAllReduceTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Single-process tests: a group of one.
class GroupedMatmulSingleRank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InitOptions options;
    options.rank = 0;
    options.world_size = 1;
    options.job_id = testing::unique_job_id();
    init_process_group(options);
  }
  static void TearDownTestSuite() { destroy_process_group(); }
  std::string hcomm() const { return default_group()->comm_name(); }
};

TEST_F(GroupedMatmulSingleRank, WeightCacheHitsAndNoticesWrites) {
  auto& engine = ops::MatmulEngine::instance();
  engine.clear_caches();
  const Case c{0, kBFloat16, false, 0, 0, false, {{8, 64, 32}}};
  std::vector<FullGroup> groups = make_problem(c, 1, 5);
  Tensor x = npu_tensor(groups[0].x, {8, 64}, kBFloat16);
  Tensor w = npu_tensor(groups[0].w, {64, 32}, kBFloat16);
  auto y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
  require_matches(y[0], reference(groups[0]), kBFloat16, "first call");
  const auto first = engine.stats();
  EXPECT_EQ(first.weight_reorders, 1u);
  EXPECT_EQ(first.primitives_created, 1u);
  y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
  const auto second = engine.stats();
  EXPECT_EQ(second.weight_reorders, 1u);  // the same weight again: reused
  EXPECT_EQ(second.weight_cache_hits, first.weight_cache_hits + 1);
  EXPECT_EQ(second.primitives_created, 1u);
  // A write to the weight through the library must not be answered from the cache.
  groups[0].w = random_values(99, 64 * 32, kBFloat16);
  w.copy_(from_vector<double>(groups[0].w, {64, 32}));
  y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
  require_matches(y[0], reference(groups[0]), kBFloat16, "after the weight changed");
  EXPECT_EQ(engine.stats().weight_reorders, 2u);
}

// A write to the weight queued right behind the operator, on its stream, counts as a write (the
// storage's version moves) before it runs: the operator, which reads the old bytes, must not
// keep them in its cache under the new version, or every later call would use the old weight.
TEST_F(GroupedMatmulSingleRank, AWeightWrittenRightBehindTheOperatorIsNotCachedAsTheNewOne) {
  ops::MatmulEngine::instance().clear_caches();
  const Case c{0, kBFloat16, false, 0, 0, false, {{8, 64, 32}}};
  std::vector<FullGroup> groups = make_problem(c, 1, 7);
  const FullGroup before = groups[0];
  Tensor x = npu_tensor(groups[0].x, {8, 64}, kBFloat16);
  Tensor w = npu_tensor(groups[0].w, {64, 32}, kBFloat16);
  groups[0].w = random_values(77, 64 * 32, kBFloat16);
  const Tensor new_weight = from_vector<double>(groups[0].w, {64, 32});
  npu::Stream busy;
  std::promise<void> gate;
  busy.impl()->enqueue([opened = gate.get_future().share()] { opened.wait(); });
  npu::StreamGuard guard(busy);
  std::thread writer([&] {
    npu::StreamGuard writer_guard(busy);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (busy.impl()->pending() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();                 // until the operator is queued behind the gate
    w.copy_(new_weight, /*non_blocking=*/true);  // counted now, written after the operator
    gate.set_value();
  });
  std::vector<Tensor> y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
  writer.join();
  require_matches(y[0], reference(before), kBFloat16, "the call before the write");
  busy.synchronize();
  y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
  require_matches(y[0], reference(groups[0]), kBFloat16, "the call after the write");
}

TEST_F(GroupedMatmulSingleRank, GroupedMatmulWithoutCommunication) {
  const Case c{2, kFloat16, true, 0, 0, false, {{5, 16, 8}, {7, 24, 8}}};
  const std::vector<FullGroup> groups = make_problem(c, 1, 11);
  std::vector<Tensor> x, w, b;
  for (const FullGroup& g : groups) {
    x.push_back(npu_tensor(g.x, {g.m, g.k_total}, kFloat16));
    w.push_back(npu_tensor(g.w, {g.k_total, g.n}, kFloat16));
    b.push_back(npu_tensor(g.bias, {g.n}, kFloat16));
  }
  auto y = npu_grouped_matmul(x, w, {.bias = b, .split_item = 2});
  ASSERT_EQ(y.size(), 1u);
  require_matches(y[0], concat({reference(groups[0]), reference(groups[1])}), kFloat16, "no comm");
}

// The error message of `call`, or "" when it did not throw shmccl::Error.
template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Groups with no output elements are free to be huge. One of 2^31 rows of nothing (n = 0) beside
// a real one: its rows used to be cut into 2^31 one-row units (51 GB of them) before any GEMM.
// Four such groups stacked in one y (split_item 2) have 2^64 rows, which no shape can hold.
TEST_F(GroupedMatmulSingleRank, GroupsWithoutOutputCostNothingAndTheirRowsAreCounted) {
  const Case c{0, kFloat32, false, 0, 0, false, {{3, 4, 5}}};
  const std::vector<FullGroup> groups = make_problem(c, 1, 23);
  const FullGroup& g = groups[0];
  Tensor x = npu_tensor(g.x, {g.m, g.k_total}, kFloat32);
  Tensor w = npu_tensor(g.w, {g.k_total, g.n}, kFloat32);
  const Tensor no_columns = empty({int64_t{1} << 31, 0}, kFloat32, Device::npu(0));
  const Tensor no_weight = empty({0, 0}, kFloat32, Device::npu(0));
  std::vector<Tensor> y =
      npu_grouped_mat_mul_all_reduce({x, no_columns}, {w, no_weight}, hcomm(), {.comm_turn = 3});
  ASSERT_EQ(y.size(), 2u);
  require_matches(y[0], reference(g), kFloat32, "beside a group of no output");
  EXPECT_EQ(y[1].sizes(), (std::vector<int64_t>{int64_t{1} << 31, 0}));

  const Tensor quarter = empty({int64_t{1} << 62, 0}, kFloat32, Device::npu(0));
  const std::string text = error_of([&] {
    npu_grouped_mat_mul_all_reduce({quarter, quarter, quarter, quarter},
                                   {no_weight, no_weight, no_weight, no_weight}, hcomm(),
                                   {.split_item = 2});
  });
  EXPECT_NE(text.find("rows do not fit in int64_t"), std::string::npos) << text;
}

// Bytes the heap has handed out and not taken back (mmapped blocks included).
size_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// A group whose float32 results would take 17 MiB goes through the GEMM in blocks of rows (4 MiB
// of float32 each): the results are right across the blocks' edges, bias included, and the
// operator keeps no scratch the size of the group once it returns (its per-thread scratch used to
// grow to the largest group ever seen and stay).
TEST_F(GroupedMatmulSingleRank, ALargeGroupGoesThroughTheGemmInBoundedBlocks) {
  for (ScalarType dtype : {kFloat16, kBFloat16}) {
    const Case c{0, dtype, true, 0, 0, false, {{4200, 32, 1024}}};
    const std::vector<FullGroup> groups = make_problem(c, 1, 17);
    const FullGroup& g = groups[0];
    Tensor x = npu_tensor(g.x, {g.m, g.k_total}, dtype);
    Tensor w = npu_tensor(g.w, {g.k_total, g.n}, dtype);
    Tensor b = npu_tensor(g.bias, {g.n}, bias_type(dtype));
    const size_t before = heap_in_use();
    std::vector<Tensor> y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm(), {.bias = {b}});
    const size_t kept = heap_in_use() - std::min(before, heap_in_use());
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // mallinfo2 sees glibc's heap
    EXPECT_LT(kept, size_t{8} << 20) << "dtype " << dtype;
#else
    (void)kept;
#endif
    require_matches(y[0], reference(g), dtype, str("dtype ", dtype));
  }
}

// A block of the fewest rows (64) can need more room than the bound when a group is wide: more
// than 16384 columns of results (or of float16 x to widen, not tested: oneDNN's own scratchpad,
// which the engine keeps per thread for its largest GEMM, then holds as much). The operator gives
// such room back.
TEST_F(GroupedMatmulSingleRank, AGroupTooWideForTheBoundedBlocksKeepsNoScratch) {
  const std::vector<std::pair<ScalarType, std::array<int64_t, 3>>> wide{{kBFloat16, {70, 8, 40000}},
                                                                        {kFloat16, {70, 8, 40000}}};
  for (const auto& [dtype, shape] : wide) {
    const Case c{0, dtype, false, 0, 0, false, {shape}};
    const std::vector<FullGroup> groups = make_problem(c, 1, 23);
    const FullGroup& g = groups[0];
    Tensor x = npu_tensor(g.x, {g.m, g.k_total}, dtype);
    Tensor w = npu_tensor(g.w, {g.k_total, g.n}, dtype);
    const size_t before = heap_in_use();
    std::vector<Tensor> y = npu_grouped_mat_mul_all_reduce({x}, {w}, hcomm());
    const size_t kept = heap_in_use() - std::min(before, heap_in_use());
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // mallinfo2 sees glibc's heap
    EXPECT_LT(kept, size_t{6} << 20) << "dtype " << dtype << ", k " << g.k_total << ", n " << g.n;
#else
    (void)kept;
#endif
    require_matches(y[0], reference(g), dtype, str("dtype ", dtype, ", n ", g.n));
  }
}

TEST_F(GroupedMatmulSingleRank, EveryConstraintHasAClearError) {
  const auto t = [](std::vector<int64_t> shape, ScalarType dtype = kBFloat16) {
    return zeros(shape, dtype).npu();
  };
  const std::string name = hcomm();
  using V = std::vector<Tensor>;
  const auto call = [&](const V& x, const V& w, GroupedMatmulAllReduceOptions options = {}) {
    return error_of([&] { npu_grouped_mat_mul_all_reduce(x, w, name, options); });
  };
  const auto has = [](const std::string& message, const std::string& text) {
    return message.find(text) != std::string::npos;
  };
  EXPECT_TRUE(has(call({}, {t({4, 4})}), "Neither x nor weight could be empty."));
  EXPECT_TRUE(has(call({t({4, 4})}, {}), "Neither x nor weight could be empty."));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.split_item = 5}),
                  "The given split_item [5] is invalid, which must be one of 0/1/2/3"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.split_item = -1}),
                  "The given split_item [-1] is invalid, which must be one of 0/1/2/3"));
  // A 3-D weight of no groups is empty too (split_item 3 takes one [groups, k, n] tensor).
  EXPECT_TRUE(has(call({t({4, 4})}, {t({0, 4, 4})}, {.group_list = {4}, .split_item = 3}),
                  "Neither x nor weight could be empty."));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({65, 4, 4})}, {.group_list = {4}, .split_item = 3}),
                  "weight holds 65 groups; at most 64 are supported"));
  // An output too large to count (empty inputs make such shapes free).
  EXPECT_TRUE(has(call({t({int64_t{1} << 31, 0})}, {t({0, int64_t{1} << 33})}),
                  "group 0: its output of 2147483648 x 8589934592 elements does not fit"));
  // Refused before any view of its groups is made: 2^32 views would not fit in memory.
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({int64_t{1} << 32, 0, 4})}, {.group_list = {4}, .split_item = 3}),
          "weight holds 4294967296 groups; at most 64 are supported"));
  // ... and only split_item 3 takes it.
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({1, 4, 4})}), "weight[0] must be 2-D [k, n], got shape [1, 4, 4]"));
  // Undefined tensors, tensors that disagree on dtype or device.
  EXPECT_TRUE(has(call({Tensor()}, {t({4, 4})}), "x[0] is an undefined tensor"));
  EXPECT_TRUE(has(call({t({4, 4})}, {Tensor()}), "weight[0] is an undefined tensor"));
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({4, 4})}, {.bias = {Tensor()}}), "bias[0] is an undefined tensor"));
  EXPECT_TRUE(has(call({t({4, 4}), t({4, 4}, kFloat32)}, {t({4, 4}), t({4, 4})}),
                  "x[1] has dtype float32 but x[0] has bfloat16; all x must agree"));
  EXPECT_TRUE(has(call({t({4, 4})}, {zeros({4, 4}, kBFloat16).npu(1)}),
                  "weight[0] is on npu:1 but x[0] is on npu:0; all tensors must be on one device"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.reduce_op = "max"}),
                  "reduce_op [max] is not supported, which must be sum"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.comm_turn = -1}), "comm_turn [-1]"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.group_list_type = 2}), "group_list_type 2"));
  EXPECT_TRUE(has(error_of([&] {
                    npu_grouped_mat_mul_all_reduce({t({4, 4})}, {t({4, 4})}, "nope");
                  }),
                  "nope"));
  V many(65, t({1, 4}));
  V many_w(65, t({4, 4}));
  EXPECT_TRUE(has(call(many, many_w), "x has 65 elements; at most 64 are supported"));
  // x count vs split_item, with the reference's texts first.
  const std::string rule_0_2 =
      "When split_item = 0 or 2, the num of x tensors must equal the num of weight tensors, and "
      "there is supposed not to be group_list input: ";
  const std::string rule_1 =
      "When split_item = 1, the num of x tensors must equal 1, and the num of weight tensors is "
      "supposed to equal the length of group_list: ";
  EXPECT_TRUE(
      has(call({t({4, 4}), t({4, 4})}, {t({4, 4})}), rule_0_2 + "split_item 0 takes one x"));
  EXPECT_TRUE(has(call({t({4, 4}), t({4, 4})}, {t({4, 4})}, {.split_item = 2}),
                  rule_0_2 + "split_item 2 takes one x"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.group_list = {4}, .split_item = 2}),
                  rule_0_2 + "group_list must be empty when split_item is 2"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.split_item = 1}), rule_1));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.group_list = {2, 4}, .split_item = 1}),
                  rule_1 + "group_list has 2 elements"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4}), t({4, 4})}, {.group_list = {4}, .split_item = 3}),
                  "Invalid dim of weight. When split_item = 3"));
  EXPECT_TRUE(has(
      call({t({4, 4}), t({4, 4})}, {t({4, 4}), t({4, 4})}, {.group_list = {2, 4}, .split_item = 1}),
      rule_1 + "split_item 1 takes x as one tensor split by group_list, but x has 2 tensors"));
  // group_list present / absent, its length and its sum.
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.group_list = {4}}),
                  "group_list must be empty when split_item is 0"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.split_item = 1}), "which must not be empty"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.group_list = {2, 4}, .split_item = 1}),
                  "group_list has 2 elements but there are 1 weights"));
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({4, 4}), t({4, 4})}, {.group_list = {1, 3}, .split_item = 1}),
          "ends at row 3 but x has 4 rows"));
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({4, 4}), t({4, 4})}, {.group_list = {3, 1}, .split_item = 1}),
          "must be non-decreasing"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4}), t({4, 4})},
                       {.group_list = {3, 2}, .split_item = 1, .group_list_type = 1}),
                  "sums to 5 but x has 4 rows"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4}), t({4, 4})},
                       {.group_list = {-1, 5}, .split_item = 1, .group_list_type = 1}),
                  "holds row counts (group_list_type 1), but group_list[0] = -1 is negative"));
  EXPECT_TRUE(
      has(call({t({0, 4})}, {t({4, 4}), t({4, 4}), t({4, 4})},
               {.group_list = {INT64_MAX, INT64_MAX, 2}, .split_item = 1, .group_list_type = 1}),
          "whose sum overflows int64_t"));
  // bias count, shape and dtype.
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.bias = {t({4}, kFloat32), t({4}, kFloat32)}}),
                  "bias has 2 tensors but weight has 1"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 6})}, {.bias = {t({4}, kFloat32)}}),
                  "bias[0] must have shape [6]"));
  EXPECT_TRUE(has(call({t({4, 4})}, {t({4, 4})}, {.bias = {t({4}, kBFloat16)}}),
                  "bias[0] has dtype bfloat16 but x is bfloat16, which takes a float32 bias"));
  // m/k/n agreement.
  EXPECT_TRUE(has(call({t({4, 5})}, {t({4, 4})}), "has k = 5 columns but weight[0] has 4 rows"));
  EXPECT_TRUE(has(call({t({4, 4}), t({2, 4})}, {t({4, 4}), t({4, 8})}, {.split_item = 2}),
                  "so all n must be equal"));
  EXPECT_TRUE(has(call({t({4})}, {t({4, 4})}), "x[0] must be 2-D"));
  // dtypes.
  EXPECT_TRUE(
      has(call({t({4, 4})}, {t({4, 4}, kFloat16)}), "x and weight must have the same dtype"));
  EXPECT_TRUE(has(call({t({4, 4}, kInt32)}, {t({4, 4}, kInt32)}), "supported are float16"));
  // Host tensors and unknown communicators.
  EXPECT_TRUE(has(call({zeros({4, 4}, kBFloat16)}, {t({4, 4})}), "x[0] is a host tensor"));
  EXPECT_TRUE(has(call({t({4, 4})}, {zeros({4, 4}, kBFloat16)}), "weight[0] is a host tensor"));
}

}  // namespace
}  // namespace shmccl
