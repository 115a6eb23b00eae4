// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmccl's collective benchmarks, reported as nccl-tests does, with the method of bench_method.h
// (median over ranks and repetitions, every result checked once). One benchmark per op, variant
// and size, named BM_<Op>[/<dtype>]/<npu|host>/<sync|async>/<out|in>/<bytes>, e.g.
//   shmrun --nproc-per-node 4 shmccl_collectives_bench --benchmark_filter='BM_AllGatherUneven/npu/'
//   SHMCCL_BENCH_RANKS=2 shmccl_collectives_bench --bench_max_bytes=1M   (forks the ranks itself)
// Sizes have nccl-tests' meaning: all-gather = output bytes per rank, reduce-scatter = input bytes
// per rank, all-reduce and broadcast = buffer bytes. Uneven splits: rank r gets r + 1 shares.
// In place: the all-gather input is the rank's slice of the output; the reduce-scatter output is
// the rank's slice of the input; all-reduce and broadcast are in place by their API.
// Counters: time_us (the median), slowest_us, algbw and busbw (GB/s), limit (busbw / memcpy
// GB/s of rank 0 at the same size, measured by this binary first), memcpy, bytes, ranks, samples.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "bench_launch.h"

namespace shmccl::bench {
namespace {

struct Context {
  ShmcclComm comm;
  Options options;
  Cutoffs cutoffs;
  std::map<int64_t, double> memcpy_gbps;
  int world = 1;
  int rank = 0;
};

Context& context() {
  static Context instance;
  return instance;
}

struct Variant {
  std::string family;
  Collective op;
  ScalarType dtype;
  bool on_npu;
  bool async;
  bool in_place;
};

Device device_of(const Variant& variant) {
  return variant.on_npu ? Device::npu(npu::current_device()) : Device::cpu();
}

// Waits for an asynchronous collective (a synchronous one is complete on return).
void finish(const Variant& variant, const std::shared_ptr<Work>& work) {
  if (variant.async) work->wait();
}

// `count` elements of `dtype` on `device`, element i holding value(first + i).
template <typename Value>
Tensor filled(int64_t count, int64_t first, ScalarType dtype, Device device, Value value) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    values[static_cast<size_t>(i)] = static_cast<float>(value(first + i));
  return from_vector<float>(values).to(dtype).to(device);
}

// Whether element i of `tensor` holds expected(first + i) (read on the host, in its own dtype).
template <typename Expected>
bool holds_each(const Tensor& tensor, int64_t first, Expected expected) {
  if (tensor.numel() == 0) return true;
  return visit_dtype(tensor.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> values = tensor.to_vector<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      const double want =
          static_cast<double>(static_cast<T>(expected(first + static_cast<int64_t>(i))));
      if (static_cast<double>(values[i]) != want) return false;
    }
    return true;
  });
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& splits) {
  std::vector<int64_t> offsets(splits.size(), 0);
  for (size_t r = 1; r < splits.size(); ++r)
    offsets[r] = offsets[r - 1] + splits[r - 1];
  return offsets;
}

Benchmark describe(const Variant& variant, int64_t bytes, int64_t count) {
  const Context& ctx = context();
  Benchmark bench;
  bench.family = variant.family;
  bench.op = variant.op;
  bench.world = ctx.world;
  bench.rank = ctx.rank;
  bench.bytes = bytes;
  bench.real_bytes = count * static_cast<int64_t>(element_size(variant.dtype));
  bench.memcpy_gbps = ctx.memcpy_gbps.at(bytes);
  return bench;
}

// ---- one function per op: buffers with known values, the call, the check ----

void all_gather_uneven(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count =
      element_count(bytes, static_cast<int64_t>(element_size(variant.dtype)), ctx.world);
  const auto splits = linear_splits(count, ctx.world);
  const auto offsets = offsets_of(splits);
  const auto mine = static_cast<size_t>(ctx.rank);
  Tensor output = full({count}, -1, variant.dtype, device_of(variant));
  Tensor input = variant.in_place ? output.narrow(0, offsets[mine], splits[mine])
                                  : empty({splits[mine]}, variant.dtype, device_of(variant));
  input.copy_(filled(splits[mine], 0, variant.dtype, device_of(variant),
                     [&](int64_t i) { return pattern_value(ctx.rank, i); }));
  auto call = [&] {
    finish(variant, all_gather_into_tensor_uneven(output, input, splits, nullptr, variant.async));
  };
  auto check = [&] {
    for (int r = 0; r < ctx.world; ++r) {
      const auto index = static_cast<size_t>(r);
      if (!holds_each(output.narrow(0, offsets[index], splits[index]), 0,
                      [r](int64_t i) { return pattern_value(r, i); })) {
        return false;
      }
    }
    return true;
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe(variant, bytes, count), call,
                check, [] {});
}

