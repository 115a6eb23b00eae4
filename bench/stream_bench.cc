// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Latency and throughput of the simulated NPU's streams and events: what a collective pays to
// hand work to a stream and learn that it finished. Real time throughout (the work happens on
// the stream's worker thread, not the benchmark's).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "device/stream_impl.h"
#include "shmccl/npu.hpp"

namespace {

using shmccl::npu::Event;
using shmccl::npu::Stream;
using shmccl::npu::detail::StreamImpl;

std::shared_ptr<StreamImpl> make_impl(uint64_t id) {
  return std::make_shared<StreamImpl>(0, id);
}

// One empty task handed to the worker, then synchronize(): the full hand-off round trip.
void BM_StreamEnqueueSynchronize(benchmark::State& state) {
  auto stream = make_impl(1);
  for (auto _ : state) {
    stream->enqueue([] {});
    stream->synchronize();
  }
}
BENCHMARK(BM_StreamEnqueueSynchronize)->Name("BM_Stream/EnqueueSynchronize")->UseRealTime();

// run_sync on an idle stream: runs inline, no hand-off.
void BM_StreamRunSyncIdle(benchmark::State& state) {
  auto stream = make_impl(1);
  int value = 0;
  const std::function<void()> task = [&value] { benchmark::DoNotOptimize(++value); };
  for (auto _ : state)
    stream->run_sync(task);
}
BENCHMARK(BM_StreamRunSyncIdle)->Name("BM_Stream/RunSyncIdle")->UseRealTime();

// run_sync behind one queued task: the queued path (hand-off and wait).
void BM_StreamRunSyncBusy(benchmark::State& state) {
  auto stream = make_impl(1);
  const std::function<void()> task = [] {};
  for (auto _ : state) {
    stream->enqueue([] {});
    stream->run_sync(task);
  }
}
BENCHMARK(BM_StreamRunSyncBusy)->Name("BM_Stream/RunSyncBusy")->UseRealTime();

// Event record + synchronize behind one queued task (the marker runs on the worker).
void BM_EventRecordSynchronize(benchmark::State& state) {
  Stream stream(make_impl(1));
  Event event;
  for (auto _ : state) {
    stream.impl()->enqueue([] {});
    event.record(stream);
    event.synchronize();
  }
}
BENCHMARK(BM_EventRecordSynchronize)->Name("BM_Event/RecordSynchronize")->UseRealTime();

// Event record + synchronize on an idle stream: completes at once.
void BM_EventRecordSynchronizeIdle(benchmark::State& state) {
  Stream stream(make_impl(1));
  Event event;
  for (auto _ : state) {
    event.record(stream);
    event.synchronize();
  }
}
BENCHMARK(BM_EventRecordSynchronizeIdle)->Name("BM_Event/RecordSynchronizeIdle")->UseRealTime();

// Stream B waits for an event recorded on A behind a task: two hand-offs and a cross-thread wake.
void BM_EventCrossStreamWait(benchmark::State& state) {
  Stream a(make_impl(1));
  Stream b(make_impl(2));
  Event event;
  for (auto _ : state) {
    a.impl()->enqueue([] {});
    event.record(a);
    b.wait_event(event);
    b.impl()->enqueue([] {});
    b.synchronize();
  }
}
BENCHMARK(BM_EventCrossStreamWait)->Name("BM_Event/CrossStreamWait")->UseRealTime();

// Many small tasks, one synchronize: the worker's sustained rate.
void BM_StreamThroughput(benchmark::State& state) {
  auto stream = make_impl(1);
  const int64_t tasks = state.range(0);
  int64_t sum = 0;  // touched only by the worker's tasks, read after synchronize()
  for (auto _ : state) {
    for (int64_t i = 0; i < tasks; ++i)
      stream->enqueue([&sum, i] { sum += i; });
    stream->synchronize();
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * tasks);
}
BENCHMARK(BM_StreamThroughput)
    ->Name("BM_Stream/Throughput")
    ->Arg(1000)
    ->Arg(100000)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
