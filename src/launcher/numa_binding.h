// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// --numa-binding: which CPUs (and preferred memory node) each local rank gets.
//   none       leave the rank where the scheduler puts it
//   node       every CPU of one NUMA node; ranks spread over nodes in contiguous blocks
//   exclusive  a disjoint share of its node's cores
//   core       one physical core (all its hardware threads); distinct while ranks <= cores
//   socket     every CPU of one physical package; ranks spread over packages as over nodes
//   core-complex  every CPU that shares one L3 cache; ranks spread over L3 domains as over nodes
// Only CPUs shmrun itself may run on (its affinity, e.g. a cpuset) are handed out. Planning is a
// pure function of a CpuTopology, so it is unit-tested on made-up machines (and the sysfs files
// of packages and caches are read from a directory the tests may make up); PreparedBinding
// applies a plan in the forked child (sched_setaffinity + set_mempolicy(MPOL_PREFERRED)).
#pragma once

#include <map>
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
  // Usable CPU -> its physical package (socket), and -> its L3 domain (named by the lowest CPU
  // sharing that cache). A CPU missing from a map: sysfs does not say.
  std::map<int, int> package_of;
  std::map<int, int> l3_of;

  // This machine, restricted to the CPUs in shmrun's affinity mask; `with_domains` also reads
  // packages and L3 caches (read_cpu_domains), which only socket and core-complex need.
  static CpuTopology detect(bool with_domains = false);
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

// Fills `topology`'s package_of and l3_of from `cpu_dir` (/sys/devices/system/cpu on a real
// machine): cpu<N>/topology/physical_package_id, and the cpu<N>/cache/index*/ whose level is 3
// (its shared_cpu_list).
void read_cpu_domains(const std::string& cpu_dir, CpuTopology& topology);
inline constexpr const char* kSysCpuDir = "/sys/devices/system/cpu";
// Names a made-up directory that detect() reads instead of kSysCpuDir: the end-to-end tests give
// the 1-socket development VM two packages and two L3 domains with it.
inline constexpr const char* kSysCpuDirVariable = "SHMRUN_SYSFS_CPU_DIR";

// One binding per local rank. `warning` is set when ranks must share cores, or when sysfs did
// not say which package or L3 cache a CPU has (its NUMA node stands in for it).
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
