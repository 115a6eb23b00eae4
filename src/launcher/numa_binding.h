// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// --numa-binding: which CPUs (and preferred memory node) each local rank gets.
//   none       leave the rank where the scheduler puts it
//   node       every CPU of one NUMA node; ranks spread over nodes in contiguous blocks
//   exclusive  a disjoint share of its node's cores
//   core       one physical core (all its hardware threads); distinct while ranks <= cores
// Only CPUs shmrun itself may run on (its affinity, e.g. a cpuset) are handed out. Planning is a
// pure function of a CpuTopology, so it is unit-tested on made-up machines; PreparedBinding
// applies a plan in the forked child (sched_setaffinity + set_mempolicy(MPOL_PREFERRED)).
#pragma once

#include <string>
#include <vector>

#include "launcher/options.h"

namespace shmccl::launcher {

struct CpuTopology {
  struct Node {
    int id = -1;                          // -1: libnuma unavailable (no memory policy)
    std::vector<std::vector<int>> cores;  // physical cores, each a list of logical CPUs
  };
  std::vector<Node> nodes;  // only nodes with at least one usable CPU

  // This machine, restricted to the CPUs in shmrun's affinity mask.
  static CpuTopology detect();
  int core_count() const;
  int cpu_count() const;
};

struct Binding {
  int node = -1;          // preferred memory node; -1: none
  std::vector<int> cpus;  // empty: no CPU affinity change

  bool empty() const { return node < 0 && cpus.empty(); }
  // "node 0, cpus 0-3,8" or "none".
  std::string describe() const;
};

// One binding per local rank. `warning` is set when ranks must share cores.
std::vector<Binding> plan_bindings(NumaMode mode, const CpuTopology& topology, int local_ranks,
                                   std::string* warning);

// A Binding turned into the raw masks the syscalls take, so applying it needs no allocation.
class PreparedBinding {
 public:
  explicit PreparedBinding(const Binding& binding);
  // For the forked child: async-signal-safe. nullptr on success, else a static message.
  const char* apply() const noexcept;

 private:
  std::vector<unsigned long> cpu_mask_;   // empty: leave affinity alone
  std::vector<unsigned long> node_mask_;  // empty: leave the memory policy alone
};

// "0-3,8" for {0,1,2,3,8}.
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace shmccl::launcher
