// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Transport primitives, between real processes:
//   BM_FutexRoundTrip/spin:N   ping-pong of a shared word with a forked peer; each side spins N
//                              times before sleeping on the futex (0: every hop is a futex
//                              wake -> wakeup). Time per round trip (two hops).
//   BM_StoreSet/GetHit/Add     ShmStore operations in one process (bytes = value size).
//   BM_StoreRoundTrip          set -> blocked get in a forked peer -> set back -> get.
//   BM_PeerDeathLatency        SIGKILL of a child -> PeerMonitor callback (manual time).
//
//   shmccl_transport_bench [--benchmark_format=json]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include <benchmark/benchmark.h>

#include "transport/futex.h"
#include "transport/peer_monitor.h"
#include "transport/segment_names.h"
#include "transport/shm_segment.h"
#include "transport/shm_store.h"

namespace shmccl::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kStop = UINT32_MAX;

// Waits until *word == target: `spins` polls, then futex sleeps.
void await(std::atomic<uint32_t>* word, uint32_t target, int spins) {
  for (int i = 0; i < spins; ++i) {
    if (word->load(std::memory_order_acquire) == target) return;
  }
  for (uint32_t seen; (seen = word->load(std::memory_order_acquire)) != target;) {
    if (seen == kStop) return;
    futex_wait(word, seen, std::chrono::seconds(5));
  }
}

void post(std::atomic<uint32_t>* word, uint32_t value) {
  word->store(value, std::memory_order_release);
  futex_wake(word, 1);
}

// What one `pause` costs on this CPU: the waits' polling loops are shaped by it
// (transport/group_transport.h).
void BM_Pause(benchmark::State& state) {
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i)
      __builtin_ia32_pause();
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_Pause);

void BM_FutexRoundTrip(benchmark::State& state) {
  const int spins = static_cast<int>(state.range(0));
  ShmSegment segment = ShmSegment::create(segment_name("bench" + random_token(), "futex"), 4096);
  auto* ping = static_cast<std::atomic<uint32_t>*>(segment.data());
  auto* pong = ping + 16;  // another cache line
  const pid_t peer = ::fork();
  if (peer == 0) {
    for (uint32_t round = 1;; ++round) {
      await(ping, round, spins);
      if (ping->load() == kStop) ::_exit(0);
      post(pong, round);
    }
  }
  uint32_t round = 0;
  for (auto _ : state) {
    ++round;
    post(ping, round);
    await(pong, round, spins);
  }
  post(ping, kStop);
  ::waitpid(peer, nullptr, 0);
  state.SetLabel("round trip = 2 hops between processes");
}
BENCHMARK(BM_FutexRoundTrip)->ArgName("spin")->Arg(0)->Arg(1000)->UseRealTime();

// One store per benchmark run, removed at the end.
struct BenchStore {
  BenchStore() : ns("bench" + random_token()), store(ShmStore::open_or_create(ns)) {}
  ~BenchStore() { store->unlink(); }
  std::string ns;
  std::unique_ptr<ShmStore> store;
};

void BM_StoreSet(benchmark::State& state) {
  BenchStore bench;
  const std::string value(static_cast<size_t>(state.range(0)), 'v');
  for (auto _ : state)
    bench.store->set("bench/key", value);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_StoreSet)->ArgName("bytes")->Arg(8)->Arg(4096);

void BM_StoreGetHit(benchmark::State& state) {
  BenchStore bench;
  bench.store->set("bench/key", std::string(static_cast<size_t>(state.range(0)), 'v'));
  for (int i = 0; i < 500; ++i)
    bench.store->set("filler/" + std::to_string(i), "x");  // half full
  for (auto _ : state)
    benchmark::DoNotOptimize(bench.store->get("bench/key"));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_StoreGetHit)->ArgName("bytes")->Arg(8)->Arg(4096);

void BM_StoreAdd(benchmark::State& state) {
  BenchStore bench;
  for (auto _ : state)
    benchmark::DoNotOptimize(bench.store->add("bench/counter", 1));
}
BENCHMARK(BM_StoreAdd);

void BM_StoreRoundTrip(benchmark::State& state) {
  BenchStore bench;
  const std::string ns = bench.ns;
  const pid_t peer = ::fork();
  if (peer == 0) {
    auto store = ShmStore::open_or_create(ns);
    for (;;) {
      const std::string value = store->get("ping");
      store->delete_key("ping");
      if (value == "stop") ::_exit(0);
      store->set("pong", value);
    }
  }
  for (auto _ : state) {
    bench.store->set("ping", "x");
    benchmark::DoNotOptimize(bench.store->get("pong"));
    bench.store->delete_key("pong");
  }
  bench.store->set("ping", "stop");
  ::waitpid(peer, nullptr, 0);
}
BENCHMARK(BM_StoreRoundTrip)->UseRealTime();

void BM_PeerDeathLatency(benchmark::State& state) {
  PeerMonitor& monitor = PeerMonitor::instance();
  std::mutex mutex;
  std::condition_variable died;
  for (auto _ : state) {
    const pid_t child = ::fork();
    if (child == 0) {
      for (;;)
        ::pause();
    }
    std::optional<Clock::time_point> death;
    const auto id = monitor.watch(child, [&](pid_t) {
      std::lock_guard lock(mutex);
      death = Clock::now();
      died.notify_all();
    });
    const auto killed = Clock::now();
    ::kill(child, SIGKILL);
    {
      std::unique_lock lock(mutex);
      const bool fired =
          died.wait_for(lock, std::chrono::seconds(2), [&] { return death.has_value(); });
      if (fired) state.SetIterationTime(std::chrono::duration<double>(*death - killed).count());
    }
    monitor.unwatch(id);  // no-op when it fired; otherwise `death` must not outlive this scope
    ::waitpid(child, nullptr, 0);
    if (!death) {
      state.SkipWithError("no death callback within 2 s");
      break;
    }
  }
}
BENCHMARK(BM_PeerDeathLatency)->UseManualTime()->Iterations(200)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shmccl::transport

BENCHMARK_MAIN();
