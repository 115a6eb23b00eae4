// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What the first collectives on fresh NPU tensors cost, call by call: the benchmarks' method
// (a check call and a warm-up before the timed ones) hides exactly this. Each rank allocates and
// fills an input and an output of SIZE bytes of output per rank, then runs CALLS times "barrier;
// one timed call" of OP. Rank 0 prints the allocation time, the first three calls, and the median
// and minimum of the rest (the slowest rank's time per call: an all-gather's maximum over ranks).
//   shmrun --nproc-per-node 8 --standalone -- build/bench/shmccl_first_call 32M 30 all_gather
// OP: all_gather (all_gather_into_tensor, the default), reduce_scatter (reduce_scatter_tensor,
// SUM) or all_reduce (SUM). SIZE takes K and M suffixes.
#include <shmccl/shmccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string suffix = end;
  const double scale = suffix == "K" ? 1024.0 : suffix == "M" ? 1024.0 * 1024.0 : 1.0;
  return static_cast<int64_t>(value * scale);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t bytes = argc > 1 ? parse_size(argv[1]) : 32 << 20;
  const int calls = argc > 2 ? std::max(4, std::atoi(argv[2])) : 30;
  const std::string op = argc > 3 ? argv[3] : "all_gather";
  if (op != "all_gather" && op != "reduce_scatter" && op != "all_reduce") {
    std::fprintf(stderr,
                 "usage: shmccl_first_call [SIZE [CALLS [all_gather|reduce_scatter|"
                 "all_reduce]]]\n");
    return 2;
  }
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  const int world = shmccl::get_world_size();
  shmccl::npu::set_device(rank % shmccl::npu::device_count());
  const int64_t rows = std::max<int64_t>(1, bytes / 4 / world);  // float32 rows per rank

  const auto allocation_start = Clock::now();
  const bool gathers = op == "all_gather";
  const bool scatters = op == "reduce_scatter";
  // A rank's rows in, every rank's out (all-gather); the reverse (reduce-scatter); all of them
  // in place (all-reduce: the output is unused).
  shmccl::Tensor input = shmccl::ones({gathers ? rows : rows * world}, shmccl::kFloat32).npu();
  shmccl::Tensor output = shmccl::zeros({scatters ? rows : rows * world}, shmccl::kFloat32).npu();
  shmccl::npu::synchronize();
  const double allocation_ms = milliseconds_since(allocation_start);

  std::vector<double> times;
  for (int call = 0; call < calls; ++call) {
    shmccl::barrier();
    const auto start = Clock::now();
    if (gathers) {
      shmccl::all_gather_into_tensor(output, input);
    } else if (scatters) {
      shmccl::reduce_scatter_tensor(output, input);
    } else {
      shmccl::all_reduce(input);
    }
    double elapsed = milliseconds_since(start);
    shmccl::Tensor slowest = shmccl::from_vector<float>({static_cast<float>(elapsed)}).npu();
    shmccl::all_reduce(slowest, shmccl::ReduceOp::MAX);
    times.push_back(slowest.cpu().to_vector<float>()[0]);
  }
  if (rank == 0) {
    std::vector<double> rest(times.begin() + 3, times.end());
    std::sort(rest.begin(), rest.end());
    std::printf(
        "%s, %d ranks, %lld bytes of output per rank: allocation %.1f ms; calls 1-3 "
        "%.2f, %.2f, %.2f ms; calls 4-%d median %.3f ms, min %.3f ms\n",
        op.c_str(), world, static_cast<long long>(bytes), allocation_ms, times[0], times[1],
        times[2], calls, rest[rest.size() / 2], rest.front());
  }
  shmccl::destroy_process_group();
  return 0;
}
