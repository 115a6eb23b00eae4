// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A real shmccl rank for the launcher's flight-recorder tests (run under shmrun):
//   die RANK MARKERS  three all_reduces; then rank RANK SIGKILLs itself once every other rank
//                     sleeps inside the fourth all_reduce (each announces its pid in the file
//                     MARKERS.<rank> as it enters it); that all_reduce fails on the others: they
//                     print "error: <what>" and wait to be stopped (a program stuck after the
//                     error)
//   dump              three all_reduces, print "ready", wait to be stopped (SIGUSR1 dumps the
//                     recorder)
//   collectives       all-reduce and uneven all-gather of NPU tensors large enough for the work
//                     pool (each rank reads and writes its peers' memory), checked; prints
//                     "ok rank=R" (exit 1 with "wrong ..." on stderr otherwise)
//   throw RANK [GATE] rank RANK throws shmccl::InvalidArgument("bad batch 7") out of main; the
//                     others' next all_reduce then throws out of main too. With GATE (a FIFO),
//                     rank RANK first opens it for reading: it throws once a test opens it for
//                     writing
//   record            shmccl::elastic::record runs a body that throws shmccl::Error("boom");
//                     main catches it and exits 5
//   devices           prints "devices rank=R local_rank=L count=C physical=P" for the device
//                     LOCAL_RANK % device_count(), then runs `collectives` on it; a device call
//                     that throws prints "error: <what>" and exits 3
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shmccl/shmccl.hpp"
#include "transport/process_state.h"

namespace {

[[noreturn]] void wait_forever() {
  while (true)
    pause();
}

std::string marker_path(const std::string& markers, int rank) {
  return markers + "." + std::to_string(rank);
}

void announce_entry(const std::string& markers, int rank) {
  const std::string path = marker_path(markers, rank);
  {
    std::ofstream out(path + ".tmp");
    out << getpid() << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a pid
}

// Waits (bounded) until `rank` announced its entry and its main thread sleeps in a futex: the
// only futex sleep after the announcement is the all_reduce's wait for the rank that dies, by
// which time the peer's recorder shows that collective as started. A timeout only weakens the
// test's assertion; the caller dies anyway.
bool wait_until_inside(const std::string& markers, int rank,
                       std::chrono::steady_clock::time_point deadline) {
  long pid = 0;
  while (pid == 0) {
    std::ifstream in(marker_path(markers, rank));
    in >> pid;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (pid == 0) usleep(1000);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return shmccl::transport::testing::wait_until_sleeping(static_cast<pid_t>(pid), "futex", left);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: shmccl_worker die RANK MARKERS | dump | collectives | devices | throw "
                 "RANK [GATE] | record\n");
    return 64;
  }
  const std::string mode = argv[1];
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  const int world_size = shmccl::get_world_size();
  shmccl::Tensor t = shmccl::ones({4}, shmccl::kFloat32);
  for (int i = 0; i < 3; ++i)
    shmccl::all_reduce(t);
  if (mode == "devices") {
    const char* local_rank_text = std::getenv("LOCAL_RANK");
    const int local_rank = local_rank_text != nullptr ? std::atoi(local_rank_text) : rank;
    try {
      const int count = shmccl::npu::device_count();
      shmccl::npu::set_device(local_rank % count);
      std::printf("devices rank=%d local_rank=%d count=%d physical=%d\n", rank, local_rank, count,
                  shmccl::npu::physical_device());
      std::fflush(stdout);
    } catch (const shmccl::Error& error) {
      std::printf("error: %s\n", error.what());
      return 3;
    }
  } else if (mode == "collectives") {
    shmccl::npu::set_device(rank % shmccl::npu::device_count());
  }
  if (mode == "collectives" || mode == "devices") {
    const int64_t n = 1 << 18;
    shmccl::Tensor reduced = shmccl::full({n}, int64_t{rank} + 1, shmccl::kInt64).npu();
    shmccl::all_reduce(reduced);
    const int64_t sum = int64_t{world_size} * (world_size + 1) / 2;
    if (!shmccl::equal(reduced.cpu(), shmccl::full({n}, sum, shmccl::kInt64))) {
      std::fprintf(stderr, "wrong all_reduce on rank %d\n", rank);
      return 1;
    }
    std::vector<int64_t> splits;
    for (int r = 0; r < world_size; ++r)
      splits.push_back(n + r);
    int64_t total = 0;
    for (int64_t rows : splits)
      total += rows;
    shmccl::Tensor gathered = shmccl::zeros({total}, shmccl::kInt64).npu();
    shmccl::all_gather_into_tensor_uneven(
        gathered,
        shmccl::full({splits[static_cast<size_t>(rank)]}, int64_t{rank}, shmccl::kInt64).npu(),
        splits);
    const shmccl::Tensor host = gathered.cpu();
    int64_t row = 0;
    for (int r = 0; r < world_size; ++r) {
      const int64_t rows = splits[static_cast<size_t>(r)];
      if (!shmccl::equal(host.narrow(0, row, rows),
                         shmccl::full({rows}, int64_t{r}, shmccl::kInt64))) {
        std::fprintf(stderr, "wrong all_gather_into_tensor_uneven on rank %d (rows of %d)\n", rank,
                     r);
        return 1;
      }
      row += rows;
    }
    std::printf("ok rank=%d\n", rank);
    shmccl::destroy_process_group();
    return 0;
  }
  if (mode == "throw" && (argc == 3 || argc == 4)) {
    if (rank == std::atoi(argv[2])) {
      if (argc == 4) {
        const int gate = open(argv[3], O_RDONLY | O_CLOEXEC);  // blocks until a writer opens it
        if (gate < 0) {
          std::perror(argv[3]);
          return 65;
        }
        close(gate);
      }
      throw shmccl::InvalidArgument("bad batch 7");
    }
    shmccl::all_reduce(t);
    return 2;
  }
  if (mode == "record") {
    try {
      shmccl::elastic::record([] { throw shmccl::Error("boom"); });
    } catch (const shmccl::Error&) {
      return 5;
    }
    return 2;
  }
  if (mode == "dump") {
    std::printf("ready rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    wait_forever();
  }
  if (mode == "die" && argc == 4) {
    const std::string markers = argv[3];
    if (rank == std::atoi(argv[2])) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (int peer = 0; peer < world_size; ++peer) {
        if (peer != rank && !wait_until_inside(markers, peer, deadline))
          std::fprintf(stderr, "rank %d never slept inside the fourth all_reduce\n", peer);
      }
      raise(SIGKILL);
    }
    announce_entry(markers, rank);
    try {
      shmccl::all_reduce(t);
    } catch (const shmccl::Error& error) {
      std::printf("error: %s\n", error.what());
      std::fflush(stdout);
      wait_forever();
    }
    return 2;
  }
  return 64;
}
