// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Ranks for which the kernel or a sandbox refuses pidfds (tests/syscall_filter.h): the
// zero-copy collectives still map each other's NPU memory (through /proc), and a dead peer is
// still noticed (/proc, polled), as where pidfds work. pidfd_getfd refused with EPERM is what
// sibling ranks meet on Ubuntu (Yama's ptrace_scope 1) and in containers without CAP_SYS_PTRACE
// there; both pidfd calls refused with ENOSYS, on kernels before 5.3 and under valgrind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "multiprocess.h"
#include "syscall_filter.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

enum class Refusal { kGetfdDenied, kNoPidfds };

void PrintTo(Refusal refusal, std::ostream* out) {
  *out << (refusal == Refusal::kGetfdDenied ? "pidfd_getfd refused (EPERM)"
                                            : "pidfds refused (ENOSYS)");
}

void refuse(Refusal refusal) {
  if (refusal == Refusal::kGetfdDenied) {
    testing::refuse_syscalls({SYS_pidfd_getfd}, EPERM);
  } else {
    testing::refuse_syscalls({SYS_pidfd_open, SYS_pidfd_getfd}, ENOSYS);
  }
}

// Rows of rank r in the uneven calls: 0 for rank 1, so a zero-size split is among them.
int64_t rows_of(int rank) {
  return rank == 1 ? 0 : 40000 + 1000 * int64_t{rank};
}

// Every rank's tensors are large enough for the work pool, whose chunks read and write the
// peers' arenas directly.
void run_zero_copy_collectives(const testing::RankContext& ctx) {
  const int world = ctx.world;
  const int64_t n = 300000;  // 2.4 MB of int64 per rank: far above the 16 KiB inline limit
  const int64_t sum_of_ranks = int64_t{world} * (world + 1) / 2;

  Tensor reduced = full({n}, int64_t{ctx.rank} + 1, kInt64).npu();
  all_reduce(reduced);
  require(equal(reduced.cpu(), full({n}, sum_of_ranks, kInt64)), "all_reduce");

  std::vector<int64_t> splits;
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    splits.push_back(rows_of(r));
    total += rows_of(r);
  }
  Tensor gathered = zeros({total, 2}, kInt64).npu();
  all_gather_into_tensor_uneven(
      gathered, full({rows_of(ctx.rank), 2}, int64_t{ctx.rank}, kInt64).npu(), splits);
  const Tensor gathered_host = gathered.cpu();
  int64_t row = 0;
  for (int r = 0; r < world; ++r) {
    require(
        equal(gathered_host.narrow(0, row, rows_of(r)), full({rows_of(r), 2}, int64_t{r}, kInt64)),
        str("all_gather_into_tensor_uneven: rows of rank ", r));
    row += rows_of(r);
  }

  Tensor mine = zeros({rows_of(ctx.rank), 2}, kInt64).npu();
  auto work =
      reduce_scatter_tensor_uneven(mine, full({total, 2}, int64_t{ctx.rank} + 1, kInt64).npu(),
                                   splits, ReduceOp::SUM, nullptr, /*async_op=*/true);
  require(work->wait(std::chrono::seconds(30)), "reduce_scatter_tensor_uneven: timed out");
  require(equal(mine.cpu(), full({rows_of(ctx.rank), 2}, sum_of_ranks, kInt64)),
          "reduce_scatter_tensor_uneven");

  // From the last rank: a large broadcast's receivers read the root's tensor.
  Tensor broadcasted = full({n}, ctx.rank == world - 1 ? int64_t{42} : int64_t{0}, kInt64).npu();
  broadcast(broadcasted, world - 1);
  require(equal(broadcasted.cpu(), full({n}, int64_t{42}, kInt64)), "broadcast");
}

class SandboxTest : public ::testing::TestWithParam<std::tuple<Refusal, int>> {};

TEST_P(SandboxTest, ZeroCopyCollectivesWork) {
  const auto [refusal, world] = GetParam();
  const std::string job = testing::unique_job_id();
  auto results = testing::run_ranks(
      world,
      [refusal](const testing::RankContext& ctx) {
        refuse(refusal);
        npu::set_device(ctx.rank % npu::device_count());
        ctx.init();
        run_zero_copy_collectives(ctx);
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results)) << world << " ranks";
  EXPECT_TRUE(testing::no_segments_left(job));
}

// Without pidfds the peer monitor reads /proc every 10 ms: a survivor still fails at once,
// naming the dead rank, instead of waiting out its timeout (60 s here).
TEST_P(SandboxTest, DeadPeerIsNoticed) {
  const auto [refusal, world] = GetParam();
  const std::string job = testing::unique_job_id();
  testing::SurvivorBarrier survivors;
  auto results = testing::run_ranks(
      world,
      [refusal, &survivors](const testing::RankContext& ctx) {
        refuse(refusal);
        npu::set_device(ctx.rank % npu::device_count());
        ctx.init(/*timeout_ms=*/60000);
        Tensor t = ones({1 << 16}, kFloat32).npu();
        all_reduce(t);
        if (ctx.rank == 1) raise(SIGKILL);
        testing::require_death_noticed(ctx, survivors, /*victim=*/1, /*bound_seconds=*/2.0,
                                       [&] { all_reduce(t); });
      },
      std::chrono::seconds(60), job);
  EXPECT_TRUE(testing::only_victim_killed(results, /*victim=*/1));
  EXPECT_TRUE(testing::no_segments_left(job));
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, SandboxTest,
    ::testing::Combine(::testing::Values(Refusal::kGetfdDenied, Refusal::kNoPidfds),
                       ::testing::Values(2, 3, 4, 8)),
    [](const ::testing::TestParamInfo<std::tuple<Refusal, int>>& info) {
      return str(std::get<0>(info.param) == Refusal::kGetfdDenied ? "GetfdDenied" : "NoPidfds", "_",
                 std::get<1>(info.param), "Ranks");
    });

}  // namespace
}  // namespace shmccl
