// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Multi-process Google Benchmark support for shmccl: every rank runs the same benchmarks in
// lockstep and times itself; the measurement method is bench_method.h's (the median over ranks
// and repetitions). Only rank 0 reports and writes --benchmark_out. Under shmrun the ranks come
// from the environment; run directly, the binary forks SHMCCL_BENCH_RANKS ranks itself
// (default 2).
#pragma once

#include <benchmark/benchmark.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_method.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::bench {

// bench_method.h's view of the default group (see RankComm). Not thread-safe.
class ShmcclComm {
 public:
  void barrier() { shmccl::barrier(); }
  void idle_barrier() {
    auto work = shmccl::barrier(nullptr, /*async_op=*/true);
    while (!work->is_completed())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    work->wait();
  }
  double max(double value) {
    Tensor tensor = full({1}, value, kFloat64);
    all_reduce(tensor, ReduceOp::MAX);
    return tensor.data_ptr<double>()[0];
  }
  std::vector<double> all_gather(const std::vector<double>& mine) {
    Tensor input = from_vector(mine);
    Tensor output = empty({input.numel() * get_world_size()}, kFloat64);
    all_gather_into_tensor(output, input);
    return output.to_vector<double>();
  }
};

// Forks SHMCCL_BENCH_RANKS - 1 children (when not launched by shmrun) and sets the environment
// init_process_group reads. Returns this process's rank; the parent gets the children's pids.
inline int fork_ranks(std::vector<pid_t>& children) {
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
  return rank;
}

// SHMCCL_BENCH_PIN=1 pins rank r to core r % cores (as mpirun binds). Off by default, as it has
// been since pinned ranks showed 30x worse tail latency on this 2-vCPU VM (each then judged the
// group oversubscribed from its own one-CPU mask, fixed since: docs/performance.md).
inline void maybe_pin(int rank) {
  if (std::getenv("SHMCCL_BENCH_PIN") == nullptr) return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cores.push_back(cpu);
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CPU_SET(cores[static_cast<size_t>(rank) % cores.size()], &mine);
  sched_setaffinity(0, sizeof(mine), &mine);
}

// Starts the ranks, initializes Google Benchmark and the default group, calls
// register_benchmarks(options, world, rank), then runs the benchmarks. Returns main's exit code.
template <typename Register>
int run_multiprocess_benchmarks(int argc, char** argv, Register&& register_benchmarks) {
  std::vector<char*> arguments(argv, argv + argc);
  arguments.push_back(nullptr);
  int count = argc;
  const Options options = parse_options(&count, arguments.data());  // exits on a bad flag
  std::vector<pid_t> children;
  if (std::getenv("RANK") == nullptr) {
    maybe_pin(fork_ranks(children));
  }
  const int rank = std::atoi(std::getenv("RANK"));
  keep_output_on_rank0(rank, &count, arguments.data());
  benchmark::Initialize(&count, arguments.data());
  int status = 0;
  if (benchmark::ReportUnrecognizedArguments(count, arguments.data())) {
    status = 2;
  } else {
    npu::set_device(rank % npu::device_count());
    init_process_group();
    benchmark::AddCustomContext("library", "shmccl");
    benchmark::AddCustomContext("library_version", version());
    add_method_context(options, get_world_size());
    add_affinity_context();
    register_benchmarks(options, get_world_size(), rank);
    if (rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      NullReporter quiet;
      benchmark::RunSpecifiedBenchmarks(&quiet);
    }
    barrier();
    destroy_process_group();
  }
  for (pid_t child : children) {
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 1;
  }
  benchmark::Shutdown();
  return status;
}

}  // namespace shmccl::bench
