// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What one small synchronous collective costs its caller, with no peer to wait for: a group of
// one rank, 8-byte NPU tensors, calls back to back. This is the floor of every small call (a
// broadcast's root, a reduce-scatter rank that receives nothing, each rank's share of a tiny
// all-reduce) and it is instructions and locked read-modify-writes, not line transfers.
// Built twice: shmccl_call_overhead_bench links libshmccl.a, as the other benchmarks do, and
// shmccl_call_overhead_shared_bench links libshmccl.so, as applications do (the two must read
// alike: a shared library that calls its own functions through its PLT did not).
//
// `--loop=OP:N` instead makes exactly N calls of OP (broadcast, all_reduce, all_gather,
// reduce_scatter, barrier) and exits: bench/call_instructions.sh counts the instructions of a call
// with it under callgrind, a figure that does not move with the VM's modes as times do.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shmccl/shmccl.hpp"

namespace {

// One group of one rank for the whole run (its job id is this process's).
void ensure_group() {
  if (shmccl::is_initialized()) return;
  shmccl::InitOptions options;
  options.rank = 0;
  options.world_size = 1;
  options.job_id = "call-overhead-" + std::to_string(getpid());
  shmccl::init_process_group(options);
  shmccl::npu::set_device(0);
}

void BM_Broadcast(benchmark::State& state) {
  ensure_group();
  shmccl::Tensor tensor = shmccl::ones({2}, shmccl::kFloat32).npu();
  for (auto _ : state)
    shmccl::broadcast(tensor, 0);
}
BENCHMARK(BM_Broadcast)->Name("BM_CallOverhead/broadcast/8");

void BM_AllReduce(benchmark::State& state) {
  ensure_group();
  shmccl::Tensor tensor = shmccl::ones({2}, shmccl::kFloat32).npu();
  for (auto _ : state)
    shmccl::all_reduce(tensor);
}
BENCHMARK(BM_AllReduce)->Name("BM_CallOverhead/all_reduce/8");

// `call(output, input, split_sizes)` on one rank's whole tensor: the uneven forms' argument checks
// and split bookkeeping included.
template <typename Call>
void run_uneven(benchmark::State& state, Call call) {
  ensure_group();
  shmccl::Tensor input = shmccl::ones({2}, shmccl::kFloat32).npu();
  shmccl::Tensor output = shmccl::zeros({2}, shmccl::kFloat32).npu();
  const std::vector<int64_t> split_sizes{2};
  for (auto _ : state)
    call(output, input, split_sizes);
}

void BM_AllGatherUneven(benchmark::State& state) {
  run_uneven(state, [](shmccl::Tensor& output, const shmccl::Tensor& input,
                       const std::vector<int64_t>& split_sizes) {
    shmccl::all_gather_into_tensor_uneven(output, input, split_sizes);
  });
}
BENCHMARK(BM_AllGatherUneven)->Name("BM_CallOverhead/all_gather_into_tensor_uneven/8");

void BM_ReduceScatterUneven(benchmark::State& state) {
  run_uneven(state, [](shmccl::Tensor& output, const shmccl::Tensor& input,
                       const std::vector<int64_t>& split_sizes) {
    shmccl::reduce_scatter_tensor_uneven(output, input, split_sizes);
  });
}
BENCHMARK(BM_ReduceScatterUneven)->Name("BM_CallOverhead/reduce_scatter_tensor_uneven/8");

// The calls of --loop=OP:N; false for an unknown OP.
bool loop(const std::string& op, long count) {
  ensure_group();
  shmccl::Tensor input = shmccl::ones({2}, shmccl::kFloat32).npu();
  shmccl::Tensor output = shmccl::zeros({2}, shmccl::kFloat32).npu();
  const std::vector<int64_t> split_sizes{2};
  if (op == "broadcast") {
    for (long i = 0; i < count; ++i)
      shmccl::broadcast(input, 0);
  } else if (op == "all_reduce") {
    for (long i = 0; i < count; ++i)
      shmccl::all_reduce(input);
  } else if (op == "all_gather") {
    for (long i = 0; i < count; ++i)
      shmccl::all_gather_into_tensor_uneven(output, input, split_sizes);
  } else if (op == "reduce_scatter") {
    for (long i = 0; i < count; ++i)
      shmccl::reduce_scatter_tensor_uneven(output, input, split_sizes);
  } else if (op == "barrier") {
    for (long i = 0; i < count; ++i)
      shmccl::barrier();
  } else {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kLoop = "--loop=";
  if (argc == 2 && std::strncmp(argv[1], kLoop, std::strlen(kLoop)) == 0) {
    const std::string spec = argv[1] + std::strlen(kLoop);
    const size_t colon = spec.find(':');
    const bool ran = colon != std::string::npos &&
                     loop(spec.substr(0, colon), std::atol(spec.c_str() + colon + 1));
    if (shmccl::is_initialized()) shmccl::destroy_process_group();
    if (!ran)
      std::fprintf(stderr,
                   "usage: %s --loop=OP:N (OP: broadcast, all_reduce, "
                   "all_gather, reduce_scatter, barrier)\n",
                   argv[0]);
    return ran ? 0 : 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (shmccl::is_initialized()) shmccl::destroy_process_group();
  return 0;
}
