// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmccl-perf's pieces without processes: the command line, the size sweep and split patterns,
// and the data pattern of the reference check.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "shmccl/shmccl.hpp"
#include "tools/perf/options.h"
#include "tools/perf/reference.h"
#include "tools/perf/size_plan.h"

namespace shmccl::perf {
namespace {

TEST(PerfOptions, ShortAndLongFormsAgree) {
  const PerfOptions short_form = parse_options({"-o",        "all_gather_uneven",
                                                "-b",        "8",
                                                "-e256M",    "-f",
                                                "4",         "-d",
                                                "bfloat16",  "-r",
                                                "prod",      "-w",
                                                "3",         "-n",
                                                "7",         "-c",
                                                "0",         "-a",
                                                "2",         "-m",
                                                "host",      "-z",
                                                "random:42", "-R",
                                                "1"});
  const PerfOptions long_form = parse_options({"--op=all-gather-uneven",
                                               "--minbytes",
                                               "8",
                                               "--maxbytes=256m",
                                               "--stepfactor",
                                               "4",
                                               "--datatype",
                                               "bf16",
                                               "--redop=product",
                                               "--warmup-iters",
                                               "3",
                                               "--iters=7",
                                               "--check",
                                               "0",
                                               "--async",
                                               "2",
                                               "--memory=cpu",
                                               "--split",
                                               "random:42",
                                               "--root",
                                               "1"});
  for (const PerfOptions& options : {short_form, long_form}) {
    EXPECT_EQ(options.collective, Collective::kAllGatherUneven);
    EXPECT_EQ(options.min_bytes, 8);
    EXPECT_EQ(options.max_bytes, int64_t{256} << 20);
    EXPECT_EQ(options.step_factor, 4);
    EXPECT_EQ(options.dtypes, std::vector<ScalarType>{kBFloat16});
    EXPECT_EQ(options.reduce_ops, std::vector<ReduceOp>{ReduceOp::PRODUCT});
    EXPECT_EQ(options.warmup_iters, 3);
    EXPECT_EQ(options.iters, 7);
    EXPECT_FALSE(options.check);
    EXPECT_EQ(options.async_depth, 2);
    EXPECT_EQ(options.placement, Placement::kHost);
    EXPECT_EQ(options.split.kind, SplitPattern::Kind::kRandom);
    EXPECT_EQ(options.split.seed, 42u);
    EXPECT_EQ(options.root, 1);
    EXPECT_EQ(options.corrupt_rank, -1);
  }
}

TEST(PerfOptions, DefaultsAndAll) {
  const PerfOptions defaults = parse_options({});
  EXPECT_EQ(defaults.collective, Collective::kAllReduce);
  EXPECT_EQ(defaults.min_bytes, int64_t{32} << 20);
  EXPECT_TRUE(defaults.check);
  EXPECT_EQ(defaults.async_depth, 0);
  EXPECT_EQ(defaults.split.kind, SplitPattern::Kind::kLinear);
  const PerfOptions all = parse_options({"-d", "all", "-r", "all", "-h"});
  EXPECT_EQ(all.dtypes.size(), static_cast<size_t>(kNumScalarTypes));
  EXPECT_EQ(all.reduce_ops.size(), 5u);
  EXPECT_TRUE(all.help);
}

TEST(PerfOptions, ErrorsNameTheOption) {
  auto message = [](const std::vector<std::string>& args) {
    try {
      parse_options(args);
    } catch (const UsageError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({"-b", "1.5M"}),
            "option -b/--minbytes: invalid value '1.5M' (expected bytes such as 8, 64K, 256M, 1G)");
  EXPECT_EQ(message({"-e", "2T"}),
            "option -e/--maxbytes: invalid value '2T' (expected bytes such as 8, 64K, 256M, 1G)");
  EXPECT_EQ(message({"-z", "sawtooth"}),
            "option -z/--split: invalid value 'sawtooth' (expected linear, random:SEED or zero)");
  EXPECT_EQ(message({"--iters"}), "option -n/--iters needs a value (an integer >= 1)");
  EXPECT_EQ(message({"-d", "bool", "-r", "avg"}),
            "options -d bool and -r avg: the average of booleans is not defined (as in torch), "
            "so there is nothing to measure");
  EXPECT_EQ(message({"-o", "all_gather", "-d", "bool", "-r", "avg"}), "no error")
      << "an op that reduces nothing takes no reduce op";
  EXPECT_EQ(message({"-d", "bool", "-r", "all"}), "no error") << "the other ops run";
  EXPECT_EQ(message({"--debug-corrupt", "x"}),
            "option --debug_corrupt: invalid value 'x' (expected a rank >= 0)");
}

TEST(PerfOptions, Bytes) {
  int64_t bytes = 0;
  EXPECT_TRUE(parse_bytes("8", &bytes));
  EXPECT_EQ(bytes, 8);
  EXPECT_TRUE(parse_bytes("64k", &bytes));
  EXPECT_EQ(bytes, 65536);
  EXPECT_TRUE(parse_bytes("1G", &bytes));
  EXPECT_EQ(bytes, int64_t{1} << 30);
  for (const char* bad : {"", "0", "-8", "K", "8KB", "1025G", "99999999999999999999"})
    EXPECT_FALSE(parse_bytes(bad, &bytes)) << bad;
}

TEST(PerfSizes, SweepStepsByTheFactorUpToMax) {
  EXPECT_EQ(sweep_sizes(8, 256, 4), (std::vector<int64_t>{8, 32, 128}));
  EXPECT_EQ(sweep_sizes(8, 512, 4), (std::vector<int64_t>{8, 32, 128, 512}));
  EXPECT_EQ(sweep_sizes(100, 100, 2), (std::vector<int64_t>{100}));
  EXPECT_EQ(sweep_sizes(int64_t{1} << 39, int64_t{1} << 40, 1 << 20).size(), 1u);  // no overflow
}

int64_t sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

TEST(PerfSizes, SplitPatterns) {
  const SplitPattern linear{SplitPattern::Kind::kLinear, 0};
  EXPECT_EQ(split_counts(100, 4, linear), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(split_counts(2, 4, linear), (std::vector<int64_t>{0, 0, 1, 1}));
  const SplitPattern zero{SplitPattern::Kind::kZero, 0};
  EXPECT_EQ(split_counts(10, 3, zero), (std::vector<int64_t>{0, 5, 5}));
  EXPECT_EQ(split_counts(10, 1, zero), (std::vector<int64_t>{10}));
  const SplitPattern seven{SplitPattern::Kind::kRandom, 7};
  const SplitPattern eight{SplitPattern::Kind::kRandom, 8};
  EXPECT_EQ(split_counts(1000, 5, seven), split_counts(1000, 5, seven));
  EXPECT_NE(split_counts(1000, 5, seven), split_counts(1000, 5, eight));
  for (int world = 1; world <= 8; ++world) {
    for (int64_t count : {0, 1, 7, 1000, 123457}) {
      for (const SplitPattern& pattern : {linear, zero, seven}) {
        const auto splits = split_counts(count, world, pattern);
        ASSERT_EQ(splits.size(), static_cast<size_t>(world));
        EXPECT_EQ(sum(splits), count);
        for (int64_t split : splits)
          EXPECT_GE(split, 0);
        if (pattern.kind == SplitPattern::Kind::kZero && world > 1) {
          EXPECT_EQ(splits[0], 0);
        }
      }
    }
  }
}

TEST(PerfSizes, CountsRoundDownToWhatTheOpNeeds) {
  const SplitPattern linear;
  SizePlan plan = plan_size(Collective::kAllGather, kFloat32, 100, 3, linear);
  EXPECT_EQ(plan.count, 24);  // 25 elements, rounded down to a multiple of 3 ranks
  EXPECT_EQ(plan.bytes, 96);
  EXPECT_EQ(plan.splits, (std::vector<int64_t>{8, 8, 8}));
  EXPECT_EQ(plan.offset(2), 16);
  plan = plan_size(Collective::kReduceScatterUneven, kFloat64, 100, 3, linear);
  EXPECT_EQ(plan.count, 12);
  EXPECT_EQ(plan.splits, (std::vector<int64_t>{2, 4, 6}));
  plan = plan_size(Collective::kAllReduce, kBFloat16, 7, 4, linear);
  EXPECT_EQ(plan.count, 3);
  EXPECT_EQ(plan.bytes, 6);
  EXPECT_TRUE(plan.splits.empty());
  plan = plan_size(Collective::kAllGather, kInt64, 8, 2, linear);
  EXPECT_EQ(plan.count, 0);  // as nccl-tests: a size too small for the ranks is an empty row
}

// The pattern's values stay in the exact range of the dtype even when every rank adds its
// largest value, and what fill writes is what the check expects.
TEST(PerfReference, ValuesAreExactAndRoundTrip) {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    const auto dtype = static_cast<ScalarType>(i);
    for (int world : {1, 2, 3, 8, 64}) {
      for (ReduceOp op : {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::AVG}) {
        const DataPattern pattern(dtype, op, /*reducing=*/true, world);
        constexpr int64_t kCount = 997;
        std::vector<int64_t> largest_sum(kCount, 0);
        for (int rank = 0; rank < world; ++rank) {
          for (int64_t k = 0; k < kCount; ++k)
            largest_sum[static_cast<size_t>(k)] += std::abs(pattern.value(rank, k));
        }
        const int64_t limit = dtype == kBFloat16  ? 256
                              : dtype == kFloat16 ? 2048
                              : dtype == kInt8    ? 127
                              : dtype == kUInt8   ? 255
                                                  : 1 << 24;
        for (int64_t s : largest_sum)
          ASSERT_LE(s, std::max<int64_t>(limit, 2 * world)) << dtype << " world " << world;

        std::vector<uint64_t> storage(kCount);  // 8-byte aligned, room for any dtype
        pattern.fill(storage.data(), kCount, world - 1, 5);
        EXPECT_EQ(pattern.count_wrong_values(storage.data(), kCount, world - 1, 5), 0) << dtype;
        if (dtype != kBool && !(op == ReduceOp::PRODUCT && world == 1)) {  // else too few values
          EXPECT_GT(pattern.count_wrong_values(storage.data(), kCount, world - 1, 6), 0) << dtype;
        }
        pattern.fill_poison(storage.data(), kCount);
        EXPECT_EQ(pattern.count_wrong_values(storage.data(), kCount, world - 1, 5), kCount);
        EXPECT_EQ(pattern.count_wrong_reduced(storage.data(), kCount, 5), kCount);
      }
    }
  }
}

// With one rank every reduction is the rank's own value.
TEST(PerfReference, OneRankReducesToItsInput) {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    const auto dtype = static_cast<ScalarType>(i);
    for (ReduceOp op :
         {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::AVG}) {
      const DataPattern pattern(dtype, op, /*reducing=*/true, 1);
      std::vector<uint64_t> storage(300);
      pattern.fill(storage.data(), 300, 0, 11);
      EXPECT_EQ(pattern.count_wrong_reduced(storage.data(), 300, 11), 0) << dtype << " " << op;
    }
  }
}

}  // namespace
}  // namespace shmccl::perf
