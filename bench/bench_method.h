// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The measurement method of the collective benchmarks, shared by shmccl_collectives_bench and the
// MPI peer benchmarks so that both sides measure alike by construction (docs/performance.md,
// "Method"). It needs only Google Benchmark and the standard library: the peers do not link
// shmccl. Per benchmark (one op, variant and size):
//   1. one call with known inputs, checked on every rank (a wrong result on any rank skips the
//      benchmark with an error on all of them), then one untimed warm-up call;
//   2. repetitions of "barrier; time one call" on every rank, in batches (min_repetitions, then
//      doubling) until the slowest rank has spent `budget` seconds in them, at least
//      min_repetitions and at most max_repetitions in all;
//   3. the figure is the median of all n * R samples (every rank, every repetition). The median
//      over repetitions of the slowest rank's time is reported beside it (`slowest_us`).
// With calls_per_sample K > 1 (--bench_calls_per_sample), a sample is "barrier; time K calls
// back to back" divided by K: nccl-tests' way (the mean over a loop of iterations), which is
// what a training loop pays. One call after a barrier charges, when ranks outnumber cores, the
// scheduling round that the barrier's release starts to the ranks that run first; back to back,
// that round overlaps the next call.
// A variant whose call took longer than `cutoff` seconds (slowest rank, median) is not run at
// larger sizes (those benchmarks are skipped with a message): that bounds a full run when a peer
// collapses. Every rank runs the same benchmarks in the same order (fixed Iterations(1); every
// decision comes from maxima over ranks, which all ranks share), and only rank 0 reports.
#pragma once

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

namespace shmccl::bench {

enum class Collective { kAllGatherUneven, kReduceScatterUneven, kAllReduce, kBroadcast };

// busbw = algbw * bus_factor, as nccl-tests defines it.
inline double bus_factor(Collective op, int world) {
  const double n = world;
  switch (op) {
    case Collective::kAllGatherUneven:
    case Collective::kReduceScatterUneven:
      return (n - 1) / n;
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
    case Collective::kBroadcast:
      return 1;
  }
  return 1;
}

// Settings common to both binaries, from `--bench_*` flags (removed from argv before Google
// Benchmark sees it). Sizes accept K, M and G suffixes (powers of 1024).
struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  double budget_seconds = 0.1;  // measured time per benchmark (slowest rank)
  int64_t min_repetitions = 5;
  int64_t max_repetitions = 2000;
  double cutoff_seconds = 1.0;   // a call slower than this ends the variant's larger sizes
  int64_t calls_per_sample = 1;  // back-to-back calls timed together (see above)
  // Variants cut by earlier runs, and where this run adds the ones it cuts: a series of runs of
  // one size each (bench/run_comparison.sh --interleave) then skips what one run would.
  std::string cutoff_file;
  // Where rank 0 appends every sample of every benchmark, with the context switches, page faults
  // and CPUs of the ranks (--bench_trace_file; empty: none). A diagnostic for slow stretches that a
  // median hides; see measure().
  std::string trace_file;
};

inline int64_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  int64_t scale = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        scale = int64_t{1} << 10;
        break;
      case 'm':
      case 'M':
        scale = int64_t{1} << 20;
        break;
      case 'g':
      case 'G':
        scale = int64_t{1} << 30;
        break;
      default:
        std::fprintf(stderr, "bad size '%s' (use e.g. 8, 64K, 1M)\n", text.c_str());
        std::exit(2);
    }
  }
  return static_cast<int64_t>(value * static_cast<double>(scale));
}

inline const char* kOptionsHelp =
    "  --bench_min_bytes=N        smallest size (default 8; K/M/G suffixes)\n"
    "  --bench_max_bytes=N        largest size (default 256M)\n"
    "  --bench_budget=SECONDS     measured time per benchmark (default 0.1)\n"
    "  --bench_min_repetitions=R  (default 5)\n"
    "  --bench_max_repetitions=R  (default 2000)\n"
    "  --bench_cutoff=SECONDS     skip larger sizes of a variant once a call took longer "
    "(default 1)\n"
    "  --bench_calls_per_sample=K time K back-to-back calls per sample, as nccl-tests does "
    "(default 1: one call after a barrier)\n"
    "  --bench_cutoff_file=PATH   variants cut by earlier runs (one name a line; read at the "
    "first benchmark), and where this run adds the ones it cuts\n"
    "  --bench_trace_file=PATH    rank 0 appends each benchmark's samples there: the slowest "
    "rank's microseconds, the ranks' voluntary and involuntary context switches and minor page "
    "faults, the ranks per CPU (and every rank marks each sample in "
    "/sys/kernel/tracing/trace_marker when it may)\n";

