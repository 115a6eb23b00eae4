// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A real shmccl rank for the launcher's flight-recorder tests (run under shmrun):
//   die RANK   three all_reduces; then rank RANK SIGKILLs itself; the others' next all_reduce
//              fails: they print "error: <what>" and wait to be stopped (a program stuck after
//              the error)
//   dump       three all_reduces, print "ready", wait to be stopped (SIGUSR1 dumps the recorder)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "shmccl/shmccl.hpp"

namespace {

[[noreturn]] void wait_forever() {
  while (true)
    pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: shmccl_worker die RANK | dump\n");
    return 64;
  }
  const std::string mode = argv[1];
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  shmccl::Tensor t = shmccl::ones({4}, shmccl::kFloat32);
  for (int i = 0; i < 3; ++i)
    shmccl::all_reduce(t);
  if (mode == "dump") {
    std::printf("ready rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
    std::fflush(stdout);
    wait_forever();
  }
  if (mode == "die" && argc == 3) {
    if (rank == std::atoi(argv[2])) raise(SIGKILL);
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
