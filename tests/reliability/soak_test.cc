// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Soak: thousands of random collectives at 8 ranks (random op, dtype, reduce op, uneven sizes
// with zeros, host or NPU tensors, sync or async with a random number in flight, on the default
// group and on four sub-groups made with new_group), every result checked against a local
// reference; no error, no leak (device memory back to its baseline, no file descriptors gained
// after the warm-up, nothing left in /dev/shm).
//
// Every rank draws the same stream of (group, call) from one seed and runs the calls of the groups
// it belongs to, in that order: the global order rules out deadlocks between groups.
//   CI:      SHMCCL_SOAK_ITERATIONS=10000, SHMCCL_SOAK_SECONDS=20 (the defaults; whichever first)
//   by hand: SHMCCL_SOAK_ITERATIONS=1000000 SHMCCL_SOAK_SECONDS=3600 SHMCCL_SOAK_SEED=7
//            build/tests/reliability_soak_test
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <random>

#include "core/config.h"
#include "core/directory.h"
#include "core/logging.h"
#include "multiprocess.h"
#include "reliability/random_collective.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

int64_t env_or(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoll(value) : fallback;
}

// Open file descriptors, and how many of them are NPU arenas (this process's and the peers' it
// mapped: a rank maps a peer's arena, for good, the first time it claims a chunk that touches
// it, which may happen late).
struct FdCount {
  int other = 0;
  int arenas = 0;
};

FdCount open_fds() {
  FdCount count;
  shmccl::detail::Directory dir("/proc/self/fd");
  dir.for_each([&](const char* fd) {
    char target[256] = {};
    if (readlinkat(dir.fd(), fd, target, sizeof(target) - 1) < 0) return true;
    if (std::strstr(target, "memfd:shmccl-npu") != nullptr) {
      ++count.arenas;
    } else {
      ++count.other;
    }
    return true;
  });
  return count;
}

struct Totals {
  std::atomic<int64_t> steps{0};  // global steps drawn (rank 0)
  std::atomic<int64_t> calls{0};  // collectives run, all ranks together
  std::atomic<int64_t> async_calls{0};
  std::atomic<int64_t> subgroup_calls{0};
  std::atomic<int64_t> per_op[testing::kRandomOps] = {};
};