// Takes the --bench_* flags out of argv (argc is updated) and returns them.
inline Options parse_options(int* argc, char** argv) {
  Options options;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string argument = argv[i];
    const auto equals = argument.find('=');
    const std::string name = argument.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : argument.substr(equals + 1);
    if (name.rfind("--bench_", 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    if (name == "--bench_min_bytes") {
      options.min_bytes = parse_bytes(value);
    } else if (name == "--bench_max_bytes") {
      options.max_bytes = parse_bytes(value);
    } else if (name == "--bench_budget") {
      options.budget_seconds = std::atof(value.c_str());
    } else if (name == "--bench_min_repetitions") {
      options.min_repetitions = std::max<int64_t>(1, std::atoll(value.c_str()));
    } else if (name == "--bench_max_repetitions") {
      options.max_repetitions = std::max<int64_t>(1, std::atoll(value.c_str()));
    } else if (name == "--bench_cutoff") {
      options.cutoff_seconds = std::atof(value.c_str());
    } else if (name == "--bench_cutoff_file") {
      options.cutoff_file = value;
    } else if (name == "--bench_calls_per_sample") {
      options.calls_per_sample = std::max<int64_t>(1, std::atoll(value.c_str()));
    } else if (name == "--bench_trace_file") {
      options.trace_file = value;
    } else {
      std::fprintf(stderr, "unknown option %s; the benchmark's own options:\n%s", name.c_str(),
                   kOptionsHelp);
      std::exit(2);
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
  options.max_repetitions = std::max(options.max_repetitions, options.min_repetitions);
  return options;
}

// min_bytes * 4^k up to max_bytes, and max_bytes itself (8 B ... 128 MiB, 256 MiB by default).
inline std::vector<int64_t> sizes(const Options& options) {
  std::vector<int64_t> result;
  for (int64_t size = std::max<int64_t>(options.min_bytes, 1); size <= options.max_bytes;
       size *= 4) {
    result.push_back(size);
  }
  if (result.empty() || result.back() != options.max_bytes) result.push_back(options.max_bytes);
  return result;
}

// "linear": rank r gets r + 1 shares of `total` elements (the remainder goes to the last rank;
// below world * (world + 1) / 2 elements the last rank gets them all).
inline std::vector<int64_t> linear_splits(int64_t total, int world) {
  const int64_t shares = static_cast<int64_t>(world) * (world + 1) / 2;
  const int64_t share = total / shares;
  std::vector<int64_t> splits(static_cast<size_t>(world));
  int64_t used = 0;
  for (int r = 0; r < world; ++r) {
    splits[static_cast<size_t>(r)] = share * (r + 1);
    used += splits[static_cast<size_t>(r)];
  }
  splits.back() += total - used;
  return splits;
}

// Elements of a benchmark of nominal `bytes`: at least one per rank.
// The value element `index` of rank `rank`'s contribution holds: it depends on both, so that a
// chunk moved to the wrong place fails the check, not only one never written. Small integers:
// sums over 8 ranks (at most 156) stay exact in bfloat16.
inline double pattern_value(int rank, int64_t index) {
  return static_cast<double>(1 + rank + index % 16);
}
// The sum of pattern_value(r, index) over ranks r of a `world`-rank job.
inline double pattern_sum(int world, int64_t index) {
  return static_cast<double>(world * (1 + index % 16) + world * (world - 1) / 2);
}

inline int64_t element_count(int64_t bytes, int64_t element_size, int world) {
  return std::max<int64_t>(bytes / element_size, world);
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle),
                   values.end());
  const double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle)) +
          upper) /
         2;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline std::string shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// Single-threaded memcpy rate (GB/s copied) at `bytes`: buffers of exactly that size, touched
