// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Host<->device copy bandwidth of the simulated NPU against plain memcpy of the same size: the
// device layer should add nothing but a stream-order check to a copy.
//   shmccl_device_copy_bench --benchmark_filter=bytes:1048576
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "shmccl/shmccl.hpp"

namespace {

using shmccl::Device;
using shmccl::Tensor;

void set_bytes(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<char> source(static_cast<size_t>(state.range(0)), 1);
  std::vector<char> destination(source.size());
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), source.size());
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state);
}

void BM_HostToDevice(benchmark::State& state) {
  Tensor host = shmccl::ones({state.range(0)}, shmccl::kUInt8);
  Tensor device = shmccl::empty({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  for (auto _ : state)
    device.copy_(host);
  set_bytes(state);
}

void BM_DeviceToHost(benchmark::State& state) {
  Tensor device = shmccl::ones({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  Tensor host = shmccl::empty({state.range(0)}, shmccl::kUInt8);
  for (auto _ : state)
    host.copy_(device);
  set_bytes(state);
}

// `.cpu()`, as a caller reading a result does: a new host tensor per call, whose pages the copy
// touches first (their faults are part of what the caller waits for).
void BM_DeviceToNewHost(benchmark::State& state) {
  Tensor device = shmccl::ones({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  for (auto _ : state) {
    Tensor host = device.cpu();
    benchmark::DoNotOptimize(host.data_ptr());
  }
  set_bytes(state);
}

// A new zero-filled host tensor per call: allocation and first touch.
void BM_HostZeros(benchmark::State& state) {
  for (auto _ : state) {
    Tensor host = shmccl::zeros({state.range(0)}, shmccl::kUInt8);
    benchmark::DoNotOptimize(host.data_ptr());
  }
  set_bytes(state);
}

void BM_DeviceToDevice(benchmark::State& state) {
  Tensor source = shmccl::ones({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  Tensor destination = shmccl::empty({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  destination.copy_(source);
  shmccl::npu::synchronize(0);
  for (auto _ : state) {
    destination.copy_(source);  // queued on the stream
    shmccl::npu::synchronize(0);
  }
  set_bytes(state);
}

void BM_HostToDeviceAsync(benchmark::State& state) {
  Tensor host = shmccl::ones({state.range(0)}, shmccl::kUInt8);
  Tensor device = shmccl::empty({state.range(0)}, shmccl::kUInt8, Device::npu(0));
  device.copy_(host);
  for (auto _ : state) {
    device.copy_(host, /*non_blocking=*/true);
    shmccl::npu::synchronize(0);
  }
  set_bytes(state);
}

// Real time: queued copies run on the stream's worker thread, not on the timing thread.
void sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgName("bytes")->UseRealTime();
  for (int64_t bytes : {4096L, 65536L, 1L << 20, 16L << 20, 256L << 20})
    benchmark->Arg(bytes);
}

BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK(BM_HostToDevice)->Apply(sizes);
BENCHMARK(BM_DeviceToHost)->Apply(sizes);
BENCHMARK(BM_DeviceToNewHost)->Apply(sizes);
BENCHMARK(BM_HostZeros)->Apply(sizes);
BENCHMARK(BM_DeviceToDevice)->Apply(sizes);
BENCHMARK(BM_HostToDeviceAsync)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
