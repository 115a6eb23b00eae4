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
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef SHMCCL_PEER_LIBRARY
#include "peers/mpi_comm.h"
#else
#include "bench_launch.h"
#endif
#include "bench_method.h"

namespace {

using shmccl::bench::median;
using Clock = std::chrono::steady_clock;

double nanoseconds(Clock::time_point time) {
  return std::chrono::duration<double, std::nano>(time.time_since_epoch()).count();
}

// The library under test: its world, the three collectives, and bench_method.h's view of it
// (`comm`: the barrier, and the gather of every rank's figures).
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
  const char* name() const { return SHMCCL_PEER_LIBRARY; }
  shmccl::bench::MpiComm comm;

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
  void all_reduce() { shmccl::all_reduce(buffer_); }
  void broadcast() { shmccl::broadcast(buffer_, /*src=*/0); }
  void all_gather() { shmccl::all_gather_into_tensor(gathered_, buffer_); }
  const char* name() const { return "shmccl"; }
  shmccl::bench::ShmcclComm comm;

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
    library.comm.barrier();
    call();
  }
  std::vector<double> exits(static_cast<size_t>(iterations));
  std::vector<double> ends(static_cast<size_t>(iterations));
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (size_t i = 0; i < exits.size(); ++i) {
    library.comm.barrier();
    const auto start = Clock::now();
    call();
    const auto end = Clock::now();
    exits[i] = nanoseconds(start);
    ends[i] = nanoseconds(end);
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  // Every rank's figures on every rank, rank-major.
  const std::vector<double> all_exits = library.comm.all_gather(exits);
  const std::vector<double> all_ends = library.comm.all_gather(ends);
  const std::vector<double> switches = library.comm.all_gather(
      {static_cast<double>(after.ru_nvcsw - before.ru_nvcsw) / iterations,
       static_cast<double>(after.ru_nivcsw - before.ru_nivcsw) / iterations});
  if (rank != 0) return 0;

  const size_t n = exits.size();
  std::vector<double> first_exit(n);
  std::vector<double> spans(n);
  for (size_t i = 0; i < n; ++i) {
    double first = all_exits[i];
    double last = all_ends[i];
    for (size_t r = 1; r < static_cast<size_t>(world); ++r) {
      first = std::min(first, all_exits[r * n + i]);
      last = std::max(last, all_ends[r * n + i]);
    }
    first_exit[i] = first;
    spans[i] = last - first;
  }
  std::printf("%s, %d ranks, %s of %lld bytes, %d iterations (ns, medians over iterations)\n",
              library.name(), world, op.c_str(), static_cast<long long>(bytes), iterations);
  std::vector<double> every_sample;
  for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
    std::vector<double> call_times, rank_exits, rank_ends;
    for (size_t i = 0; i < n; ++i) {
      call_times.push_back(all_ends[r * n + i] - all_exits[r * n + i]);
      rank_exits.push_back(all_exits[r * n + i] - first_exit[i]);
      rank_ends.push_back(all_ends[r * n + i] - first_exit[i]);
    }
    every_sample.insert(every_sample.end(), call_times.begin(), call_times.end());
    std::printf(
        "  rank %zu: call %6.0f   barrier exit %+6.0f   call end %6.0f   context switches per "
        "iteration %.2f + %.2f involuntary\n",
        r, median(call_times), median(rank_exits), median(rank_ends), switches[2 * r],
        switches[2 * r + 1]);
  }
  const double iteration = (first_exit.back() - first_exit.front()) / (iterations - 1);
  std::printf(
      "  every rank's samples: median %.0f; span (first exit to last end) %.0f; "
      "iteration (barrier + call) %.0f\n",
      median(every_sample), median(spans), iteration);
  return 0;
}
