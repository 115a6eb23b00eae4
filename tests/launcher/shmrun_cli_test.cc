// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the command line (usage errors exit 2), the informational modes, a program that
// does not exist, and --numa-binding as the ranks see it.
#include <sched.h>

#include <algorithm>
#include <sstream>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

class BadCommandLine : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(BadCommandLine, ExitsTwoWithUsage) {
  const RunResult result = run_shmrun(GetParam());
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find("usage: shmrun"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("shmrun: error: "), std::string::npos) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadCommandLine,
    ::testing::Values(std::vector<std::string>{"--no-such-flag", "true"},
                      std::vector<std::string>{}, std::vector<std::string>{"--nproc-per-node", "4"},
                      std::vector<std::string>{"--nproc-per-node", "four", "true"},
                      std::vector<std::string>{"--nproc-per-node=0", "true"},
                      std::vector<std::string>{"--max-restarts", "-1", "true"},
                      std::vector<std::string>{"--master-port", "70000", "true"},
                      std::vector<std::string>{"--numa-binding", "socket", "true"},
                      std::vector<std::string>{"--grace-period", "soon", "true"},
                      std::vector<std::string>{"--verbose=yes", "true"},
                      std::vector<std::string>{"--nproc-per-node"}));

TEST(Cli, MoreThanOneNodeIsAClearError) {
  for (const auto& args : {std::vector<std::string>{"--nnodes", "2", "true"},
                           std::vector<std::string>{"--nnodes=1:4", "true"},
                           std::vector<std::string>{"--node_rank", "1", "true"}}) {
    const RunResult result = run_shmrun(args);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_NE(result.err.find("multi-node is not supported yet: shmccl runs the ranks of one host "
                              "(--nnodes=1)"),
              std::string::npos)
        << result.err;
  }
  EXPECT_EQ(run_shmrun({"--nnodes=1:1", "--node-rank", "0", "true"}).exit_code, 0);
}

TEST(Cli, VersionHelpAndDumpConfig) {
  const RunResult version = run_shmrun({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("shmrun (shmccl) ", 0), 0u) << version.out;
  EXPECT_EQ(std::count(version.out.begin(), version.out.end(), '.'), 2) << version.out;

  const RunResult help = run_shmrun({"-h"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--nproc-per-node"), std::string::npos);

  const RunResult config = run_shmrun({"--dump-config"}, {"SHMCCL_TIMEOUT=42"});
  EXPECT_EQ(config.exit_code, 0) << config.err;
  std::istringstream header(line_with(config.out, "NAME"));
  std::istringstream timeout(line_with(config.out, "SHMCCL_TIMEOUT "));
  std::vector<std::string> columns(5), row(5);
  for (auto& cell : columns)
    header >> cell;
  for (auto& cell : row)
    timeout >> cell;
  EXPECT_EQ(columns, (std::vector<std::string>{"NAME", "KIND", "DEFAULT", "VALUE", "HELP"}));
  EXPECT_EQ(row, (std::vector<std::string>{"SHMCCL_TIMEOUT", "seconds", "600", "42", "default"}))
      << config.out;
  EXPECT_NE(config.out.find("SHMCCL_DEBUG "), std::string::npos);
}

TEST(Cli, AMissingProgramExits127) {
  const RunResult result = run_shmrun({"--nproc-per-node=2", "/nonexistent/program"});
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_NE(result.err.find("cannot find an executable '/nonexistent/program'"), std::string::npos)
      << result.err;
  EXPECT_EQ(run_shmrun({"no-such-program-anywhere"}).exit_code, 127);
}

TEST(Cli, ArgumentsAfterTheProgramBelongToIt) {
  // "--nproc-per-node" after the program is the program's argument, not shmrun's.
  const RunResult result = run_shmrun({"echo", "--nproc-per-node", "9", "--", "x"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "[rank0]:--nproc-per-node 9 -- x\n");
}

TEST(Cli, CoreBindingGivesRanksDistinctCores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  if (CPU_COUNT(&set) < 2) GTEST_SKIP() << "needs 2 usable CPUs";
  const RunResult result =
      run_shmrun({"-v", "--numa-binding", "core", "--nproc-per-node", "2", kWorker, "affinity"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::vector<std::string> cpus0 = tokens_after(result.out, "[rank0]:cpus=");
  const std::vector<std::string> cpus1 = tokens_after(result.out, "[rank1]:cpus=");
  ASSERT_EQ(cpus0.size(), 1u) << result.out;
  ASSERT_EQ(cpus1.size(), 1u) << result.out;
  EXPECT_NE(cpus0[0], cpus1[0]);
  // -v prints each rank's binding, and it is what the rank sees.
  const std::string spawn_line = line_with(result.err, "rank 0: pid ");
  EXPECT_NE(spawn_line.find("cpus " + cpus0[0]), std::string::npos) << result.err;
}

}  // namespace
}  // namespace shmccl::launcher::testing
