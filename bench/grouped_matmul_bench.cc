// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// npu_grouped_mat_mul_all_reduce against what a user would run without it, on every rank at
// once (SHMCCL_BENCH_RANKS ranks, or shmrun's), per shape:
//   onednn   oneDNN's matmul alone: one cached primitive per group, plain weights (float16
//            inputs converted to float32 first: oneDNN 2.6 has no float16 matmul here)
//   gemm     the operator's GEMM part: npu_grouped_matmul (no communication)
//   unfused  npu_grouped_matmul, then all_reduce of each output (the sequence fusion replaces)
//   fused    npu_grouped_mat_mul_all_reduce, comm_turn 0 (the operator pipelines)
//   fused_turn1  the same with comm_turn 1 (one all-reduce after all GEMMs: no overlap)
//   fused_turn4  comm_turn 4: four rounds, each all-reduced on the communication stream while
//            the next round's GEMMs run
// Every iteration starts after a barrier; every rank times it. Counters: us_median, the median
// over ranks and repetitions; us_slowest, the median of each iteration's slowest rank; GFLOP/s per
// rank at us_slowest; and for gemm/fused the ratio of us_slowest to onednn's / unfused's
// measured in the same run.
#include <benchmark/benchmark.h>

#include <omp.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "bench_launch.h"
#include "device/kernels.h"
#include "ops/matmul_engine.h"
#include "shmccl/shmccl.hpp"

namespace shmccl::bench {
namespace {

struct Shape {
  const char* name;
  ScalarType dtype;
  std::vector<std::array<int64_t, 3>> groups;  // m, k (per rank), n
};

std::vector<Shape> shapes() {
  using Dims = std::array<int64_t, 3>;
  const std::vector<Dims> small64(64, Dims{64, 512, 512});
  const std::vector<Dims> moe(8, Dims{256, 2048, 1024});
  return {
      {"seed_fp16", kFloat16, {{32, 256, 32}, {64, 128, 64}}},
      {"seed_bf16", kBFloat16, {{32, 256, 32}, {64, 128, 64}}},
      {"moe_bf16", kBFloat16, moe},
      {"small64_bf16", kBFloat16, small64},
  };
}

struct Inputs {
  std::vector<Tensor> x, w;
  double flops = 0;
};

Inputs make_inputs(const Shape& shape, int rank) {
  Inputs inputs;
  uint64_t seed = 1000 * static_cast<uint64_t>(rank) + 1;
  for (const auto& [m, k, n] : shape.groups) {
    inputs.x.push_back(rand({m, k}, seed++, shape.dtype, -1, 1).npu());
    inputs.w.push_back(rand({k, n}, seed++, shape.dtype, -1, 1).npu());
    inputs.flops += 2.0 * static_cast<double>(m * k * n);
  }
  return inputs;
}

// oneDNN alone, as a user of oneDNN would call it per group.
class OneDnnBaseline {
 public:
  OneDnnBaseline(const Shape& shape, const Inputs& inputs) : inputs_(inputs) {
    using dnnl::memory;
    const bool half = shape.dtype == kFloat16;
    const auto type = shape.dtype == kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
    for (size_t g = 0; g < shape.groups.size(); ++g) {
      const auto [m, k, n] = shape.groups[g];
      memory::desc a({m, k}, type, memory::format_tag::ab);
      memory::desc b({k, n}, type, memory::format_tag::ab);
      memory::desc c({m, n}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine_);
      Group group{dnnl::matmul(pd),
                  a,
                  b,
                  c,
                  {},
                  {},
                  std::vector<float>(m * n),
                  static_cast<double>(m * k * n)};
      if (half) {
        group.a32.resize(static_cast<size_t>(m * k));
        group.b32.resize(static_cast<size_t>(k * n));
      }
      groups_.push_back(std::move(group));
    }
    half_ = half;
  }

  // Threads as the operator chooses them: one for small GEMMs, `threads` for the others.
  void run(int threads) {
    using dnnl::memory;
    for (size_t g = 0; g < groups_.size(); ++g) {
      Group& group = groups_[g];
      omp_set_num_threads(group.macs < 2.0 * 1024 * 1024 ? 1 : threads);
      void* a = inputs_.x[g].data_ptr();
      void* b = inputs_.w[g].data_ptr();
      if (half_) {
        kernels::cast(group.a32.data(), kFloat32, a, kFloat16, group.a32.size());
        kernels::cast(group.b32.data(), kFloat32, b, kFloat16, group.b32.size());
        a = group.a32.data();
        b = group.b32.data();
      }
      memory a_memory(group.a, engine_, a), b_memory(group.b, engine_, b);
      memory c_memory(group.c, engine_, group.out.data());
      group.primitive.execute(
          stream_,
          {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, c_memory}});
    }
    stream_.wait();
  }

