// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The peer benchmark: the same ops, sizes, uneven splits and method as shmccl_collectives_bench,
// through MPI (Open MPI or MPICH): MPI_Allgatherv, MPI_Reduce_scatter (uneven recvcounts),
// MPI_Allreduce, MPI_Bcast on float32. Each iteration: barrier, time the op, max over ranks;
// the figure is the mean over iterations (what Google Benchmark reports for shmccl). Every result
// is checked once. Prints CSV: library,op,ranks,bytes,time_us,algbw_GBps,busbw_GBps.
//   mpirun -np 2 shmccl_peer_mpi_bench [max_bytes]
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int64_t iterations_for(int64_t bytes) {
  return std::clamp<int64_t>((int64_t{1} << 32) / std::max<int64_t>(bytes, 1), 5, 2000);
}

std::vector<int> linear_splits(int64_t total, int world) {
  const int64_t shares = static_cast<int64_t>(world) * (world + 1) / 2;
  const int64_t share = total / shares;
  std::vector<int> splits(static_cast<size_t>(world));
  int64_t used = 0;
  for (int r = 0; r < world; ++r) {
    splits[static_cast<size_t>(r)] = static_cast<int>(share * (r + 1));
    used += splits[static_cast<size_t>(r)];
  }
  splits.back() += static_cast<int>(total - used);
  return splits;
}

template <typename Op>
double mean_time(int64_t iterations, Op&& op) {
  op();
  op();
  double total = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    op();
    double mine = MPI_Wtime() - start, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    total += slowest;
  }
  return total / static_cast<double>(iterations);
}

void check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: wrong result in %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (int64_t{256} << 20);
  const char* library = "mpi";
#ifdef OPEN_MPI
  library = "openmpi";
#elif defined(MPICH)
  library = "mpich";
#endif
  std::vector<int64_t> sizes;
  for (int64_t size = 8; size <= std::min<int64_t>(max_bytes, int64_t{128} << 20); size *= 4) {
    sizes.push_back(size);
  }
  if (max_bytes >= (int64_t{256} << 20)) sizes.push_back(int64_t{256} << 20);
  if (rank == 0) std::printf("library,op,ranks,bytes,time_us,algbw_GBps,busbw_GBps\n");
  const double n = world;
  for (int64_t bytes : sizes) {
    const int64_t count = std::max<int64_t>(bytes / 4, world);
    const auto splits = linear_splits(count, world);
    std::vector<int> displacements(static_cast<size_t>(world));
    for (int r = 1; r < world; ++r) {
      displacements[static_cast<size_t>(r)] =
          displacements[static_cast<size_t>(r - 1)] + splits[static_cast<size_t>(r - 1)];
    }
    const int mine = splits[static_cast<size_t>(rank)];
    const int64_t iterations = iterations_for(bytes);
    const double real_bytes = static_cast<double>(count) * 4;
    auto report = [&](const char* op, double seconds, double bus) {
      if (rank == 0) {
        std::printf("%s,%s,%d,%lld,%.3f,%.4f,%.4f\n", library, op, world,
                    static_cast<long long>(bytes), seconds * 1e6, real_bytes / seconds / 1e9,
                    real_bytes / seconds / 1e9 * bus);
        std::fflush(stdout);
      }
    };
    {  // all-gather(v)
      std::vector<float> input(static_cast<size_t>(mine), static_cast<float>(rank));
      std::vector<float> output(static_cast<size_t>(count));
      auto op = [&] {
        MPI_Allgatherv(input.data(), mine, MPI_FLOAT, output.data(), splits.data(),
                       displacements.data(), MPI_FLOAT, MPI_COMM_WORLD);
      };
      const double seconds = mean_time(iterations, op);
      for (int r = 0; r < world; ++r) {
        if (splits[static_cast<size_t>(r)] > 0) {
          check(output[static_cast<size_t>(displacements[static_cast<size_t>(r)])] == r,
                "allgatherv", rank);
        }
      }
      report("all_gather_uneven", seconds, (n - 1) / n);
    }
    {  // reduce-scatter with uneven recvcounts
      std::vector<float> input(static_cast<size_t>(count), 1.0f);
      std::vector<float> output(static_cast<size_t>(std::max(mine, 1)));
      auto op = [&] {
        MPI_Reduce_scatter(input.data(), output.data(), splits.data(), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
      };
      const double seconds = mean_time(iterations, op);
      if (mine > 0) check(output[0] == static_cast<float>(world), "reduce_scatter", rank);
      report("reduce_scatter_uneven", seconds, (n - 1) / n);
    }
    {  // all-reduce
      std::vector<float> input(static_cast<size_t>(count), 1.0f),
          output(static_cast<size_t>(count));
      auto op = [&] {
        MPI_Allreduce(input.data(), output.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      };
      const double seconds = mean_time(iterations, op);
      check(output[0] == static_cast<float>(world), "allreduce", rank);
      report("all_reduce", seconds, 2 * (n - 1) / n);
    }
    {  // broadcast
      std::vector<float> buffer(static_cast<size_t>(count), rank == 0 ? 3.0f : 0.0f);
      auto op = [&] {
        MPI_Bcast(buffer.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
      };
      const double seconds = mean_time(iterations, op);
      check(buffer[0] == 3.0f, "bcast", rank);
      report("broadcast", seconds, 1);
    }
  }
  MPI_Finalize();
  return 0;
}
