// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the environment shmrun gives every rank (the contract with init_process_group).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

class EnvTest : public ::testing::TestWithParam<int> {};

TEST_P(EnvTest, EveryRankGetsTheLauncherVariables) {
  const int world = GetParam();
  Shmrun shmrun({"-v", "--nproc-per-node", std::to_string(world), "--run-id=job_7", "--timeout",
                 "90s", kWorker, "env"});
  const RunResult result = shmrun.wait();
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), static_cast<size_t>(world)) << result.out;
  std::set<std::string> namespaces_seen;
  for (int rank = 0; rank < world; ++rank) {
    const auto& vars = env.at(rank);
    EXPECT_EQ(vars.at("RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("ROLE_RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("WORLD_SIZE"), std::to_string(world));
    EXPECT_EQ(vars.at("LOCAL_WORLD_SIZE"), std::to_string(world));
    EXPECT_EQ(vars.at("ROLE_WORLD_SIZE"), std::to_string(world));
    EXPECT_EQ(vars.at("ROLE_NAME"), "default");
    EXPECT_EQ(vars.at("GROUP_RANK"), "0");
    EXPECT_EQ(vars.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(vars.at("MASTER_PORT"), "29500");
    EXPECT_EQ(vars.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(vars.at("TORCHELASTIC_MAX_RESTARTS"), "0");
    EXPECT_EQ(vars.at("TORCHELASTIC_RUN_ID"), "job_7");
    EXPECT_EQ(vars.at("SHMCCL_JOB_ID"), "job_7");
    EXPECT_EQ(vars.at("SHMCCL_TIMEOUT"), "90");
    EXPECT_EQ(vars.at("SHMCCL_LAUNCHER_PID"), std::to_string(shmrun.pid()));
    EXPECT_EQ(vars.at("PPID"), std::to_string(shmrun.pid()));
    EXPECT_NE(vars.at("SHMCCL_LOCK_FD"), "<unset>");
    // Without a log directory, among the attempt's shared memory objects.
    EXPECT_EQ(vars.at("TORCHELASTIC_ERROR_FILE"), "/dev/shm/shmccl." + vars.at("SHMCCL_NAMESPACE") +
                                                      ".rank" + std::to_string(rank) +
                                                      ".error.json");
    const std::string& ns = vars.at("SHMCCL_NAMESPACE");
    EXPECT_EQ(ns.size(), 6 + 16u) << ns;
    EXPECT_EQ(ns.rfind("job_7-", 0), 0u) << ns;
    EXPECT_EQ(ns.find_first_not_of("0123456789abcdef", 6), std::string::npos) << ns;
    namespaces_seen.insert(vars.at("SHMCCL_NAMESPACE"));
  }
  EXPECT_EQ(namespaces_seen.size(), 1u) << "ranks of one job must share the namespace";
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, EnvTest, ::testing::Values(2, 3, 4, 8));

// An fd that shmrun inherited without close-on-exec (a lock a script holds, a pipe) does not
// reach the ranks, as torchrun's workers (Python's subprocess) get none: the ranks have their
// standard streams and the job's lock only.
TEST(Env, ARankGetsNoFdThatShmrunInherited) {
  const int inherited = fcntl(STDERR_FILENO, F_DUPFD, 57);  // no FD_CLOEXEC on a dup
  ASSERT_GE(inherited, 57);
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kWorker, "fds"});
  close(inherited);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lists;  // "0,1,2,5" of each rank ("[rankN]:fds=0,1,2,5")
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    if (const size_t at = line.find("fds="); at != std::string::npos)
      lists.push_back(line.substr(at + 4));
  }
  ASSERT_EQ(lists.size(), 2u) << result.out;
  for (const std::string& list : lists) {
    std::vector<int> fds;
    std::istringstream in(list);
    for (std::string fd; std::getline(in, fd, ',');)
      fds.push_back(std::stoi(fd));
    EXPECT_EQ(std::count(fds.begin(), fds.end(), inherited), 0) << list;
    EXPECT_EQ(fds.size(), 4u) << "0, 1, 2 and the job's lock; got " << list;
  }
}

// A parent that ignores SIGCHLD (a daemon's SIG_IGN, which survives exec) must not make the
// kernel reap the ranks behind shmrun's back: shmrun waits for them itself.
TEST(Env, AnIgnoredSigchldIsNotInheritedByTheSupervisor) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGCHLD, SIG_IGN);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execl(kShmrun.c_str(), "shmrun", "--nproc-per-node", "2", kWorker.c_str(), "session",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "shmrun ended with status " << status;
}

// Each rank leads its own session, as torchrun's workers do: a rank that reads the terminal is
// not stopped by SIGTTIN as a background job of shmrun's session would be.
TEST(Env, EveryRankLeadsItsOwnSession) {
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kWorker, "session"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(tokens_after(result.out, "session leader=").size(), 2u) << result.out;
  EXPECT_EQ(result.out.find("session leader=0"), std::string::npos) << result.out;
}

