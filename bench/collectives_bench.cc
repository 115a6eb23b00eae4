// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Collective benchmarks, reported as nccl-tests does: time, algbw, busbw (GB/s), and busbw as a
// fraction of this machine's memcpy rate at the same size (measured by this binary, rank 0 alone).
//   SHMCCL_BENCH_RANKS=4 shmccl_collectives_bench --benchmark_filter=AllGather
//   shmrun --nproc-per-node 4 shmccl_collectives_bench
// Sizes (nccl-tests' meaning): all-gather = output bytes per rank, reduce-scatter = input bytes
// per rank, all-reduce and broadcast = buffer bytes. Uneven splits: rank r gets r + 1 shares.
#include <algorithm>
#include <cstring>
#include <map>

#include "bench_launch.h"
#include "collectives/group_state.h"

namespace shmccl::bench {
namespace {

std::map<int64_t, double> g_memcpy_gbps;  // rank 0's memcpy rate per size

double memcpy_rate(int64_t bytes) {
  std::vector<char> source(static_cast<size_t>(bytes), 1), destination(static_cast<size_t>(bytes));
  const int64_t iterations = iterations_for(bytes);
  std::memcpy(destination.data(), source.data(), static_cast<size_t>(bytes));  // warm up
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    std::memcpy(destination.data(), source.data(), static_cast<size_t>(bytes));
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes) * static_cast<double>(iterations) / seconds / 1e9;
}

enum class Op { kAllGatherUneven, kReduceScatterUneven, kAllReduce, kBroadcast };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllGatherUneven:
      return "AllGatherUneven";
    case Op::kReduceScatterUneven:
      return "ReduceScatterUneven";
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kBroadcast:
      return "Broadcast";
  }
  return "?";
}

double bus_factor(Op op, int world) {
  const double n = world;
  switch (op) {
    case Op::kAllGatherUneven:
    case Op::kReduceScatterUneven:
      return (n - 1) / n;
    case Op::kAllReduce:
      return 2 * (n - 1) / n;
    case Op::kBroadcast:
      return 1;
  }
  return 1;
}

