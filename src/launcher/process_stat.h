// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What /proc/<pid>/stat says of a process: its state, parent and process group. Read by the
// stop's wait for the ranks' process groups and by the orphan reaper.
#pragma once

#include <sys/types.h>

#include <optional>

namespace shmccl::launcher {

struct ProcessStat {
  char state = 0;  // 'R', 'S', 'Z' (a zombie), 'X' (dead)...
  pid_t parent = 0;
  pid_t group = 0;
};

// nullopt when the process is gone (or /proc does not say).
std::optional<ProcessStat> read_process_stat(long pid);

}  // namespace shmccl::launcher
