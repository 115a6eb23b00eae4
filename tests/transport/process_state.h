// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What another process is doing, read from /proc (no gtest: test workers use it too):
//  - wait_until_sleeping(pid, wchan_part): waits (bounded) until a process sleeps in the kernel.
//  - find_thread(name): the id of this process's thread called `name` (pthread_setname_np).
//  - voluntary_switches(tid): how often this process's thread `tid` has gone to sleep.
#pragma once

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

namespace shmccl::transport::testing {

// Waits until process `pid` sleeps in the kernel in a function whose name contains
// `wchan_part` (e.g. "futex"), for at most `timeout`. Returns whether it did. Used to make sure
// a wake really reaches a sleeper, not to paper over a race: the tests are correct either way.
inline bool wait_until_sleeping(pid_t pid, const std::string& wchan_part,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string path = "/proc/" + std::to_string(pid) + "/wchan";
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream file(path);
    std::string wchan;
    std::getline(file, wchan);
    if (wchan.find(wchan_part) != std::string::npos) return true;
    ::sched_yield();
  }
  return false;
}

// The id of this process's thread whose name is `name`, or -1 when there is none.
inline pid_t find_thread(const std::string& name) {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  pid_t found = -1;
  while (const dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream file(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string comm;
    std::getline(file, comm);
    if (comm == name) {
      found = static_cast<pid_t>(std::atol(entry->d_name));
      break;
    }
  }
  ::closedir(tasks);
  return found;
}

// How many times this process's thread `tid` gave up its CPU to sleep (voluntary_ctxt_switches
// of /proc/self/task/<tid>/status), -1 when unreadable: a thread that wakes by itself (a poll's
// timeout) counts up while nothing happens, one that sleeps until woken does not.
inline long voluntary_switches(pid_t tid) {
  std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(file, line);) {
    const std::string key = "voluntary_ctxt_switches:";
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + key.size());
  }
  return -1;
}

}  // namespace shmccl::transport::testing