// first, so a size that fits a cache is copied in it and a larger one goes to DRAM, as the
// collective's own buffers do. The median of 5 batches of about budget / 5 seconds each.
// Two buffers for the memcpy limit: from operator new (4 KiB pages), or from an anonymous
// mapping on a 2 MiB boundary with MADV_HUGEPAGE (2 MiB pages where transparent huge pages are
// "madvise" or "always"). Unmapped by the destructor.
class CopyBuffers {
 public:
  CopyBuffers(size_t size, bool huge) {
    if (!huge) {
      plain_source_.reset(new char[size]);
      plain_destination_.reset(new char[size]);
      source_ = plain_source_.get();
      destination_ = plain_destination_.get();
      return;
    }
    mapped_ = 2 * round_up(size) + kHuge;
    region_ = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region_ == MAP_FAILED) throw std::bad_alloc();
    auto* start = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(region_) + kHuge - 1) &
                                          ~(uintptr_t{kHuge} - 1));
    ::madvise(start, 2 * round_up(size), MADV_HUGEPAGE);
    source_ = start;
    destination_ = start + round_up(size);
  }
  ~CopyBuffers() {
    if (region_ != nullptr) ::munmap(region_, mapped_);
  }
  CopyBuffers(const CopyBuffers&) = delete;
  CopyBuffers& operator=(const CopyBuffers&) = delete;
  char* source() const { return source_; }
  char* destination() const { return destination_; }

 private:
  static constexpr size_t kHuge = 2u << 20;
  static size_t round_up(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }
  std::unique_ptr<char[]> plain_source_, plain_destination_;
  void* region_ = nullptr;
  size_t mapped_ = 0;
  char* source_ = nullptr;
  char* destination_ = nullptr;
};

// memcpy's rate at `bytes` in GB/s: the median of 5 batches, in the better of 4 KiB pages and
// 2 MiB pages (the latter from 2 MiB up; 14-16% faster at 128-256 MiB in the 2026-11-29 PVM
// guest), so that `limit` compares with the fastest copy this machine makes.
inline double memcpy_gbps_in(size_t size, bool huge, double budget_seconds) {
  CopyBuffers buffers(size, huge);
  std::memset(buffers.source(), 1, size);
  std::memset(buffers.destination(), 0, size);
  auto copy = [&] {
    std::memcpy(buffers.destination(), buffers.source(), size);
    benchmark::DoNotOptimize(buffers.destination());
    benchmark::ClobberMemory();
  };
  auto start = std::chrono::steady_clock::now();
  copy();
  const double once = std::max(seconds_since(start), 1e-9);
  const int64_t per_batch =
      std::clamp<int64_t>(static_cast<int64_t>(budget_seconds / 5 / once), 3, 1 << 22);
  std::vector<double> rates;
  for (int batch = 0; batch < 5; ++batch) {
    start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < per_batch; ++i)
      copy();
    rates.push_back(static_cast<double>(size) * static_cast<double>(per_batch) /
                    seconds_since(start) / 1e9);
  }
  return median(rates);
}

inline double memcpy_gbps(int64_t bytes, double budget_seconds) {
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  double rate = memcpy_gbps_in(size, /*huge=*/false, budget_seconds);
  if (size >= (2u << 20))
    rate = std::max(rate, memcpy_gbps_in(size, /*huge=*/true, budget_seconds));
  return rate;
}

// What a benchmark binary provides to measure(): the job's ranks.
//   void barrier();
//   void idle_barrier();  // a barrier whose waiting ranks sleep (no polling) while they wait
//   double max(double value);                                  // over ranks, on every rank
//   std::vector<double> all_gather(const std::vector<double>&);  // rank-major, on every rank
template <typename Comm>
concept RankComm = requires(Comm comm, double value, const std::vector<double>& values) {
  comm.barrier();
  comm.idle_barrier();
  { comm.max(value) } -> std::convertible_to<double>;
  { comm.all_gather(values) } -> std::convertible_to<std::vector<double>>;
};

struct Measurement {
  double median_seconds = 0;   // over every rank's sample of every repetition
  double slowest_seconds = 0;  // median over repetitions of the slowest rank's time
  int64_t repetitions = 0;
  std::string trace;  // --bench_trace_file: "us/voluntary/involuntary/faults/ranks-per-CPU" each
};