TEST(Soak, RandomCollectivesOnGroupsAndSubGroupsVerifiedWithoutLeaks) {
  constexpr int kWorld = 8;
  const int64_t iterations = env_or("SHMCCL_SOAK_ITERATIONS", 10000);
  const int64_t seconds = env_or("SHMCCL_SOAK_SECONDS", 20);
  const uint64_t seed = static_cast<uint64_t>(env_or("SHMCCL_SOAK_SEED", 1));
  std::printf(
      "[soak] seed %llu, up to %lld steps or %lld s (SHMCCL_SOAK_SEED, _ITERATIONS, "
      "_SECONDS)\n",
      static_cast<unsigned long long>(seed), static_cast<long long>(iterations),
      static_cast<long long>(seconds));
  auto* totals = static_cast<Totals*>(
      mmap(nullptr, sizeof(Totals), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(totals, MAP_FAILED);
  new (totals) Totals();
  const std::string job = testing::unique_job_id();
  const auto start = std::chrono::steady_clock::now();
  auto results = testing::run_ranks(
      kWorld,
      [&](const testing::RankContext& ctx) {
        setenv("SHMCCL_CHUNK_BYTES", "32K", 1);  // more chunks per pool collective
        config::reload();
        log::reload();
        npu::set_device(ctx.rank);
        ctx.init(/*timeout_ms=*/60000);
        const std::vector<std::vector<int>> member_lists = {
            {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 4, 6}, {1, 3, 5, 7}, {0, 1}, {2, 3, 4, 5, 6}};
        std::vector<ProcessGroupPtr> groups = {default_group()};
        for (size_t g = 1; g < member_lists.size(); ++g)
          groups.push_back(new_group(member_lists[g]));
        const uint64_t baseline_memory = npu::memory_allocated();
        // The descriptors are counted after the warm-up (every group's mappings made) and at the
        // end; the run must get past it (a slow build stops on time, not after 10% of the steps).
        const int64_t warm_up_steps = std::min<int64_t>(iterations / 10, 100);
        FdCount warm_fds;
        bool warm = false;

        std::mt19937_64 rng(seed);
        std::deque<std::pair<std::shared_ptr<Work>, std::unique_ptr<testing::PreparedOp>>> pending;
        size_t depth = 1;
        auto retire_oldest = [&] {
          pending.front().first->wait();
          pending.front().second->verify();
          pending.pop_front();
        };
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        int64_t step = 0;
        for (; step < iterations; ++step) {
          if (step % 50 == 49) {
            // Stop together: the time limit is decided by an all-reduce (MAX) of everyone's view.
            Tensor late =
                full({1}, std::chrono::steady_clock::now() > deadline ? 1.0 : 0.0, kFloat64);
            all_reduce(late, ReduceOp::MAX);
            if (late.to_vector<double>()[0] > 0) break;
          }
          if (step == warm_up_steps) {
            warm_fds = open_fds();
            warm = true;
          }
          const size_t g = static_cast<size_t>(
              std::uniform_int_distribution<int>(0, static_cast<int>(groups.size()) - 1)(rng));
          const int group_size = static_cast<int>(member_lists[g].size());
          testing::OpSpec spec = testing::random_op_spec(rng, group_size, 32768);
          if (std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
            depth = static_cast<size_t>(std::uniform_int_distribution<int>(1, 6)(rng));
          }
          if (ctx.rank == 0) totals->steps.fetch_add(1);
          if (!groups[g]->is_member()) continue;
          auto op = std::make_unique<testing::PreparedOp>(spec, groups[g]->rank(), group_size);
          std::shared_ptr<Work> work = op->launch(groups[g]);
          totals->calls.fetch_add(1);
          totals->per_op[static_cast<int>(spec.op)].fetch_add(1);
          if (g != 0) totals->subgroup_calls.fetch_add(1);
          if (spec.async_op) {
            totals->async_calls.fetch_add(1);
            pending.emplace_back(std::move(work), std::move(op));
            while (pending.size() > depth)
              retire_oldest();
          } else {
            op->verify();
          }
        }
        while (!pending.empty())
          retire_oldest();
        require(warm, str("the soak stopped after ", step, " steps, before the warm-up's ",
                          warm_up_steps, ": no leak was looked for"));
        {
          const FdCount end = open_fds();
          require(end.other <= warm_fds.other,
                  str("file descriptors grew from ", warm_fds.other, " to ", end.other,
                      " after the warm-up (not counting NPU arenas)"));
          require(end.arenas <= kWorld, str(end.arenas, " NPU arena descriptors for ", kWorld,
                                            " ranks (one per process at most)"));
        }
        npu::synchronize();
        require(npu::memory_allocated() == baseline_memory,
                str("device memory leaked: ", npu::memory_allocated(), " bytes allocated, ",
                    baseline_memory, " before"));
      },
      std::chrono::seconds(seconds + 120), job);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  EXPECT_TRUE(testing::no_segments_left(job));
  std::string by_op;
  for (int op = 0; op < testing::kRandomOps; ++op) {
    by_op +=
        str(by_op.empty() ? "" : ", ", testing::random_op_name(static_cast<testing::RandomOp>(op)),
            " ", totals->per_op[op].load());
  }
  std::printf(
      "[soak] %lld steps, %lld collectives verified (%lld async, %lld on sub-groups) in "
      "%.1f s at %d ranks: %s; errors 0, leaks 0\n",
      static_cast<long long>(totals->steps.load()), static_cast<long long>(totals->calls.load()),
      static_cast<long long>(totals->async_calls.load()),
      static_cast<long long>(totals->subgroup_calls.load()), elapsed, kWorld, by_op.c_str());
  munmap(totals, sizeof(Totals));
}

}  // namespace
}  // namespace shmccl
