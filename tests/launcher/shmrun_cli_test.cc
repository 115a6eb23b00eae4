// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the command line (usage errors exit 2), the informational modes, a program that
// does not exist, and --numa-binding as the ranks see it.
#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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
                      std::vector<std::string>{"--numa-binding", "all", "true"},
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

// torchrun's options that shmrun takes and ignores, or refuses, are listed too.
TEST(Cli, HelpListsTheTorchrunOptionsShmrunIgnoresOrRefuses) {
  const RunResult help = run_shmrun({"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const size_t ignored = help.out.find("torchrun options accepted and ignored");
  const size_t refused = help.out.find("torchrun options refused (exit 2):");
  ASSERT_NE(ignored, std::string::npos) << help.out;
  ASSERT_NE(refused, std::string::npos) << help.out;
  const std::string ignored_section = help.out.substr(ignored, refused - ignored);
  for (const char* option :
       {"--no-python", "--rdzv-backend", "--rdzv-conf", "--start-method", "--local-addr"}) {
    EXPECT_NE(ignored_section.find(option), std::string::npos) << option << "\n" << help.out;
  }
  const std::string refused_section = help.out.substr(refused);
  for (const char* option : {"-m, --module", "--run-path", "--event-log-handler", "--logs-specs"})
    EXPECT_NE(refused_section.find(option), std::string::npos) << option << "\n" << help.out;
  // What the help says is ignored is accepted, and what it says is refused is refused.
  EXPECT_EQ(run_shmrun({"--no-python", "--rdzv-conf", "timeout=5", "true"}).exit_code, 0);
  EXPECT_EQ(run_shmrun({"--run-path", "true"}).exit_code, 2);
}

TEST(Cli, AMissingProgramExits127) {
  const RunResult result = run_shmrun({"--nproc-per-node=2", "/nonexistent/program"});
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_NE(result.err.find("cannot find an executable '/nonexistent/program'"), std::string::npos)
      << result.err;
  EXPECT_EQ(run_shmrun({"no-such-program-anywhere"}).exit_code, 127);
}

// Writes `text` to a new file `path` with permissions `mode`; returns `path`.
std::string write_file(const std::string& path, const std::string& text, int mode) {
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms(mode));
  return path;
}

// A program that exists but cannot run says why, not that it cannot be found.
TEST(Cli, AProgramThatIsNotExecutableOrADirectorySaysSo) {
  TempDir dir;
  const std::string no_exec = write_file(dir.path() + "/noexec", "#!/bin/sh\n", 0644);
  const RunResult file = run_shmrun({"--nproc-per-node=2", no_exec});
  EXPECT_EQ(file.exit_code, 127);
  EXPECT_NE(file.err.find("shmrun: error: '" + no_exec + "' is not executable"), std::string::npos)
      << file.err;
  const RunResult directory = run_shmrun({dir.path()});
  EXPECT_EQ(directory.exit_code, 127);
  EXPECT_NE(directory.err.find("shmrun: error: '" + dir.path() + "' is a directory"),
            std::string::npos)
      << directory.err;
}

// execve says ENOENT for a script whose #! interpreter is missing, as if the script were: the
// rank names the interpreter instead.
TEST(Cli, AScriptWhoseInterpreterIsMissingNamesIt) {
  TempDir dir;
  const std::string script =
      write_file(dir.path() + "/script", "#! /nonexistent/interp -x\necho hi\n", 0755);
  const RunResult result = run_shmrun({script});
  EXPECT_EQ(result.exit_code, 127) << result.err;
  EXPECT_NE(result.err.find("[rank0]:shmrun: cannot execute " + script +
                            ": the interpreter named in its #! line, /nonexistent/interp, was "
                            "not found\n"),
            std::string::npos)
      << result.err;
  EXPECT_EQ(result.err.find("No such file or directory"), std::string::npos) << result.err;
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

// The CPUs this test may run on (and so shmrun, which inherits its affinity), as
// test_worker's "cpus=" prints them.
std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// What rank `rank` printed after "cpus=" (test_worker affinity), or "" if it did not.
std::string cpus_seen(const std::string& out, int rank) {
  const std::string marker = "[rank" + std::to_string(rank) + "]:cpus=";
  const std::string line = line_with(out, marker);
  return line.empty() ? line : line.substr(marker.size());
}

std::string comma_list(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus)
    text += (text.empty() ? "" : ",") + std::to_string(cpu);
  return text;
}

// torchrun's socket binding: every rank gets every usable CPU of one package (that of the first
// CPU it sees).
TEST(Cli, SocketBindingGivesEachRankAWholePackage) {
  const RunResult result =
      run_shmrun({"-v", "--numa-binding", "socket", "--nproc-per-node", "2", kWorker, "affinity"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string seen = cpus_seen(result.out, rank);
    ASSERT_FALSE(seen.empty()) << result.out;
    const int first = std::stoi(seen);
    const auto package_of = [](int cpu) {
      return read_file("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                       "/topology/physical_package_id");
    };
    std::vector<int> expected;
    for (int cpu : usable_cpus()) {
      if (package_of(cpu) == package_of(first)) expected.push_back(cpu);
    }
    EXPECT_EQ(seen, comma_list(expected)) << result.err;
  }
  EXPECT_NE(line_with(result.err, "rank 1: pid ").find(", binding "), std::string::npos)
      << result.err;
}

// core-complex: the CPUs that share an L3 cache. Where sysfs has no cache information (this
// project's VM), each NUMA node stands in for an L3 domain, and shmrun says so.
TEST(Cli, CoreComplexBindingGivesEachRankTheCpusOfOneL3) {
  const RunResult result = run_shmrun(
      {"-v", "--numa-binding=core-complex", "--nproc-per-node", "2", kWorker, "affinity"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::vector<int> usable = usable_cpus();
  const bool caches_known =
      std::filesystem::exists("/sys/devices/system/cpu/cpu" + std::to_string(usable[0]) + "/cache");
  const bool one_node = !std::filesystem::exists("/sys/devices/system/node/node1");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string seen = cpus_seen(result.out, rank);
    ASSERT_FALSE(seen.empty()) << result.out;
    if (!caches_known && one_node) {
      EXPECT_EQ(seen, comma_list(usable)) << result.err;
    }
  }
  EXPECT_EQ(result.err.find("sysfs does not say which L3 cache") != std::string::npos,
            !caches_known)
      << result.err;
}

// The two tests above pass on a 1-socket, 1-L3 machine even if shmrun ignored the mode (every
// rank gets every CPU). Here shmrun reads a made-up sysfs (SHMRUN_SYSFS_CPU_DIR) that splits the
// usable CPUs into two packages, each its own L3: rank 0 must get the first half, rank 1 the other.
TEST(Cli, SocketAndCoreComplexBindingsFollowAMadeUpTwoSocketMachine) {
  const std::vector<int> usable = usable_cpus();
  if (usable.size() < 2) GTEST_SKIP() << "needs two usable CPUs";
  const size_t half = usable.size() / 2;
  const std::vector<int> first(usable.begin(), usable.begin() + static_cast<ptrdiff_t>(half));
  const std::vector<int> second(usable.begin() + static_cast<ptrdiff_t>(half), usable.end());
  char pattern[] = "/tmp/shmrun_sysfs_XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::filesystem::path root = pattern;
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  };
  for (size_t i = 0; i < usable.size(); ++i) {
    const bool in_first = i < half;
    const std::filesystem::path dir = root / ("cpu" + std::to_string(usable[i]));
    write(dir / "topology" / "physical_package_id", in_first ? "0" : "1");
    write(dir / "cache" / "index3" / "level", "3");
    write(dir / "cache" / "index3" / "shared_cpu_list", comma_list(in_first ? first : second));
  }
  for (const char* mode : {"socket", "core-complex"}) {
    const RunResult result =
        run_shmrun({"-v", "--numa-binding", mode, "--nproc-per-node", "2", kWorker, "affinity"},
                   {std::string("SHMRUN_SYSFS_CPU_DIR=") + root.string()});
    EXPECT_EQ(result.exit_code, 0) << mode << "\n" << result.err;
    EXPECT_EQ(cpus_seen(result.out, 0), comma_list(first)) << mode << "\n" << result.out;
    EXPECT_EQ(cpus_seen(result.out, 1), comma_list(second)) << mode << "\n" << result.out;
    EXPECT_EQ(result.err.find("sysfs does not say"), std::string::npos) << mode << result.err;
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace shmccl::launcher::testing
