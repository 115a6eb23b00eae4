// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Multi-process Google Benchmark support: every rank runs the same benchmarks in lockstep
// (fixed iteration counts, so no rank decides differently), times each iteration itself, and the
// iteration's time is the maximum over ranks (as nccl-tests and the peer benchmarks do). Only
// rank 0 reports. Under shmrun the ranks come from the environment; run directly, the binary
// forks SHMCCL_BENCH_RANKS ranks itself (default 2).
#pragma once

#include <benchmark/benchmark.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shmccl/shmccl.hpp"

namespace shmccl::bench {

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// Starts the ranks (forking when not launched by shmrun), initializes the default group and
// Google Benchmark, runs `register_benchmarks`, then the benchmarks. Returns main's exit code.
template <typename Register>
int run_multiprocess_benchmarks(int argc, char** argv, Register&& register_benchmarks) {
  std::vector<pid_t> children;
  if (std::getenv("RANK") == nullptr) {
    const char* ranks_text = std::getenv("SHMCCL_BENCH_RANKS");
    const int ranks = ranks_text ? std::atoi(ranks_text) : 2;
    const std::string job = "bench-" + std::to_string(getpid());
    setenv("SHMCCL_JOB_ID", job.c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
    int rank = 0;
    for (int r = 1; r < ranks; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        rank = r;
        children.clear();
        break;
      }
      children.push_back(pid);
    }
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    // SHMCCL_BENCH_PIN=1 pins rank r to core r % cores (as mpirun binds). Off by default: on
    // this 2-vCPU VM pinned ranks showed 30x worse tail latency (p99 10-25 us vs 0.4 us).
    if (std::getenv("SHMCCL_BENCH_PIN") != nullptr) {
      cpu_set_t allowed;
      if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
        std::vector<int> cores;
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
          if (CPU_ISSET(cpu, &allowed)) cores.push_back(cpu);
        }
        cpu_set_t mine;
        CPU_ZERO(&mine);
        CPU_SET(cores[static_cast<size_t>(rank) % cores.size()], &mine);
        sched_setaffinity(0, sizeof(mine), &mine);
      }
    }
  }
  const int rank = std::atoi(std::getenv("RANK"));
  // Only rank 0 writes output files.
  std::vector<char*> arguments;
  for (int i = 0; i < argc; ++i) {
    if (rank != 0 && std::strncmp(argv[i], "--benchmark_out", 15) == 0) continue;
    arguments.push_back(argv[i]);
  }
  int count = static_cast<int>(arguments.size());
  benchmark::Initialize(&count, arguments.data());
  npu::set_device(rank % npu::device_count());
  init_process_group();
  register_benchmarks(get_world_size(), rank);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  barrier();
  destroy_process_group();
  int status = 0;
  for (pid_t child : children) {
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 1;
  }
  benchmark::Shutdown();
  return status;
}

// Times one iteration on every rank and returns the slowest rank's seconds.
template <typename Op>
double timed_max_over_ranks(Op&& op) {
  barrier();
  const auto start = std::chrono::steady_clock::now();
  op();
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tensor slowest = full({1}, mine, kFloat64);
  all_reduce(slowest, ReduceOp::MAX);
  return slowest.data_ptr<double>()[0];
}

// Fixed iteration counts (same on every rank): about 0.2 s of copying per benchmark.
inline int64_t iterations_for(int64_t bytes) {
  const int64_t target = (int64_t{1} << 32) / std::max<int64_t>(bytes, 1);
  return std::clamp<int64_t>(target, 5, 2000);
}

// "linear": rank r gets r + 1 shares of `total` elements (the remainder goes to the last rank).
inline std::vector<int64_t> linear_splits(int64_t total, int world) {
  const int64_t shares = static_cast<int64_t>(world) * (world + 1) / 2;
  const int64_t share = total / shares;
  std::vector<int64_t> splits(static_cast<size_t>(world));
  int64_t used = 0;
  for (int r = 0; r < world; ++r) {
    splits[static_cast<size_t>(r)] = share * (r + 1);
    used += splits[static_cast<size_t>(r)];
  }
  splits.back() += total - used;
  return splits;
}

}  // namespace shmccl::bench
