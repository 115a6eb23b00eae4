// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/numa_binding.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace shmccl::launcher {
namespace {

// `nodes` nodes of `cores` cores with `threads` hardware threads each, numbered like Linux
// does on most x86 machines (sibling threads are cpu and cpu + total cores).
CpuTopology machine(int nodes, int cores, int threads) {
  CpuTopology topology;
  for (int node = 0; node < nodes; ++node) {
    CpuTopology::Node n;
    n.id = node;
    for (int core = 0; core < cores; ++core) {
      std::vector<int> cpus;
      for (int thread = 0; thread < threads; ++thread) {
        cpus.push_back(node * cores + core + thread * nodes * cores);
      }
      n.cores.push_back(cpus);
    }
    topology.nodes.push_back(n);
  }
  return topology;
}

TEST(NumaBinding, NoneLeavesRanksAlone) {
  for (const Binding& binding : plan_bindings(NumaMode::kNone, machine(2, 4, 2), 4, nullptr)) {
    EXPECT_TRUE(binding.empty());
  }
}

TEST(NumaBinding, NodeSpreadsRanksOverNodesInBlocks) {
  const auto plan = plan_bindings(NumaMode::kNode, machine(2, 2, 1), 4, nullptr);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].node, 0);
  EXPECT_EQ(plan[1].node, 0);
  EXPECT_EQ(plan[2].node, 1);
  EXPECT_EQ(plan[3].node, 1);
  EXPECT_EQ(plan[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan[3].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan[3].describe(), "node 1, cpus 2-3");
}

TEST(NumaBinding, CoreGivesDistinctCoresWhileRanksFit) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    std::string warning;
    const auto plan = plan_bindings(NumaMode::kCore, machine(2, 4, 2), ranks, &warning);
    std::set<int> used;
    for (const Binding& binding : plan) {
      ASSERT_EQ(binding.cpus.size(), 2u) << "both threads of one core";
      for (int cpu : binding.cpus)
        EXPECT_TRUE(used.insert(cpu).second) << "cpu " << cpu;
    }
    EXPECT_TRUE(warning.empty());
  }
  // The machine of the anchors: one node, two single-thread cores.
  const auto plan = plan_bindings(NumaMode::kCore, machine(1, 2, 1), 2, nullptr);
  EXPECT_EQ(plan[0].cpus, std::vector<int>{0});
  EXPECT_EQ(plan[1].cpus, std::vector<int>{1});
}

TEST(NumaBinding, MoreRanksThanCoresShareAndWarn) {
  std::string warning;
  const auto plan = plan_bindings(NumaMode::kCore, machine(1, 2, 1), 4, &warning);
  EXPECT_EQ(plan[2].cpus, std::vector<int>{0});
  EXPECT_NE(warning.find("4 ranks but only 2 usable cores"), std::string::npos) << warning;
}

