// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// MatmulEngine on its own: GEMMs of several threads at once over primitives another thread
// created (each brings its own scratchpad), and the caller's OpenMP team size left as it was.
// oneDNN's library scratchpad belongs to the thread that created a primitive (primitive_iface's
// init); the race it leaves is a few stores wide (brgemm's 640-byte batch array), so the first
// test is a guard that rarely fires, not proof: the scratchpad mode is the fix.
#include "ops/matmul_engine.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "multiprocess.h"
#include "shmccl/tensor.hpp"

namespace shmccl::ops {
namespace {

struct Problem {
  MatmulShape shape;
  Tensor a;
  Tensor weight;
  std::vector<float> expected;  // the engine's own result on one thread, before any concurrency
};

// bfloat16 with an odd k: oneDNN's brgemm matmul then stages A in its scratchpad too. A is in
// the engine's operand dtype: float32 where oneDNN has no bfloat16 matmul (no AVX-512).
Problem make_problem(int64_t m, int64_t k, int64_t n, int seed) {
  Problem p;
  p.shape = MatmulShape{m, k, n, kBFloat16};
  std::vector<float> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(k * n));
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>((i * 7 + seed) % 13) - 6.0f;
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>((i * 5 + seed) % 11) - 5.0f;
  p.a = from_vector<float>(a, {m, k}).to(MatmulEngine::operand_dtype(kBFloat16));
  p.weight = from_vector<float>(w, {k, n}).to(kBFloat16);
  p.expected.resize(static_cast<size_t>(m * n));
  MatmulEngine::instance().matmul(p.shape, p.a.data_ptr(), k, p.weight, p.expected.data(), 1);
  return p;
}

TEST(MatmulEngineTest, ThreadsRunGemmsAtOnceOnPrimitivesAnotherThreadCreated) {
  // Created here, on this thread; run below on two others at once, 5000 times each.
  std::vector<Problem> problems{make_problem(48, 33, 40, 1), make_problem(20, 65, 24, 2)};
  std::atomic<int> wrong{0};
  std::latch start(2);
  std::vector<std::thread> threads;
  for (const Problem& p : problems) {
    threads.emplace_back([&p, &wrong, &start] {
      std::vector<float> c(p.expected.size());
      start.arrive_and_wait();
      for (int i = 0; i < 5000; ++i) {
        MatmulEngine::instance().matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 1);
        if (c != p.expected) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(wrong.load(), 0) << "GEMMs that returned another call's numbers";
}

TEST(MatmulEngineTest, TheCallersOpenMpTeamSizeIsPutBack) {
  const Problem p = make_problem(8, 16, 8, 3);
  std::vector<float> c(p.expected.size());
  omp_set_num_threads(3);
  MatmulEngine::instance().matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 1);
  EXPECT_EQ(omp_get_max_threads(), 3);
  EXPECT_EQ(c, p.expected);
}

// oneDNN's brgemm matmul divides its work among the team it was made for: a primitive made on
// one thread, reused by a call that asks for two, would run on one.
TEST(MatmulEngineTest, AGemmOnAnotherTeamSizeGetsAPrimitiveMadeForIt) {
  MatmulEngine& engine = MatmulEngine::instance();
  engine.clear_caches();
  const uint64_t before = engine.stats().primitives_created;
  const Problem p = make_problem(96, 128, 64, 4);  // made on one thread
  ASSERT_EQ(engine.stats().primitives_created, before + 1);
  std::vector<float> c(p.expected.size());
  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 1);
  EXPECT_EQ(engine.stats().primitives_created, before + 1) << "one thread again: the same one";
  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 2);
  EXPECT_EQ(engine.stats().primitives_created, before + 2) << "two threads: one of their own";
  EXPECT_EQ(c, p.expected);
}

// Two threads that miss the weight cache on one weight at once both reorder it (neither waits for
// the other); the cache must then hold it once, and the next call hit that entry.
TEST(MatmulEngineTest, TwoThreadsMissingOnOneWeightAtOnceLeaveOneCacheEntry) {
  MatmulEngine& engine = MatmulEngine::instance();
  const Problem p = make_problem(16, 64, 32, 5);
  engine.clear_caches();
  std::vector<float> c(p.expected.size());
  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 1);
  const uint64_t entry_bytes = engine.stats().weight_cache_bytes;
  ASSERT_GT(entry_bytes, 0u) << "the weight was not cached: nothing to test";
  engine.clear_caches();