void reduce_scatter_uneven(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count =
      element_count(bytes, static_cast<int64_t>(element_size(variant.dtype)), ctx.world);
  const auto splits = linear_splits(count, ctx.world);
  const auto offsets = offsets_of(splits);
  const auto mine = static_cast<size_t>(ctx.rank);
  Tensor input = filled(count, 0, variant.dtype, device_of(variant),
                        [&](int64_t i) { return pattern_value(ctx.rank, i); });
  Tensor output = variant.in_place ? input.narrow(0, offsets[mine], splits[mine])
                                   : full({splits[mine]}, -1, variant.dtype, device_of(variant));
  auto call = [&] {
    finish(variant, reduce_scatter_tensor_uneven(output, input, splits, ReduceOp::SUM, nullptr,
                                                 variant.async));
  };
  auto check = [&] {
    return holds_each(output, offsets[mine], [&](int64_t i) { return pattern_sum(ctx.world, i); });
  };
  // Zeros for timing: repeated in-place sums stay finite.
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe(variant, bytes, count), call,
                check, [&] { input.zero_(); });
}

void all_reduce_in_place(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count =
      element_count(bytes, static_cast<int64_t>(element_size(variant.dtype)), ctx.world);
  Tensor tensor = filled(count, 0, variant.dtype, device_of(variant),
                         [&](int64_t i) { return pattern_value(ctx.rank, i); });
  auto call = [&] { finish(variant, all_reduce(tensor, ReduceOp::SUM, nullptr, variant.async)); };
  auto check = [&] {
    return holds_each(tensor, 0, [&](int64_t i) { return pattern_sum(ctx.world, i); });
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe(variant, bytes, count), call,
                check, [&] { tensor.zero_(); });
}

void broadcast_in_place(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count =
      element_count(bytes, static_cast<int64_t>(element_size(variant.dtype)), ctx.world);
  Tensor tensor = ctx.rank == 0 ? filled(count, 0, variant.dtype, device_of(variant),
                                         [](int64_t i) { return pattern_value(0, i); })
                                : full({count}, -1, variant.dtype, device_of(variant));
  auto call = [&] { finish(variant, broadcast(tensor, 0, nullptr, variant.async)); };
  auto check = [&] { return holds_each(tensor, 0, [](int64_t i) { return pattern_value(0, i); }); };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe(variant, bytes, count), call,
                check, [] {});
}

// The ops: a new one is a function above and a row here.
struct OpRow {
  const char* name;
  Collective op;
  std::vector<ScalarType> dtypes;  // more than one: the dtype is part of the name
  std::vector<bool> in_place;      // the forms the API has
  void (*run)(benchmark::State&, const Variant&, int64_t);
};

const std::vector<OpRow>& op_table() {
  static const std::vector<OpRow> rows = {
      {"AllGatherUneven",
       Collective::kAllGatherUneven,
       {kFloat32},
       {false, true},
       all_gather_uneven},
      {"ReduceScatterUneven",
       Collective::kReduceScatterUneven,
       {kFloat32, kBFloat16},
       {false, true},
       reduce_scatter_uneven},
      {"AllReduce", Collective::kAllReduce, {kFloat32}, {true}, all_reduce_in_place},
      {"Broadcast", Collective::kBroadcast, {kFloat32}, {true}, broadcast_in_place},
  };
  return rows;
}

// Starts what the device layer starts at its first use (the threads of the current and the
// communication stream, the arena's first blocks), so that the warm-up runs after it. Started
// inside the first benchmark instead, with 4 ranks on 2 cores, the ranks that slept while their
// streams started let the scheduler pull a third rank onto one core, and that benchmark ran
// three ranks on one core and one on the other for its first 50-100 ms (sched_switch trace,
// docs/performance.md).
void start_device() {
  Tensor tensor = ones({64}, kFloat32).npu();
  all_reduce(tensor);
  all_reduce(tensor, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();
  (void)tensor.cpu();
}

void register_all(const Options& options, int world, int rank) {
  Context& ctx = context();
  ctx.options = options;
  ctx.world = world;
  ctx.rank = rank;
  ctx.memcpy_gbps = measure_memcpy(ctx.comm, rank, options);
  start_device();
  warm_up(ctx.comm);
  const std::vector<int64_t> all_sizes = sizes(options);
  for (const OpRow& row : op_table()) {
    for (ScalarType dtype : row.dtypes) {
      for (bool on_npu : {true, false}) {
        for (bool async : {false, true}) {
          for (bool in_place : row.in_place) {
            Variant variant{"", row.op, dtype, on_npu, async, in_place};
            variant.family = std::string("BM_") + row.name +
                             (row.dtypes.size() > 1 ? std::string("/") + dtype_name(dtype) : "") +
                             (on_npu ? "/npu" : "/host") + (async ? "/async" : "/sync") +
                             (in_place ? "/in" : "/out");
            auto* bench = benchmark::RegisterBenchmark(
                variant.family.c_str(), [run = row.run, variant](benchmark::State& state) {
                  run(state, variant, state.range(0));
                  npu::empty_cache();  // the next size starts from a clean device
                });
            bench->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
            for (int64_t size : all_sizes)
              bench->Arg(size);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shmccl::bench

int main(int argc, char** argv) {
  return shmccl::bench::run_multiprocess_benchmarks(argc, argv, shmccl::bench::register_all);
}