void run_collective(benchmark::State& state, Op op, int64_t bytes, bool on_npu, ScalarType dtype,
                    int world, int rank) {
  const Device device = on_npu ? Device::npu(npu::current_device()) : Device::cpu();
  const int64_t element = static_cast<int64_t>(element_size(dtype));
  const int64_t count = std::max<int64_t>(bytes / element, world);
  const auto splits = linear_splits(count, world);
  Tensor input, output;
  switch (op) {
    case Op::kAllGatherUneven:
      input = ones({splits[static_cast<size_t>(rank)]}, dtype, device);
      output = zeros({count}, dtype, device);
      break;
    case Op::kReduceScatterUneven:
      input = ones({count}, dtype, device);
      output = zeros({splits[static_cast<size_t>(rank)]}, dtype, device);
      break;
    case Op::kAllReduce:
    case Op::kBroadcast:
      input = ones({count}, dtype, device);
      break;
  }
  auto once = [&] {
    switch (op) {
      case Op::kAllGatherUneven:
        all_gather_into_tensor_uneven(output, input, splits);
        break;
      case Op::kReduceScatterUneven:
        reduce_scatter_tensor_uneven(output, input, splits);
        break;
      case Op::kAllReduce:
        all_reduce(input);
        break;
      case Op::kBroadcast:
        broadcast(input, 0);
        break;
    }
  };
  once();  // warm up: maps peers' arenas, faults pages in
  once();
  for (auto _ : state)
    state.SetIterationTime(timed_max_over_ranks(once));
  const double real_bytes = static_cast<double>(count * element);
  state.SetBytesProcessed(static_cast<int64_t>(real_bytes) * state.iterations());
  state.counters["algbw_GBps"] =
      benchmark::Counter(real_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw_GBps"] = benchmark::Counter(real_bytes * bus_factor(op, world) / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["memcpy_GBps"] = g_memcpy_gbps[bytes];
  state.counters["ranks"] = world;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// The flight recorder's cost on the smallest collectives, in one run: blocks of kBlock collectives
// with the recorder active and suspended alternate in the same processes on the same buffers
// (the machine's drift hits both alike); the counters are the medians per collective, the
// slowest rank's, in microseconds, and the overhead in percent.
void run_recorder_overhead(benchmark::State& state, Op op, int world, int rank) {
  constexpr int kBlock = 200;
  const int64_t count = std::max<int64_t>(8 / 4, world);
  const auto splits = linear_splits(count, world);
  const Device device = Device::npu(npu::current_device());
  Tensor gather_in = ones({splits[static_cast<size_t>(rank)]}, kFloat32, device);
  Tensor gather_out = zeros({count}, kFloat32, device);
  Tensor full_buffer = ones({count}, kFloat32, device);
  Tensor scatter_out = zeros({splits[static_cast<size_t>(rank)]}, kFloat32, device);
  auto once = [&] {
    switch (op) {
      case Op::kAllGatherUneven:
        all_gather_into_tensor_uneven(gather_out, gather_in, splits);
        break;
      case Op::kReduceScatterUneven:
        reduce_scatter_tensor_uneven(scatter_out, full_buffer, splits);
        break;
      case Op::kAllReduce:
        all_reduce(full_buffer);
        break;
      case Op::kBroadcast:
        broadcast(full_buffer, 0);
        break;
    }
  };
  detail::GroupState& group = default_group()->state();
  std::vector<double> on, off;
  int64_t round = 0;
  for (int i = 0; i < 20; ++i)
    once();
  for (auto _ : state) {
    double both = 0;
    // Alternate which half goes first, so that an order effect cancels out.
    const bool first = (round++ % 2) == 0;
    for (bool active : {first, !first}) {
      group.set_trace_active(active);
      const double seconds = timed_max_over_ranks([&] {
        for (int i = 0; i < kBlock; ++i)
          once();
      });
      (active ? on : off).push_back(seconds / kBlock * 1e6);
      both += seconds;
    }
    state.SetIterationTime(both / (2 * kBlock));
  }
  group.set_trace_active(true);
  state.counters["recorder_on_us"] = median(on);
  state.counters["recorder_off_us"] = median(off);
  state.counters["overhead_pct"] = (median(on) / median(off) - 1) * 100;
  state.counters["ranks"] = world;
}

void register_all(int world, int rank) {
  for (Op op : {Op::kAllGatherUneven, Op::kReduceScatterUneven, Op::kAllReduce}) {
    // Not "/npu/" nor "<op>/<variant>/ranks:": run_comparison.sh and compare.py skip it.
    const std::string name = std::string("BM_RecorderOverhead/") + op_name(op) +
                             ":npu:8B/ranks:" + std::to_string(world);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [=](benchmark::State& state) { run_recorder_overhead(state, op, world, rank); })
        ->Iterations(400)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  std::vector<int64_t> sizes;
  for (int64_t size = 8; size <= (int64_t{128} << 20); size *= 4)
    sizes.push_back(size);
  sizes.push_back(int64_t{256} << 20);
  // The memcpy limit, measured once per size by rank 0 while the others wait.
  for (int64_t size : sizes) {
    double rate = 0;
    if (rank == 0) rate = memcpy_rate(size);
    Tensor shared = full({1}, rate, kFloat64);
    broadcast(shared, 0);
    g_memcpy_gbps[size] = shared.data_ptr<double>()[0];
  }
  for (Op op : {Op::kAllGatherUneven, Op::kReduceScatterUneven, Op::kAllReduce, Op::kBroadcast}) {
    for (bool on_npu : {true, false}) {
      for (int64_t size : sizes) {
        const std::string name = std::string("BM_") + op_name(op) + (on_npu ? "/npu" : "/host") +
                                 "/ranks:" + std::to_string(world) +
                                 "/bytes:" + std::to_string(size);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& state) {
                                       run_collective(state, op, size, on_npu, kFloat32, world,
                                                      rank);
                                     })
            ->Iterations(iterations_for(size))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace shmccl::bench

int main(int argc, char** argv) {
  return shmccl::bench::run_multiprocess_benchmarks(argc, argv, shmccl::bench::register_all);
}