  const MatmulEngine::Stats before = engine.stats();
  // Each reorder waits for the other's: both threads have missed before either can insert.
  std::latch both_reordered(2);
  engine.set_reorder_hook_for_testing([&both_reordered] { both_reordered.arrive_and_wait(); });
  std::vector<std::vector<float>> results(2, std::vector<float>(p.expected.size()));
  std::vector<std::thread> threads;
  for (std::vector<float>& result : results) {
    threads.emplace_back([&engine, &p, &result] {
      engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, result.data(), 1);
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  engine.set_reorder_hook_for_testing(nullptr);
  EXPECT_EQ(results[0], p.expected);
  EXPECT_EQ(results[1], p.expected);
  const MatmulEngine::Stats after = engine.stats();
  EXPECT_EQ(after.weight_reorders, before.weight_reorders + 2);
  EXPECT_EQ(after.weight_cache_bytes, entry_bytes) << "the weight is cached twice";

  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, c.data(), 1);
  EXPECT_EQ(c, p.expected);
  EXPECT_EQ(engine.stats().weight_reorders, after.weight_reorders);
  EXPECT_EQ(engine.stats().weight_cache_hits, after.weight_cache_hits + 1);
}

// A weight written between two threads' reorders: the cache keeps the newer version's entry, and
// the call after the write gets the new numbers.
TEST(MatmulEngineTest, AnOlderReorderFinishingLastDoesNotReplaceANewerEntry) {
  MatmulEngine& engine = MatmulEngine::instance();
  Problem p = make_problem(16, 64, 32, 6);
  engine.clear_caches();
  const uint64_t old_version = p.weight.version();
  std::latch old_reordered(1), new_cached(1);
  std::atomic<int> reorders{0};
  engine.set_reorder_hook_for_testing([&] {
    // The first reorder (of the old version) waits until the newer one is in the cache.
    if (reorders.fetch_add(1) == 0) {
      old_reordered.count_down();
      new_cached.wait();
    }
  });
  std::vector<float> old_result(p.expected.size());
  std::thread old_call(
      [&] { engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, old_result.data(), 1); });
  old_reordered.wait();
  p.weight.mul_(full({p.shape.k, p.shape.n}, 2.0, kBFloat16));  // a new version
  ASSERT_GT(p.weight.version(), old_version);
  std::vector<float> doubled(p.expected.size());
  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, doubled.data(), 1);
  new_cached.count_down();
  old_call.join();
  engine.set_reorder_hook_for_testing(nullptr);
  EXPECT_EQ(old_result, p.expected);
  for (size_t i = 0; i < doubled.size(); ++i)
    ASSERT_EQ(doubled[i], 2 * p.expected[i]) << "element " << i;

  const MatmulEngine::Stats settled = engine.stats();
  std::vector<float> again(p.expected.size());
  engine.matmul(p.shape, p.a.data_ptr(), p.shape.k, p.weight, again.data(), 1);
  EXPECT_EQ(again, doubled) << "the old version's entry replaced the new one";
  EXPECT_EQ(engine.stats().weight_cache_hits, settled.weight_cache_hits + 1);
}

// oneDNN's own failures leave the engine as shmccl errors naming the GEMM (a caller catching
// shmccl::Error sees them). Rows of A closer together than its width: oneDNN refuses the layout.
TEST(MatmulEngineTest, AOneDnnFailureIsAnShmcclErrorNamingTheGemm) {
  const Problem p = make_problem(8, 16, 8, 7);
  std::vector<float> c(p.expected.size());
  try {
    MatmulEngine::instance().matmul(p.shape, p.a.data_ptr(), -1, p.weight, c.data(), 1);
    ADD_FAILURE() << "oneDNN took a negative row stride";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("matmul [8, 16] x [16, 8] of bfloat16: oneDNN failed"),
              std::string::npos)
        << error.what();
  }
}