// What --bench_trace_file records of each sample on this rank: the context switches and minor
// page faults of the calling thread (getrusage, read outside the timed region, so a sample's
// counts include its barrier's; a fault costs ~15 us in a PVM guest) and the CPU it ended on. Every
// rank also marks the start of each sample in the kernel's trace when tracefs is mounted and
// writable, so that a sched_switch trace shows which sample each switch belongs to
// (docs/performance.md, session 50).
class SampleTrace {
 public:
  explicit SampleTrace(bool on) : on_(on) {
    if (on_) marker_ = ::open("/sys/kernel/tracing/trace_marker", O_WRONLY | O_CLOEXEC);
  }
  ~SampleTrace() {
    if (marker_ >= 0) ::close(marker_);
  }
  SampleTrace(const SampleTrace&) = delete;
  SampleTrace& operator=(const SampleTrace&) = delete;

  void begin(size_t sample) {
    if (!on_) return;
    if (marker_ >= 0) {
      char text[48];
      const int length = std::snprintf(text, sizeof(text), "shmccl_bench sample %zu\n", sample);
      if (::write(marker_, text, static_cast<size_t>(length)) < 0) {
        // A trace that is not running loses its marks; the sample does not care.
      }
    }
    getrusage(RUSAGE_THREAD, &before_);
  }
  void end() {
    if (!on_) return;
    rusage after{};
    getrusage(RUSAGE_THREAD, &after);
    records_.insert(records_.end(), {static_cast<double>(after.ru_nvcsw - before_.ru_nvcsw),
                                     static_cast<double>(after.ru_nivcsw - before_.ru_nivcsw),
                                     static_cast<double>(after.ru_minflt - before_.ru_minflt),
                                     static_cast<double>(sched_getcpu())});
  }

  // Every rank's records, one entry per sample: the slowest rank's microseconds, the switches
  // and the page faults summed over the ranks, and how many ranks ended the sample on each CPU
  // ("3+5": three on the lowest CPU any rank used, five on the next). Collective: every rank calls
  // it.
  template <typename Comm>
  std::string describe(Comm& comm, int world, const std::vector<double>& slowest) {
    if (!on_) return "";
    const std::vector<double> all = comm.all_gather(records_);  // rank-major, kFields per sample
    const size_t samples = slowest.size();
    std::string text;
    for (size_t i = 0; i < samples; ++i) {
      int64_t switched_voluntarily = 0, switched_involuntarily = 0, page_faults = 0;
      std::map<int, int> ranks_on;
      for (int r = 0; r < world; ++r) {
        const double* record = &all[(static_cast<size_t>(r) * samples + i) * kFields];
        switched_voluntarily += static_cast<int64_t>(record[0]);
        switched_involuntarily += static_cast<int64_t>(record[1]);
        page_faults += static_cast<int64_t>(record[2]);
        ++ranks_on[static_cast<int>(record[3])];
      }
      std::string placement;
      for (const auto& [cpu, count] : ranks_on)
        placement += (placement.empty() ? "" : "+") + std::to_string(count);
      text += (i == 0 ? "" : " ") + std::to_string(std::lround(slowest[i] * 1e6)) + "/" +
              std::to_string(switched_voluntarily) + "/" + std::to_string(switched_involuntarily) +
              "/" + std::to_string(page_faults) + "/" + placement;
    }
    return text;
  }

 private:
  const bool on_;
  int marker_ = -1;
  rusage before_{};
  // Per sample: voluntary switches, involuntary switches, minor page faults, the CPU it ended on.
  static constexpr size_t kFields = 4;
  std::vector<double> records_;
};

