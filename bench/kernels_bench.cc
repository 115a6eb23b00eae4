// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Throughput of the device kernels per ISA (the last argument: 0 generic, 1 avx2, 2 avx512): SUM
// reductions of 2 and 8 sources for every dtype, float32 <-> float16/bfloat16 casts, and memcpy /
// kernels::copy of the same sizes as the yardstick. bytes_per_second counts output bytes;
// in_bytes_per_second counts input bytes. Sizes are output bytes (float32 bytes for casts):
// 4 KiB (L1), 1 MiB (L2), 64 MiB (memory, on most machines).
//
//   shmccl_kernels_bench --benchmark_filter='ReduceSum/float32'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device/kernels.h"
#include "shmccl/dtype.hpp"

namespace shmccl::kernels {
namespace {

const std::vector<int64_t> kSizes = {4 << 10, 1 << 20, 64 << 20};
const std::vector<int64_t> kIsas = {static_cast<int64_t>(Isa::kGeneric),
                                    static_cast<int64_t>(Isa::kAvx2),
                                    static_cast<int64_t>(Isa::kAvx512)};

// Buffers reused across runs: first-touch page faults in a fresh buffer would swamp the kernel.
// The fill pattern 0x3C is a small finite value in every float type.
void* buffer(size_t index, size_t bytes) {
  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
  };
  static std::vector<Slot> slots;
  if (slots.size() <= index) slots.resize(index + 1);
  Slot& slot = slots[index];
  if (slot.bytes < bytes) {
    std::free(slot.data);
    slot.data = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    std::memset(slot.data, 0x3C, bytes);
    slot.bytes = bytes;
  }
  return slot.data;
}

// Selects the ISA of the run; false (and the run marked skipped) when the CPU lacks it.
bool use_isa(benchmark::State& state, int64_t isa_arg) {
  const auto isa = static_cast<Isa>(isa_arg);
  if (isa > detected_isa()) {
    state.SkipWithError((std::string(isa_name(isa)) + " is not supported by this CPU").c_str());
    return false;
  }
  set_active_isa(isa);
  state.SetLabel(isa_name(isa));
  return true;
}

void set_rates(benchmark::State& state, int64_t out_bytes, int64_t in_bytes) {
  state.SetBytesProcessed(state.iterations() * out_bytes);
  state.counters["in_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(state.iterations() * in_bytes), benchmark::Counter::kIsRate);
}

// Args: sources, output bytes, ISA.
void BM_ReduceSum(benchmark::State& state, ScalarType type) {
  const int num_srcs = static_cast<int>(state.range(0));
  const int64_t bytes = state.range(1);
  if (!use_isa(state, state.range(2))) return;
  const size_t count = static_cast<size_t>(bytes) / element_size(type);
  std::vector<const void*> srcs;
  for (int s = 0; s < num_srcs; ++s)
    srcs.push_back(buffer(1 + s, bytes));
  void* dst = buffer(0, bytes);
  for (auto _ : state) {
    reduce(ReduceOp::SUM, type, dst, srcs.data(), num_srcs, count);
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, bytes * num_srcs);
  reset_active_isa();
}

// Args: float32 bytes, ISA.
void BM_Cast(benchmark::State& state, ScalarType to, ScalarType from) {
  const int64_t float_bytes = state.range(0);
  if (!use_isa(state, state.range(1))) return;
  const size_t count = static_cast<size_t>(float_bytes) / 4;
  const int64_t in_bytes = static_cast<int64_t>(count * element_size(from));
  const int64_t out_bytes = static_cast<int64_t>(count * element_size(to));
  const void* src = buffer(1, in_bytes);
  void* dst = buffer(0, out_bytes);
  for (auto _ : state) {
    cast(dst, to, src, from, count);
    benchmark::ClobberMemory();
  }
  set_rates(state, out_bytes, in_bytes);
  reset_active_isa();
}

// Args: bytes. The reference for every kernel above.
void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const void* src = buffer(1, bytes);
  void* dst = buffer(0, bytes);
  for (auto _ : state) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, bytes);
}

// Args: bytes, ISA. Streams only above the LLC size.
void BM_Copy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  if (!use_isa(state, state.range(1))) return;
  const void* src = buffer(1, bytes);
  void* dst = buffer(0, bytes);
  for (auto _ : state) {
    copy(dst, src, static_cast<size_t>(bytes));
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, bytes);
  reset_active_isa();
}

const bool kRegistered = [] {
  for (ScalarType type :
       {kBool, kInt8, kUInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    benchmark::RegisterBenchmark((std::string("BM_ReduceSum/") + dtype_name(type)).c_str(),
                                 BM_ReduceSum, type)
        ->ArgsProduct({{2, 8}, kSizes, kIsas})
        ->ArgNames({"srcs", "bytes", "isa"});
  }
  const std::pair<ScalarType, ScalarType> casts[] = {
      {kFloat16, kFloat32}, {kFloat32, kFloat16}, {kBFloat16, kFloat32}, {kFloat32, kBFloat16}};
  for (const auto& [to, from] : casts) {
    const std::string name = std::string("BM_Cast/") + dtype_name(from) + "_to_" + dtype_name(to);
    benchmark::RegisterBenchmark(name.c_str(), BM_Cast, to, from)
        ->ArgsProduct({kSizes, kIsas})
        ->ArgNames({"bytes", "isa"});
  }
  benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->ArgsProduct({kSizes})->ArgNames({"bytes"});
  benchmark::RegisterBenchmark("BM_Copy", BM_Copy)
      ->ArgsProduct({kSizes, kIsas})
      ->ArgNames({"bytes", "isa"});
  return true;
}();

}  // namespace
}  // namespace shmccl::kernels

BENCHMARK_MAIN();