// Without AVX-512 oneDNN has no bfloat16 matmul: the engine then runs bfloat16 GEMMs on operands
// widened to float32, as it does float16's. The test runs itself again in a child whose oneDNN is
// capped at AVX2 (ONEDNN_MAX_CPU_ISA is read once, at oneDNN's first use).
TEST(MatmulEngineTest, BFloat16WithoutAvx512RunsWidenedToFloat32) {
  if (std::getenv("SHMCCL_TEST_AVX2_CHILD") != nullptr) {
    ASSERT_FALSE(MatmulEngine::native_bfloat16());
    ASSERT_EQ(MatmulEngine::operand_dtype(kBFloat16), kFloat32);
    ASSERT_EQ(MatmulEngine::operand_dtype(kFloat32), kFloat32);
    constexpr int64_t m = 24, k = 40, n = 16;
    std::vector<float> a(m * k), w(k * n);
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = static_cast<float>((i * 7) % 13) - 6.0f;  // exact in bfloat16
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>((i * 5) % 11) - 5.0f;
    const Tensor weight = from_vector<float>(w, {k, n}).to(kBFloat16);
    std::vector<float> c(m * n);
    MatmulEngine& engine = MatmulEngine::instance();
    engine.clear_caches();
    for (int call = 0; call < 2; ++call) {
      engine.matmul(MatmulShape{m, k, n, kBFloat16}, a.data(), k, weight, c.data(), 1);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < k; ++l)
            sum += static_cast<double>(a[i * k + l]) * w[l * n + j];
          ASSERT_EQ(c[i * n + j], sum) << "call " << call << ", c[" << i << ", " << j << "]";
        }
      }
    }
    EXPECT_EQ(engine.stats().weight_reorders, 1u) << "the widened weight is kept";
    EXPECT_EQ(engine.stats().weight_cache_hits, 1u);
    return;
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_TRUE(MatmulEngine::native_bfloat16());
  }
  // Made before fork(): the child of a threaded process may only exec.
  std::vector<std::string> environment{"SHMCCL_TEST_AVX2_CHILD=1", "ONEDNN_MAX_CPU_ISA=AVX2"};
  for (char** entry = environ; *entry != nullptr; ++entry)
    environment.emplace_back(*entry);
  std::vector<char*> envp;
  for (std::string& entry : environment)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=MatmulEngineTest.BFloat16WithoutAvx512RunsWidenedToFloat32";
  std::string name = "matmul_engine_test";
  char* argv[] = {name.data(), filter.data(), nullptr};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  EXPECT_EQ(testing::exit_code_within(child, std::chrono::seconds(60)), 0)
      << "the AVX2 child failed (its output is above)";
}

// The ranks that may run on a rank's CPUs share them, whether a launcher bound them there or a
// taskset around the whole job did (a CPU set smaller than the host's is not always the rank's).
TEST(CpuShareTest, RanksShareTheCpusTheyMayRunOn) {
  // cpu_share_of(cpus, sharing, online, ranks, quota)
  EXPECT_EQ(cpu_share_of(8, 8, 64, 8, 0), 1);    // taskset -c 0-7 around 8 ranks
  EXPECT_EQ(cpu_share_of(32, 4, 64, 8, 0), 8);   // --numa-binding node: 4 ranks on each node
  EXPECT_EQ(cpu_share_of(8, 1, 64, 8, 0), 8);    // a core complex of its own
  EXPECT_EQ(cpu_share_of(2, 4, 2, 4, 0), 1);     // 4 unbound ranks on 2 CPUs
  EXPECT_EQ(cpu_share_of(64, 8, 64, 8, 16), 2);  // a container's 16 CPUs among 8 ranks
  EXPECT_EQ(cpu_share_of(2, 1, 2, 1, 0), 2);     // alone
  // Before init_process_group the ranks' CPU sets are unknown: a smaller set is the rank's own.
  EXPECT_EQ(cpu_share_of(8, 0, 64, 8, 0), 8);
  EXPECT_EQ(cpu_share_of(64, 0, 64, 8, 0), 8);
}

}  // namespace
}  // namespace shmccl::ops