// Steps 2-3 of the method: `call` runs one collective to completion on this rank.
template <RankComm Comm, typename Call>
Measurement measure(Comm& comm, int world, const Options& options, Call&& call) {
  std::vector<double> mine;
  mine.reserve(static_cast<size_t>(options.max_repetitions));
  SampleTrace trace(!options.trace_file.empty());
  double spent = 0;  // in the repetitions, on the slowest rank
  int64_t batch = options.min_repetitions;
  for (;;) {
    const auto batch_start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < batch && static_cast<int64_t>(mine.size()) < options.max_repetitions;
         ++i) {
      trace.begin(mine.size());
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int64_t k = 0; k < options.calls_per_sample; ++k)
        call();
      mine.push_back(seconds_since(start) / static_cast<double>(options.calls_per_sample));
      trace.end();
    }
    spent += comm.max(seconds_since(batch_start));
    if (static_cast<int64_t>(mine.size()) >= options.max_repetitions ||
        spent >= options.budget_seconds) {
      break;
    }
    batch *= 2;
  }
  const std::vector<double> all = comm.all_gather(mine);
  std::vector<double> slowest(mine.size(), 0.0);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      slowest[i] = std::max(slowest[i], all[static_cast<size_t>(r) * mine.size() + i]);
    }
  }
  Measurement result;
  result.median_seconds = median(all);
  result.slowest_seconds = median(slowest);
  result.repetitions = static_cast<int64_t>(mine.size());
  result.trace = trace.describe(comm, world, slowest);
  return result;
}

// Appends `line` and a newline to the file at `path` in one write, so that lines of processes
// appending to the same file never interleave. A file that cannot be opened loses the line: these
// files are records of a run, not its results.
inline void append_line(const std::string& path, const std::string& line) {
  const std::string text = line + "\n";
  if (FILE* file = std::fopen(path.c_str(), "a")) {
    std::setvbuf(file, nullptr, _IOFBF, text.size() + 1);
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
  }
}

// The variants whose calls took longer than the cutoff (by family name); all ranks agree, since
// the times compared are maxima over ranks, and every rank reads the same cutoff file, written
// only by runs that have ended.
class Cutoffs {
 public:
  bool is_cut(const std::string& family, const Options& options) {
    if (!loaded_) load(options);
    return cut_.count(family) != 0;
  }
  void note(const std::string& family, double slowest_seconds, const Options& options) {
    if (slowest_seconds <= options.cutoff_seconds || !cut_.insert(family).second) return;
    if (options.cutoff_file.empty()) return;
    // Every rank appends the same line; one write each, so lines never interleave.
    append_line(options.cutoff_file, family);
  }

 private:
  void load(const Options& options) {
    loaded_ = true;
    if (options.cutoff_file.empty()) return;
    FILE* file = std::fopen(options.cutoff_file.c_str(), "r");
    if (file == nullptr) return;  // no run has cut anything yet
    char line[512];
    while (std::fgets(line, sizeof(line), file) != nullptr) {
      std::string family = line;
      while (!family.empty() && (family.back() == '\n' || family.back() == '\r'))
        family.pop_back();
      if (!family.empty()) cut_.insert(family);
    }
    std::fclose(file);
  }

  bool loaded_ = false;
  std::set<std::string> cut_;
};

// Everything one benchmark needs besides its buffers.
struct Benchmark {
  std::string family;  // e.g. "BM_AllGatherUneven/npu/sync/out"
  Collective op;
  int world = 1;
  int rank = 0;            // this process's (rank 0 writes --bench_trace_file)
  int64_t bytes = 0;       // nominal size (nccl-tests' meaning)
  int64_t real_bytes = 0;  // element_count * element size
  double memcpy_gbps = 0;  // the limit's denominator, at `bytes`
};

