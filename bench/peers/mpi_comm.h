// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// bench_method.h's view of MPI_COMM_WORLD (RankComm), for the programs built through each MPI
// (bench/CMakeLists.txt).
#pragma once

// The MPI C API only (no C++ bindings, which Open MPI's mpi.h pulls in otherwise).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <time.h>

#include <cstddef>
#include <vector>

namespace shmccl::bench {

// bench_method.h's view of MPI_COMM_WORLD.
class MpiComm {
 public:
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
  void idle_barrier() {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    while (!done) {
      const timespec millisecond{0, 1000000};
      nanosleep(&millisecond, nullptr);
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
  }
  double max(double value) {
    double result = 0;
    MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return result;
  }
  std::vector<double> all_gather(const std::vector<double>& mine) {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::vector<double> all(mine.size() * static_cast<size_t>(world));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                  static_cast<int>(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD);
    return all;
  }
};

}  // namespace shmccl::bench
