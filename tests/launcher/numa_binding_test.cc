// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/numa_binding.h"

#include <gtest/gtest.h>

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

TEST(NumaBinding, DetectFindsTheCpusWeMayUse) {
  const CpuTopology topology = CpuTopology::detect();
  ASSERT_FALSE(topology.nodes.empty());
  EXPECT_GE(topology.cpu_count(), 1);
  EXPECT_GE(topology.cpu_count(), topology.core_count());
}

TEST(NumaBinding, CpuListFormat) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

}  // namespace
}  // namespace shmccl::launcher