TEST(NumaBinding, ExclusiveSplitsANodesCoresWithoutOverlap) {
  const auto plan = plan_bindings(NumaMode::kExclusive, machine(2, 4, 1), 4, nullptr);
  EXPECT_EQ(plan[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan[1].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan[2].cpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(plan[3].cpus, (std::vector<int>{6, 7}));
  EXPECT_EQ(plan[2].node, 1);
}

// Two sockets of two NUMA nodes each (2 single-thread cores per node): a socket spans nodes, so
// its ranks get no preferred memory node.
TEST(NumaBinding, SocketGivesEachRankEveryCpuOfAPackage) {
  CpuTopology topology = machine(4, 2, 1);
  for (int cpu = 0; cpu < 8; ++cpu)
    topology.package_of[cpu] = cpu / 4;
  std::string warning;
  const auto two = plan_bindings(NumaMode::kSocket, topology, 2, &warning);
  EXPECT_EQ(two[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(two[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(two[1].node, -1);
  EXPECT_TRUE(warning.empty()) << warning;
  // More ranks than sockets share them in blocks, as `node` shares nodes.
  const auto four = plan_bindings(NumaMode::kSocket, topology, 4, nullptr);
  EXPECT_EQ(four[1].cpus, two[0].cpus);
  EXPECT_EQ(four[2].cpus, two[1].cpus);
  // A socket of one node prefers that node's memory.
  CpuTopology one_node_per_socket = machine(2, 2, 1);
  one_node_per_socket.package_of = {{0, 0}, {1, 0}, {2, 1}, {3, 1}};
  EXPECT_EQ(plan_bindings(NumaMode::kSocket, one_node_per_socket, 2, nullptr)[1].describe(),
            "node 1, cpus 2-3");
}

// One node of eight 2-thread cores, four cores per L3 cache.
TEST(NumaBinding, CoreComplexGivesEachRankTheCpusOfOneL3) {
  CpuTopology topology = machine(1, 8, 2);
  for (const auto& core : topology.nodes[0].cores) {
    for (int cpu : core)
      topology.l3_of[cpu] = core[0] < 4 ? 0 : 4;
  }
  std::string warning;
  const auto two = plan_bindings(NumaMode::kCoreComplex, topology, 2, &warning);
  EXPECT_EQ(two[0].describe(), "node 0, cpus 0-3,8-11");
  EXPECT_EQ(two[1].describe(), "node 0, cpus 4-7,12-15");
  EXPECT_TRUE(warning.empty()) << warning;
  const auto three = plan_bindings(NumaMode::kCoreComplex, topology, 3, &warning);
  EXPECT_EQ(three[0].cpus, two[0].cpus);
  EXPECT_EQ(three[1].cpus, two[0].cpus) << "ranks share a domain as they share a node";
  EXPECT_EQ(three[2].cpus, two[1].cpus);
  EXPECT_TRUE(warning.empty()) << warning;
}

TEST(NumaBinding, WithoutSysfsDomainsEachNodeStandsInAndShmrunSaysSo) {
  std::string warning;
  const auto plan = plan_bindings(NumaMode::kCoreComplex, machine(2, 2, 1), 2, &warning);
  EXPECT_EQ(plan[0].describe(), "node 0, cpus 0-1");
  EXPECT_EQ(plan[1].describe(), "node 1, cpus 2-3");
  EXPECT_NE(warning.find("sysfs does not say which L3 cache"), std::string::npos) << warning;
}

// A made-up /sys/devices/system/cpu: two packages, an L3 per pair of CPUs, and the L1 caches
// that must not be taken for it.
TEST(NumaBinding, ReadsPackagesAndL3CachesFromSysfs) {
  char pattern[] = "/tmp/numa_binding_test_XXXXXX";
  const std::filesystem::path root = mkdtemp(pattern);
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  };
  for (int cpu = 0; cpu < 4; ++cpu) {
    const std::filesystem::path dir = root / ("cpu" + std::to_string(cpu));
    write(dir / "topology" / "physical_package_id", std::to_string(cpu / 2));
    write(dir / "cache" / "index0" / "level", "1");
    write(dir / "cache" / "index0" / "shared_cpu_list", std::to_string(cpu));
    write(dir / "cache" / "index3" / "level", "3");
    write(dir / "cache" / "index3" / "shared_cpu_list", cpu < 2 ? "0-1" : "2-3");
  }
  CpuTopology topology = machine(1, 4, 1);
  read_cpu_domains(root.string(), topology);
  std::filesystem::remove_all(root);
  EXPECT_EQ(topology.package_of, (std::map<int, int>{{0, 0}, {1, 0}, {2, 1}, {3, 1}}));
  EXPECT_EQ(topology.l3_of, (std::map<int, int>{{0, 0}, {1, 0}, {2, 2}, {3, 2}}));
}

TEST(NumaBinding, DetectFindsTheCpusWeMayUse) {
  const CpuTopology topology = CpuTopology::detect();
  ASSERT_FALSE(topology.nodes.empty());
  EXPECT_GE(topology.cpu_count(), 1);
  EXPECT_GE(topology.cpu_count(), topology.core_count());
  const CpuTopology with_domains = CpuTopology::detect(/*with_domains=*/true);
  EXPECT_EQ(with_domains.package_of.size(), static_cast<size_t>(with_domains.cpu_count()))
      << "every CPU's package (physical_package_id)";
}

TEST(NumaBinding, CpuListFormat) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

}  // namespace
}  // namespace shmccl::launcher
