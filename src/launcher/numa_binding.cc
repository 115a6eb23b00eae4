// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/numa_binding.h"

#include <numa.h>
#include <numaif.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <set>

namespace shmccl::launcher {
namespace {

constexpr size_t kBitsPerWord = sizeof(unsigned long) * CHAR_BIT;

std::set<int> allowed_cpus() {
  std::set<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
    }
  }
  return cpus;
}

// The hardware threads sharing `cpu`'s physical core, as the kernel lists them ("0,4" or
// "0-1"); the CPU alone when sysfs does not say.
std::string core_key(int cpu) {
  const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  for (const char* file : {"core_cpus_list", "thread_siblings_list"}) {
    std::ifstream in(base + file);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
  }
  return std::to_string(cpu);
}

CpuTopology::Node make_node(int id, const std::vector<int>& cpus) {
  // Group by physical core, keeping the cores in order of their first CPU.
  std::map<std::string, size_t> index_of_core;
  CpuTopology::Node node;
  node.id = id;
  for (int cpu : cpus) {
    auto [it, inserted] = index_of_core.emplace(core_key(cpu), node.cores.size());
    if (inserted) node.cores.emplace_back();
    node.cores[it->second].push_back(cpu);
  }
  return node;
}

}  // namespace

CpuTopology CpuTopology::detect() {
  const std::set<int> allowed = allowed_cpus();
  CpuTopology topology;
  if (numa_available() >= 0) {
    bitmask* node_cpus = numa_allocate_cpumask();
    for (int id = 0; id <= numa_max_node(); ++id) {
      if (!numa_bitmask_isbitset(numa_nodes_ptr, static_cast<unsigned>(id))) continue;
      if (numa_node_to_cpus(id, node_cpus) != 0) continue;
      std::vector<int> cpus;
      for (int cpu : allowed) {
        if (numa_bitmask_isbitset(node_cpus, static_cast<unsigned>(cpu))) cpus.push_back(cpu);
      }
      if (!cpus.empty()) topology.nodes.push_back(make_node(id, cpus));
    }
    numa_free_cpumask(node_cpus);
  }
  if (topology.nodes.empty()) {
    topology.nodes.push_back(make_node(-1, std::vector<int>(allowed.begin(), allowed.end())));
  }
  return topology;
}

int CpuTopology::core_count() const {
  int count = 0;
  for (const Node& node : nodes)
    count += static_cast<int>(node.cores.size());
  return count;
}

int CpuTopology::cpu_count() const {
  int count = 0;
  for (const Node& node : nodes) {
    for (const auto& core : node.cores)
      count += static_cast<int>(core.size());
  }
  return count;
}

std::vector<Binding> plan_bindings(NumaMode mode, const CpuTopology& topology, int local_ranks,
                                   std::string* warning) {
  std::vector<Binding> plan(static_cast<size_t>(local_ranks));
  if (mode == NumaMode::kNone || topology.nodes.empty() || local_ranks <= 0) return plan;

  // Ranks go to nodes in contiguous, balanced blocks: rank r -> node r * N / ranks.
  const int node_count = static_cast<int>(topology.nodes.size());
  std::vector<int> ranks_on_node(static_cast<size_t>(node_count), 0);
  std::vector<int> node_of_rank(static_cast<size_t>(local_ranks));
  std::vector<int> index_on_node(static_cast<size_t>(local_ranks));
  for (int rank = 0; rank < local_ranks; ++rank) {
    const int node = static_cast<int>(static_cast<long>(rank) * node_count / local_ranks);
    node_of_rank[rank] = node;
    index_on_node[rank] = ranks_on_node[node]++;
  }

  bool shared = false;
  for (int rank = 0; rank < local_ranks; ++rank) {
    const CpuTopology::Node& node = topology.nodes[node_of_rank[rank]];
    const int cores = static_cast<int>(node.cores.size());
    const int peers = ranks_on_node[node_of_rank[rank]];
    const int index = index_on_node[rank];
    Binding& binding = plan[rank];
    binding.node = node.id;
    std::vector<int> chosen;  // core indices on the node
    if (mode == NumaMode::kNode) {
      for (int core = 0; core < cores; ++core)
        chosen.push_back(core);
    } else if (peers > cores) {
      shared = true;
      chosen.push_back(index % cores);
    } else if (mode == NumaMode::kExclusive) {
      // Contiguous, disjoint, balanced chunks.
      for (int core = index * cores / peers; core < (index + 1) * cores / peers; ++core) {
        chosen.push_back(core);
      }
    } else {  // kCore: one core each, spread over the node
      chosen.push_back(index * cores / peers);
    }
    for (int core : chosen) {
      const auto& cpus = node.cores[core];
      binding.cpus.insert(binding.cpus.end(), cpus.begin(), cpus.end());
    }
    std::sort(binding.cpus.begin(), binding.cpus.end());
  }
  if (shared && warning != nullptr) {
    *warning =
        std::to_string(local_ranks) + " ranks but only " + std::to_string(topology.core_count()) +
        " usable cores: --numa-binding=" + numa_mode_name(mode) + " makes some ranks share a core";
  }
  return plan;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::string Binding::describe() const {
  if (empty()) return "none";
  std::string text;
  if (node >= 0) text = "node " + std::to_string(node);
  if (!cpus.empty()) text += (text.empty() ? "cpus " : ", cpus ") + format_cpu_list(cpus);
  return text;
}

PreparedBinding::PreparedBinding(const Binding& binding) {
  if (!binding.cpus.empty()) {
    const int max_cpu = *std::max_element(binding.cpus.begin(), binding.cpus.end());
    cpu_mask_.assign(static_cast<size_t>(max_cpu) / kBitsPerWord + 1, 0);
    for (int cpu : binding.cpus)
      cpu_mask_[cpu / kBitsPerWord] |= 1UL << (cpu % kBitsPerWord);
  }
  if (binding.node >= 0) {
    node_mask_.assign(static_cast<size_t>(binding.node) / kBitsPerWord + 1, 0);
    node_mask_[binding.node / kBitsPerWord] |= 1UL << (binding.node % kBitsPerWord);
  }
}

const char* PreparedBinding::apply() const noexcept {
  if (!cpu_mask_.empty() &&
      sched_setaffinity(0, cpu_mask_.size() * sizeof(unsigned long),
                        reinterpret_cast<const cpu_set_t*>(cpu_mask_.data())) != 0) {
    return "--numa-binding: sched_setaffinity failed";
  }
  // Preferred, not bound: a full node falls back to others instead of failing allocations.
  if (!node_mask_.empty() &&
      set_mempolicy(MPOL_PREFERRED, node_mask_.data(), node_mask_.size() * kBitsPerWord + 1) != 0) {
    return "--numa-binding: set_mempolicy(MPOL_PREFERRED) failed";
  }
  return nullptr;
}

}  // namespace shmccl::launcher
