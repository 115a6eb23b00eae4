// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Where the time of "barrier; one timed call" goes, rank by rank: the benchmarks' method times
// each rank from its own exit of the library's barrier, so a barrier that lets one rank out
// before another moves time between the two collectives. Each rank runs ITERS times "barrier;
// t0; call; t1". Rank 0 prints, per rank, the median call time, the medians of its barrier exit
// and call end counted from the first rank's exit of that iteration, and its context switches
// per iteration (getrusage); then the suite's figure (the median of every rank's samples), the
// median span (first exit to last end) and the mean time of a whole iteration (barrier + call).
// steady_clock reads CLOCK_MONOTONIC, one clock for every process of the host. For example:
//   cd build/bench
//   shmrun --nproc-per-node 2 --numa-binding core -- ./shmccl_call_after_barrier all_reduce 8
//   mpirun.openmpi --bind-to core -np 2 ./shmccl_peer_openmpi_call_after_barrier all_reduce 8
// OP: all_reduce (SUM, in place, BYTES of float32), broadcast (from rank 0, BYTES of float32),
// all_gather (BYTES of output per rank, an even split) or none (the barrier alone). Built for
// shmccl and, with SHMCCL_PEER_LIBRARY, once per MPI found (bench/CMakeLists.txt).
#ifdef SHMCCL_PEER_LIBRARY
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#else
#include <shmccl/shmccl.hpp>
#endif

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double nanoseconds(Clock::time_point time) {
  return std::chrono::duration<double, std::nano>(time.time_since_epoch()).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

#ifdef SHMCCL_PEER_LIBRARY
class Library {
 public:
  Library(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
  }
  ~Library() { MPI_Finalize(); }
  int rank() const { return rank_; }
  int world() const { return world_; }
  void prepare(int64_t elements) {
    buffer_.assign(static_cast<size_t>(elements), 1.0f);
    gathered_.assign(static_cast<size_t>(elements * world_), 0.0f);
  }
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
  void all_reduce() {
    MPI_Allreduce(MPI_IN_PLACE, buffer_.data(), static_cast<int>(buffer_.size()), MPI_FLOAT,
                  MPI_SUM, MPI_COMM_WORLD);
  }
  void broadcast() {
    MPI_Bcast(buffer_.data(), static_cast<int>(buffer_.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  void all_gather() {
    MPI_Allgather(buffer_.data(), static_cast<int>(buffer_.size()), MPI_FLOAT, gathered_.data(),
                  static_cast<int>(buffer_.size()), MPI_FLOAT, MPI_COMM_WORLD);
  }
  std::vector<double> gather(const std::vector<double>& mine) {
    std::vector<double> all(mine.size() * static_cast<size_t>(world_));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                  static_cast<int>(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD);
    return all;
  }
  const char* name() const { return SHMCCL_PEER_LIBRARY; }

 private:
  int rank_ = 0;
  int world_ = 1;
  std::vector<float> buffer_;
  std::vector<float> gathered_;
};
#else
class Library {
 public:
  Library(int*, char***) {
    shmccl::init_process_group();
    shmccl::npu::set_device(shmccl::get_rank() % shmccl::npu::device_count());
  }
  ~Library() { shmccl::destroy_process_group(); }
  int rank() const { return shmccl::get_rank(); }
  int world() const { return shmccl::get_world_size(); }
  void prepare(int64_t elements) {
    buffer_ = shmccl::ones({elements}, shmccl::kFloat32).npu();
    gathered_ = shmccl::zeros({elements * world()}, shmccl::kFloat32).npu();
  }
  void barrier() { shmccl::barrier(); }
  void all_reduce() { shmccl::all_reduce(buffer_); }
  void broadcast() { shmccl::broadcast(buffer_, /*src=*/0); }
  void all_gather() { shmccl::all_gather_into_tensor(gathered_, buffer_); }
  std::vector<double> gather(const std::vector<double>& mine) {
    const auto count = static_cast<int64_t>(mine.size());
    shmccl::Tensor all = shmccl::zeros({count * world()}, shmccl::kFloat64).npu();
    shmccl::all_gather_into_tensor(all, shmccl::from_vector<double>(mine).npu());
    return all.cpu().to_vector<double>();
  }
  const char* name() const { return "shmccl"; }

 private:
  shmccl::Tensor buffer_;
  shmccl::Tensor gathered_;
};
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "all_reduce";
  const int64_t bytes = argc > 2 ? std::atoll(argv[2]) : 8;
  const int iterations = argc > 3 ? std::max(10, std::atoi(argv[3])) : 20000;
  if (op != "all_reduce" && op != "broadcast" && op != "all_gather" && op != "none") {
    std::fprintf(stderr,
                 "usage: call_after_barrier [all_reduce|broadcast|all_gather|none [BYTES "
                 "[ITERS]]]\n");
    return 2;
  }
  Library library(&argc, &argv);
  const int rank = library.rank();
  const int world = library.world();
  // float32 elements of the all-reduce's or broadcast's buffer, or of each rank's all-gather input.
  const int64_t elements = std::max<int64_t>(1, op == "all_gather" ? bytes / 4 / world : bytes / 4);
  library.prepare(elements);
  auto call = [&] {
    if (op == "all_reduce") {
      library.all_reduce();
    } else if (op == "broadcast") {
      library.broadcast();
    } else if (op == "all_gather") {
      library.all_gather();
    }
  };
  for (int i = 0; i < 2000; ++i) {  // warm-up, and the ranks' first placement
    library.barrier();
    call();
  }
  // Exits, then ends, then the context switches of the loop (voluntary, involuntary).
  std::vector<double> times(2 * static_cast<size_t>(iterations) + 2);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < iterations; ++i) {
    library.barrier();
    const auto start = Clock::now();
    call();
    const auto end = Clock::now();
    times[static_cast<size_t>(i)] = nanoseconds(start);
    times[static_cast<size_t>(iterations + i)] = nanoseconds(end);
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  times[times.size() - 2] = static_cast<double>(after.ru_nvcsw - before.ru_nvcsw);
  times[times.size() - 1] = static_cast<double>(after.ru_nivcsw - before.ru_nivcsw);
  const std::vector<double> all = library.gather(times);
  if (rank != 0) return 0;

  auto exit_of = [&](int r, int i) {
    return all[static_cast<size_t>(r) * times.size() + static_cast<size_t>(i)];
  };
  auto end_of = [&](int r, int i) {
    return all[static_cast<size_t>(r) * times.size() + static_cast<size_t>(iterations + i)];
  };
  auto switches_of = [&](int r, int which) {  // per iteration; 0: voluntary, 1: involuntary
    return all[static_cast<size_t>(r + 1) * times.size() - 2 + static_cast<size_t>(which)] /
           iterations;
  };
  std::vector<double> first_exit(static_cast<size_t>(iterations));
  std::vector<double> spans(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    double first = exit_of(0, i);
    double last = end_of(0, i);
    for (int r = 1; r < world; ++r) {
      first = std::min(first, exit_of(r, i));
      last = std::max(last, end_of(r, i));
    }
    first_exit[static_cast<size_t>(i)] = first;
    spans[static_cast<size_t>(i)] = last - first;
  }
  std::printf("%s, %d ranks, %s of %lld bytes, %d iterations (ns, medians over iterations)\n",
              library.name(), world, op.c_str(), static_cast<long long>(bytes), iterations);
  std::vector<double> every_sample;
  for (int r = 0; r < world; ++r) {
    std::vector<double> call_times, exits, ends;
    for (int i = 0; i < iterations; ++i) {
      const double first = first_exit[static_cast<size_t>(i)];
      call_times.push_back(end_of(r, i) - exit_of(r, i));
      exits.push_back(exit_of(r, i) - first);
      ends.push_back(end_of(r, i) - first);
    }
    every_sample.insert(every_sample.end(), call_times.begin(), call_times.end());
    std::printf(
        "  rank %d: call %6.0f   barrier exit %+6.0f   call end %6.0f   context switches per "
        "iteration %.2f + %.2f involuntary\n",
        r, median(call_times), median(exits), median(ends), switches_of(r, 0), switches_of(r, 1));
  }
  const double iteration = (first_exit.back() - first_exit.front()) / (iterations - 1);
  std::printf(
      "  every rank's samples: median %.0f; span (first exit to last end) %.0f; "
      "iteration (barrier + call) %.0f\n",
      median(every_sample), median(spans), iteration);
  return 0;
}
