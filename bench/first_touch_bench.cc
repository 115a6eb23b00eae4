// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What a page of a shared segment costs the first time a process touches it through its own
// mapping, as a rank does with each page of a peer's arena it copies to or from. The owner has
// written every page already; each iteration maps the segment afresh (untimed) and then writes
// one byte per page, or copies the whole range, through the new mapping. The "warm" variants do
// the same through a mapping already touched. In session 25's PVM guest a cold page cost 11-16 us
// and decided how the work pool shares out chunks (docs/performance.md, "Cold pages").
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace {

constexpr size_t kPage = 4096;

class Segment {
 public:
  explicit Segment(size_t bytes) : bytes_(bytes), fd_(memfd_create("shmccl-first-touch", 0)) {
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      throw std::runtime_error("memfd_create/ftruncate failed");
    }
    Mapping owner(*this);
    std::memset(owner.data(), 1, bytes);  // the owner's pages exist before any peer maps them
  }
  ~Segment() { close(fd_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  class Mapping {
   public:
    explicit Mapping(const Segment& segment) : bytes_(segment.bytes_) {
      void* address = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, segment.fd_, 0);
      if (address == MAP_FAILED) throw std::runtime_error("mmap failed");
      data_ = static_cast<char*>(address);
    }
    ~Mapping() { munmap(data_, bytes_); }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    char* data() const { return data_; }

   private:
    size_t bytes_;
    char* data_;
  };

 private:
  size_t bytes_;
  int fd_;
};

void touch_pages(char* data, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += kPage) {
    *static_cast<volatile char*>(data + offset) = 2;
  }
}

// Runs `access` once per iteration through a mapping made afresh for it (cold; mapped and
// unmapped outside the timed part) or through `warm`, and returns the seconds timed in all.
template <typename Access>
double run_iterations(benchmark::State& state, const Segment& segment, const Segment::Mapping& warm,
                      Access&& access) {
  const bool cold = state.range(0) != 0;
  double seconds = 0;
  for (auto _ : state) {
    std::unique_ptr<Segment::Mapping> fresh;
    if (cold) fresh = std::make_unique<Segment::Mapping>(segment);
    char* data = cold ? fresh->data() : warm.data();
    const auto start = std::chrono::steady_clock::now();
    access(data);
    benchmark::ClobberMemory();
    const auto stop = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(stop - start).count();
    seconds += elapsed;
    state.SetIterationTime(elapsed);
  }
  return seconds;
}

size_t mebibytes(const benchmark::State& state) {
  return static_cast<size_t>(state.range(1)) << 20;
}

// Time per page of a write to each page, through a fresh mapping (cold) or a touched one (warm).
void BM_TouchPerPage(benchmark::State& state) {
  const size_t bytes = mebibytes(state);
  Segment segment(bytes);
  Segment::Mapping warm(segment);
  touch_pages(warm.data(), bytes);
  const double seconds =
      run_iterations(state, segment, warm, [bytes](char* data) { touch_pages(data, bytes); });
  const double pages = static_cast<double>(bytes / kPage) * static_cast<double>(state.iterations());
  state.counters["us_per_page"] = seconds * 1e6 / pages;
}
BENCHMARK(BM_TouchPerPage)
    ->ArgNames({"cold", "MiB"})
    ->Args({1, 256})
    ->Args({0, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// A copy of the whole range from private memory into a fresh mapping (cold) or a touched one.
void BM_CopyInto(benchmark::State& state) {
  const size_t bytes = mebibytes(state);
  Segment segment(bytes);
  std::vector<char> source(bytes, 5);
  Segment::Mapping warm(segment);
  std::memcpy(warm.data(), source.data(), bytes);
  run_iterations(state, segment, warm,
                 [&source, bytes](char* data) { std::memcpy(data, source.data(), bytes); });
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_CopyInto)
    ->ArgNames({"cold", "MiB"})
    ->Args({1, 256})
    ->Args({0, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
