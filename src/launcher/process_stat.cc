// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/process_stat.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace shmccl::launcher {

std::optional<ProcessStat> read_process_stat(long pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  std::ifstream stat_file(path);
  std::string line;
  if (!std::getline(stat_file, line)) return std::nullopt;  // gone meanwhile
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses; the last ')' ends it.
  const size_t comm_end = line.rfind(')');
  ProcessStat stat;
  int parent = 0, group = 0;
  if (comm_end == std::string::npos ||
      std::sscanf(line.c_str() + comm_end + 1, " %c %d %d", &stat.state, &parent, &group) != 3) {
    return std::nullopt;
  }
  stat.parent = parent;
  stat.group = group;
  return stat;
}

}  // namespace shmccl::launcher