 private:
  struct Group {
    dnnl::matmul primitive;
    dnnl::memory::desc a, b, c;
    std::vector<float> a32, b32, out;
    double macs;
  };
  const Inputs& inputs_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::vector<Group> groups_;
  bool half_ = false;
};

// Median seconds of the slowest rank, per (shape, variant), for the ratio counters.
std::map<std::string, double>& medians() {
  static std::map<std::string, double> values;
  return values;
}

template <typename Op>
void measure(benchmark::State& state, const std::string& key, double flops, Op&& op) {
  op();  // warm-up: primitives, weight reorders, allocator blocks
  const int world = get_world_size();
  Tensor mine = zeros({1}, kFloat64);
  Tensor everyone = zeros({world}, kFloat64);
  std::vector<double> slowest, all;
  for (auto _ : state) {
    barrier();
    const auto start = std::chrono::steady_clock::now();
    op();
    mine.data_ptr<double>()[0] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    all_gather_into_tensor(everyone, mine);
    const double* times = everyone.data_ptr<double>();
    all.insert(all.end(), times, times + world);
    slowest.push_back(*std::max_element(times, times + world));
    state.SetIterationTime(slowest.back());
  }
  const auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  // The median over ranks and repetitions (the suite's method), and the median of each
  // iteration's slowest rank (what the ratios use: a collective operator ends with its slowest
  // rank).
  const double slowest_median = median(slowest);
  medians()[key] = slowest_median;
  state.counters["us_median"] = median(all) * 1e6;
  state.counters["us_slowest"] = slowest_median * 1e6;
  state.counters["GFLOPs"] = flops / slowest_median / 1e9;
}

void register_all(const Options& /*options*/, int world, int rank) {
  for (const Shape& shape : shapes()) {
    auto inputs = std::make_shared<Inputs>(make_inputs(shape, rank));
    const std::string base = std::string("BM_GroupedMatmulAllReduce/") + shape.name + "/";
    const double flops = inputs->flops;
    const int64_t iterations = flops > 1e9 ? 20 : (flops > 1e8 ? 50 : 2000);
    const auto add = [&](const std::string& variant, auto op, const char* ratio_to) {
      const std::string key = base + variant;
      benchmark::RegisterBenchmark(key.c_str(),
                                   [=](benchmark::State& state) {
                                     measure(state, key, flops, op);
                                     if (ratio_to != nullptr && medians().count(base + ratio_to)) {
                                       state.counters[std::string("x_") + ratio_to] =
                                           medians()[key] / medians()[base + ratio_to];
                                     }
                                     state.counters["ranks"] = world;
                                   })
          ->UseManualTime()
          ->Iterations(iterations)
          ->Unit(benchmark::kMicrosecond);
    };
    auto baseline = std::make_shared<OneDnnBaseline>(shape, *inputs);
    const int threads = ops::gemm_threads();
    add(
        "onednn", [baseline, threads] { baseline->run(threads); }, nullptr);
    add(
        "gemm", [inputs] { npu_grouped_matmul(inputs->x, inputs->w); }, "onednn");
    add(
        "unfused",
        [inputs] {
          std::vector<Tensor> y = npu_grouped_matmul(inputs->x, inputs->w);
          for (Tensor& t : y)
            all_reduce(t);
        },
        nullptr);
    const std::string hcomm = default_group()->comm_name();
    add(
        "fused", [inputs, hcomm] { npu_grouped_mat_mul_all_reduce(inputs->x, inputs->w, hcomm); },
        "unfused");
    add(
        "fused_turn1",
        [inputs, hcomm] {
          npu_grouped_mat_mul_all_reduce(inputs->x, inputs->w, hcomm, {.comm_turn = 1});
        },
        "unfused");
    add(
        "fused_turn4",
        [inputs, hcomm] {
          npu_grouped_mat_mul_all_reduce(inputs->x, inputs->w, hcomm, {.comm_turn = 4});
        },
        "unfused");
  }
}

}  // namespace
}  // namespace shmccl::bench

int main(int argc, char** argv) {
  return shmccl::bench::run_multiprocess_benchmarks(argc, argv, shmccl::bench::register_all);
}