TEST(Env, DefaultsMatchTorchrun) {
  const RunResult result = run_shmrun({kWorker, "env"}, {"SHMCCL_TIMEOUT=7"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env.at(0).at("WORLD_SIZE"), "1");
  EXPECT_EQ(env.at(0).at("TORCHELASTIC_RUN_ID"), "none");
  EXPECT_EQ(env.at(0).at("SHMCCL_TIMEOUT"), "7") << "an inherited value passes through";
}

// torchrun's --role names the ranks' role (ROLE_NAME); --start-method and --local-addr, which a
// torchrun command line may carry, are accepted and change nothing.
TEST(Env, RoleNamesTheRanksRole) {
  const RunResult result = run_shmrun({"--role=trainer", "--start-method", "fork", "--local_addr",
                                       "node7", "--nproc-per-node", "2", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), 2u) << result.out;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(env.at(rank).at("ROLE_NAME"), "trainer");
    EXPECT_EQ(env.at(rank).at("ROLE_RANK"), std::to_string(rank));
    EXPECT_EQ(env.at(rank).at("MASTER_ADDR"), "127.0.0.1");
  }
}

// As torchrun, shmrun takes options from PET_<NAME> variables, and its command line wins.
TEST(Env, PetVariablesGiveOptions) {
  const RunResult result = run_shmrun(
      {"--master-port", "1234", kWorker, "env"},
      {"PET_NPROC_PER_NODE=2", "PET_ROLE=worker", "PET_MASTER_PORT=4321", "PET_NNODES=1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), 2u) << result.out;
  EXPECT_EQ(env.at(1).at("ROLE_NAME"), "worker");
  EXPECT_EQ(env.at(1).at("MASTER_PORT"), "1234");
  const RunResult bad = run_shmrun({kWorker, "env"}, {"PET_NNODES=2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("PET_NNODES='2': multi-node is not supported yet"), std::string::npos)
      << bad.err;
}

// shmrun starts more ranks than a shmccl group takes (its program may not use shmccl), but says
// before they start that init_process_group would fail on all of them.
TEST(Env, MoreRanksThanAGroupTakesAreStartedWithAWarning) {
  const RunResult many = run_shmrun({"--nproc-per-node", "65", "true"});
  EXPECT_EQ(many.exit_code, 0) << many.err;
  EXPECT_NE(many.err.find("shmrun: warning: 65 ranks: a shmccl group has at most 64 ranks, so "
                          "init_process_group will fail on every rank of this job"),
            std::string::npos)
      << many.err;
  const RunResult fine = run_shmrun({"--nproc-per-node", "64", "true"});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_EQ(fine.err.find("at most 64"), std::string::npos) << fine.err;
}

// As torchrun: with more than one rank and OMP_NUM_THREADS unset, every rank gets 1, and shmrun
// says so; an inherited value, or a single rank, is left alone.
TEST(Env, OmpNumThreadsIsOneForSeveralRanksUnlessSet) {
  unsetenv("OMP_NUM_THREADS");  // the harness passes this test's environment on
  const RunResult several = run_shmrun({"--nproc-per-node", "2", kWorker, "env"});
  ASSERT_EQ(several.exit_code, 0) << several.err;
  const auto env = parse_env(several.out);
  ASSERT_EQ(env.size(), 2u) << several.out;
  EXPECT_EQ(env.at(0).at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env.at(1).at("OMP_NUM_THREADS"), "1");
  EXPECT_NE(several.err.find("shmrun: warning: OMP_NUM_THREADS is not set: each of the 2 ranks "
                             "gets OMP_NUM_THREADS=1"),
            std::string::npos)
      << several.err;

  const RunResult set =
      run_shmrun({"--nproc-per-node", "2", kWorker, "env"}, {"OMP_NUM_THREADS=3"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(parse_env(set.out).at(1).at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(set.err.find("OMP_NUM_THREADS"), std::string::npos) << set.err;

  const RunResult one = run_shmrun({kWorker, "env"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(parse_env(one.out).at(0).at("OMP_NUM_THREADS"), "<unset>");
  EXPECT_EQ(one.err.find("OMP_NUM_THREADS"), std::string::npos) << one.err;
}

TEST(Env, NamespaceIsSafeAndShortForAnyRunId) {
  const std::string run_id = "a/b.c d" + std::string(100, 'x');
  const RunResult result = run_shmrun({"--run-id", run_id, kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  EXPECT_EQ(env.at(0).at("TORCHELASTIC_RUN_ID"), run_id) << "the job id itself is unchanged";
  const std::string& ns = env.at(0).at("SHMCCL_NAMESPACE");
  EXPECT_LE(ns.size(), 64u) << "the library uses at most 64 characters of it";
  EXPECT_EQ(ns.rfind("a_b_c_dxxx", 0), 0u) << ns;
  EXPECT_EQ(ns.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-"), std::string::npos);
}

// A port the kernel handed out for a bind to port 0: one of its ephemeral ports, not a default.
void expect_a_port_the_kernel_chose(const std::string& text) {
  const int port = std::stoi(text);
  int low = 0, high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  ASSERT_GT(low, 0) << "no ip_local_port_range";
  EXPECT_GE(port, low) << text;
  EXPECT_LE(port, high) << text;
  EXPECT_NE(port, 29500);
  EXPECT_NE(port, 29400);
}

TEST(Env, StandaloneGetsARandomJobIdAndAFreePort) {
  const RunResult result = run_shmrun({"--standalone", "--nproc_per_node=2", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_NE(env.at(0).at("TORCHELASTIC_RUN_ID"), "none");
  EXPECT_EQ(env.at(0).at("TORCHELASTIC_RUN_ID"), env.at(1).at("TORCHELASTIC_RUN_ID"));
  EXPECT_EQ(env.at(0).at("MASTER_PORT"), env.at(1).at("MASTER_PORT"));
  expect_a_port_the_kernel_chose(env.at(0).at("MASTER_PORT"));
  // Another standalone job gets another id.
  const RunResult again = run_shmrun({"--standalone", kWorker, "env"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(parse_env(again.out).at(0).at("TORCHELASTIC_RUN_ID"),
            env.at(0).at("TORCHELASTIC_RUN_ID"));
}

// torchrun's c10d rendezvous: an endpoint without a port is port 29400 (29500 is
// --master-port's default only), and the endpoint wins over --master-addr and --master-port.
TEST(Env, RdzvEndpointWithoutAPortIsTorchrunsRendezvousPort) {
  const RunResult result = run_shmrun({"--master-addr", "10.1.2.3", "--master-port", "1234",
                                       "--rdzv-endpoint", "localhost", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  EXPECT_EQ(env.at(0).at("MASTER_ADDR"), "localhost");
  EXPECT_EQ(env.at(0).at("MASTER_PORT"), "29400");
}

// Port 0, as torchrun takes it: a free port, the same for every rank.
TEST(Env, RdzvEndpointPortZeroIsAFreePort) {
  const RunResult result =
      run_shmrun({"--rdzv-endpoint", "localhost:0", "--nproc-per-node", "2", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), 2u) << result.out;
  expect_a_port_the_kernel_chose(env.at(0).at("MASTER_PORT"));
  EXPECT_EQ(env.at(1).at("MASTER_PORT"), env.at(0).at("MASTER_PORT"));
  EXPECT_EQ(env.at(0).at("MASTER_ADDR"), "localhost");
}

// As torchrun's --standalone, which sets the rendezvous backend, endpoint and id itself: the
// --rdzv-* options given with it are ignored, and shmrun says so.
TEST(Env, StandaloneIgnoresTheRdzvOptions) {
  const RunResult result = run_shmrun({"--rdzv-backend=c10d", "--rdzv-endpoint", "node7:1234",
                                       "--rdzv-id", "job_9", "--standalone", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  EXPECT_NE(env.at(0).at("TORCHELASTIC_RUN_ID"), "job_9");
  EXPECT_EQ(env.at(0).at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_NE(env.at(0).at("MASTER_PORT"), "1234");
  expect_a_port_the_kernel_chose(env.at(0).at("MASTER_PORT"));
  EXPECT_NE(result.err.find("shmrun: warning: --standalone ignores --rdzv-backend=c10d, "
                            "--rdzv-endpoint=node7:1234, --rdzv-id=job_9: it picks a random job "
                            "id and a free port, as torchrun does"),
            std::string::npos)
      << result.err;
  const RunResult plain = run_shmrun({"--standalone", kWorker, "env"});
  EXPECT_EQ(plain.err.find("--standalone ignores"), std::string::npos) << plain.err;
}

TEST(Env, AutoStartsOneRankPerUsableCore) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const RunResult result = run_shmrun({"--nproc-per-node", "auto", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  ASSERT_EQ(env.size(), static_cast<size_t>(CPU_COUNT(&set)));
  EXPECT_EQ(env.at(0).at("WORLD_SIZE"), std::to_string(CPU_COUNT(&set)));
}

TEST(Env, MasterAddressAndPortAreConfigurable) {
  const RunResult result =
      run_shmrun({"--master_addr", "10.1.2.3", "--master-port=1234", "--", kWorker, "env"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto env = parse_env(result.out);
  EXPECT_EQ(env.at(0).at("MASTER_ADDR"), "10.1.2.3");
  EXPECT_EQ(env.at(0).at("MASTER_PORT"), "1234");
}

}  // namespace
}  // namespace shmccl::launcher::testing