// One benchmark, steps 1-3: `call` runs one collective; `check` says whether this rank's result
// of the call just made is right; `prepare` then resets the inputs for timing. Reports through
// `state` (Iterations(1), manual time = the median).
template <RankComm Comm, typename Call, typename Check, typename Prepare>
void run_benchmark(benchmark::State& state, Comm& comm, const Options& options, Cutoffs& cutoffs,
                   const Benchmark& bench, Call&& call, Check&& check, Prepare&& prepare) {
  if (cutoffs.is_cut(bench.family, options)) {
    state.SkipWithError(("skipped: a smaller size of this variant took longer than " +
                         shortest(options.cutoff_seconds) + " s per call (--bench_cutoff)")
                            .c_str());
    return;
  }
  call();
  if (comm.max(check() ? 0.0 : 1.0) != 0.0) {
    state.SkipWithError("wrong result on at least one rank");
    return;
  }
  prepare();
  call();  // warm-up
  Measurement measurement;
  for (auto _ : state) {
    measurement = measure(comm, bench.world, options, call);
    state.SetIterationTime(measurement.median_seconds);
  }
  cutoffs.note(bench.family, measurement.slowest_seconds, options);
  const double seconds = measurement.median_seconds;
  const double algbw = static_cast<double>(bench.real_bytes) / seconds / 1e9;
  const double busbw = algbw * bus_factor(bench.op, bench.world);
  state.SetBytesProcessed(bench.real_bytes);
  state.counters["time_us"] = seconds * 1e6;
  state.counters["slowest_us"] = measurement.slowest_seconds * 1e6;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = busbw;
  state.counters["limit"] = bench.memcpy_gbps > 0 ? busbw / bench.memcpy_gbps : 0;
  state.counters["memcpy"] = bench.memcpy_gbps;
  state.counters["bytes"] = static_cast<double>(bench.real_bytes);
  state.counters["ranks"] = bench.world;
  state.counters["samples"] = static_cast<double>(measurement.repetitions * bench.world);
  if (bench.rank == 0 && !measurement.trace.empty()) {
    append_line(options.trace_file, bench.family + "/" + std::to_string(bench.bytes) + " " +
                                        std::to_string(measurement.repetitions) +
                                        " samples: " + measurement.trace);
  }
}

// The memcpy limit per size, measured by rank 0 alone before any benchmark (the other ranks
// sleep meanwhile, so they take no core from it) and shared.
template <RankComm Comm>
std::map<int64_t, double> measure_memcpy(Comm& comm, int rank, const Options& options) {
  std::map<int64_t, double> rates;
  for (int64_t size : sizes(options)) {
    rates[size] = rank == 0 ? memcpy_gbps(size, options.budget_seconds) : 0.0;
  }
  comm.idle_barrier();
  for (auto& [size, rate] : rates)
    rate = comm.max(rate);
  return rates;
}

// Rounds of barrier + all-reduce before the first benchmark, so that it does not pay for the
// library's lazy set-up (connections, shared segments, collective selection) nor for the
// scheduler's placement of ranks that have just woken from the memcpy measurement: with 4 ranks
// on 2 cores it ran three on one core for the first 50-100 ms (sched_switch trace). At least 100
// rounds and kWarmUpSeconds on the slowest rank's clock (a maximum: every rank runs the same
// rounds).
inline constexpr double kWarmUpSeconds = 0.25;

template <RankComm Comm>
void warm_up(Comm& comm) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    comm.barrier();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (comm.max(elapsed) >= kWarmUpSeconds && i >= 99) break;
  }
}

// Quiet reporter for the ranks other than 0.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// Drops the output-file flags on ranks other than 0 (only rank 0 writes files).
inline void keep_output_on_rank0(int rank, int* argc, char** argv) {
  if (rank == 0) return;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_out", 15) == 0) continue;
    argv[kept++] = argv[i];
  }
  *argc = kept;
  argv[kept] = nullptr;
}

inline void add_method_context(const Options& options, int world) {
  benchmark::AddCustomContext("ranks", std::to_string(world));
  benchmark::AddCustomContext(
      "method",
      "median over ranks and repetitions; repetitions until the slowest rank spent " +
          shortest(options.budget_seconds) + " s, in [" + std::to_string(options.min_repetitions) +
          ", " + std::to_string(options.max_repetitions) + "]; cutoff " +
          shortest(options.cutoff_seconds) + " s per call" +
          (options.calls_per_sample > 1
               ? "; samples of " + std::to_string(options.calls_per_sample) + " back-to-back calls"
               : std::string()));
}

// The CPUs rank 0 may run on (its binding), e.g. "0-1" or "0".
inline void add_affinity_context() {
  cpu_set_t allowed;
  std::string cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed)) continue;
      int last = cpu;
      while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &allowed))
        ++last;
      cpus += (cpus.empty() ? "" : ",") + std::to_string(cpu) +
              (last > cpu ? "-" + std::to_string(last) : "");
      cpu = last;
    }
  }
  benchmark::AddCustomContext("rank0_cpus", cpus.empty() ? "?" : cpus);
}

}  // namespace shmccl::bench
