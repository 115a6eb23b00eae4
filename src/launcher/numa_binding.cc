// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/numa_binding.h"

#include <numa.h>
#include <numaif.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

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

// The first line of a sysfs file; empty when it cannot be read.
std::string first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

std::optional<int> to_int(std::string_view text) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "0-3,8" -> {0, 1, 2, 3, 8}, as the kernel writes CPU lists; empty when malformed.
std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    const size_t dash = part.find('-');
    const std::optional<int> first = to_int(part.substr(0, dash));
    const std::optional<int> last =
        dash == std::string_view::npos ? first : to_int(part.substr(dash + 1));
    if (!first || !last || *last < *first) return {};
    for (int cpu = *first; cpu <= *last; ++cpu)
      cpus.push_back(cpu);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return cpus;
}

// Ranks go to groups (nodes, packages, L3 domains) in contiguous, balanced blocks: rank r ->
// group r * groups / ranks, so that neighbouring ranks (a ring's hops) share a group.
struct BlockPlacement {
  std::vector<int> group_of_rank;
  std::vector<int> index_in_group;  // the rank's position among its group's ranks
  std::vector<int> ranks_in_group;
};

BlockPlacement place_in_blocks(int ranks, int groups) {
  BlockPlacement placement;
  placement.ranks_in_group.assign(static_cast<size_t>(groups), 0);
  for (int rank = 0; rank < ranks; ++rank) {
    const int group = static_cast<int>(static_cast<long>(rank) * groups / ranks);
    placement.group_of_rank.push_back(group);
    placement.index_in_group.push_back(placement.ranks_in_group[group]++);
  }
  return placement;
}

// The CPUs of one package or one L3 cache, and their NUMA node if they have only one.
struct Domain {
  int node = -1;
  std::vector<int> cpus;
};

// The packages (kSocket) or L3 domains (kCoreComplex) of the usable CPUs: packages in order of
// their id, L3 domains of their lowest CPU. A CPU sysfs says nothing about counts as part of a
// domain of its NUMA node's such CPUs; `guessed` is then set.
std::vector<Domain> domains(const CpuTopology& topology, NumaMode mode, bool* guessed) {
  const std::map<int, int>& domain_of =
      mode == NumaMode::kSocket ? topology.package_of : topology.l3_of;
  // (unknown, package id / lowest CPU / node index): the known domains first.
  std::map<std::pair<bool, int>, Domain> by_key;
  std::map<std::pair<bool, int>, std::set<int>> nodes_of;
  for (size_t n = 0; n < topology.nodes.size(); ++n) {
    const CpuTopology::Node& node = topology.nodes[n];
    for (const auto& core : node.cores) {
      for (int cpu : core) {
        const auto found = domain_of.find(cpu);
        const bool unknown = found == domain_of.end();
        *guessed |= unknown;
        const std::pair<bool, int> key{unknown, unknown ? static_cast<int>(n) : found->second};
        by_key[key].cpus.push_back(cpu);
        nodes_of[key].insert(node.id);
      }
    }
  }
  std::vector<Domain> result;
  for (auto& [key, domain] : by_key) {
    std::sort(domain.cpus.begin(), domain.cpus.end());
    if (nodes_of[key].size() == 1) domain.node = *nodes_of[key].begin();
    result.push_back(std::move(domain));
  }
  return result;
}

// socket and core-complex: each rank gets a whole domain, as `node` gives a whole node.
std::vector<Binding> plan_domain_bindings(NumaMode mode, const CpuTopology& topology,
                                          int local_ranks, std::string* warning) {
  bool guessed = false;
  const std::vector<Domain> groups = domains(topology, mode, &guessed);
  const BlockPlacement placement = place_in_blocks(local_ranks, static_cast<int>(groups.size()));
  std::vector<Binding> plan;
  for (int rank = 0; rank < local_ranks; ++rank) {
    const Domain& domain = groups[placement.group_of_rank[rank]];
    plan.push_back(Binding{domain.node, domain.cpus});
  }
  if (guessed && warning != nullptr) {
    *warning = std::string("sysfs does not say which ") +
               (mode == NumaMode::kSocket ? "package (physical_package_id)"
                                          : "L3 cache (cache/index*/level 3)") +
               " some CPUs belong to: --numa-binding=" + numa_mode_name(mode) +
               " takes their NUMA node for it";
  }
  return plan;
}

}  // namespace

void read_cpu_domains(const std::string& cpu_dir, CpuTopology& topology) {
  const std::filesystem::path root(cpu_dir);
  for (const CpuTopology::Node& node : topology.nodes) {
    for (const auto& core : node.cores) {
      for (int cpu : core) {
        const std::filesystem::path dir = root / ("cpu" + std::to_string(cpu));
        if (auto package = to_int(first_line(dir / "topology" / "physical_package_id"))) {
          topology.package_of[cpu] = *package;
        }
        if (topology.l3_of.count(cpu) != 0) continue;  // named by an earlier CPU's L3
        std::error_code error;
        for (const auto& index : std::filesystem::directory_iterator(dir / "cache", error)) {
          if (index.path().filename().string().rfind("index", 0) != 0 ||
              first_line(index.path() / "level") != "3") {
            continue;
          }
          const std::vector<int> sharing =
              parse_cpu_list(first_line(index.path() / "shared_cpu_list"));
          if (sharing.empty()) continue;
          for (int other : sharing)
            topology.l3_of[other] = sharing.front();
          break;
        }
      }
    }
  }
}

CpuTopology CpuTopology::detect(bool with_domains) {
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
  if (with_domains) {
    const char* made_up = std::getenv(kSysCpuDirVariable);
    read_cpu_domains(made_up != nullptr && *made_up != '\0' ? made_up : kSysCpuDir, topology);
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
  if (mode == NumaMode::kSocket || mode == NumaMode::kCoreComplex) {
    return plan_domain_bindings(mode, topology, local_ranks, warning);
  }

  const BlockPlacement placement =
      place_in_blocks(local_ranks, static_cast<int>(topology.nodes.size()));
  bool shared = false;
  for (int rank = 0; rank < local_ranks; ++rank) {
    const int node_index = placement.group_of_rank[rank];
    const CpuTopology::Node& node = topology.nodes[node_index];
    const int cores = static_cast<int>(node.cores.size());
    const int peers = placement.ranks_in_group[node_index];
    const int index = placement.index_in_group[rank];
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
