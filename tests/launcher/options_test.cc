// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/options.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace shmccl::launcher {
namespace {

Options parse(std::vector<std::string> args) {
  return parse_options(args);
}

TEST(Options, AcceptsTorchrunSpellings) {
  for (const auto& args : {std::vector<std::string>{"--nproc-per-node=4", "prog"},
                           std::vector<std::string>{"--nproc_per_node", "4", "prog"},
                           std::vector<std::string>{"--nproc_per_node=4", "--", "prog"}}) {
    const Options options = parse(args);
    EXPECT_EQ(options.nproc_per_node, 4);
    EXPECT_EQ(options.command, std::vector<std::string>{"prog"});
  }
  EXPECT_EQ(parse({"--nproc-per-node", "auto", "p"}).nproc_per_node, Options::kAutoRanks);
  EXPECT_EQ(parse({"--nproc-per-node", "cpu", "p"}).nproc_per_node, Options::kAutoRanks);
  EXPECT_EQ(parse({"--nproc-per-node", "npu", "p"}).nproc_per_node, Options::kNpuRanks);
  EXPECT_THROW(parse({"--nproc-per-node", "gpu", "p"}), UsageError) << "no GPU here";
}

TEST(Options, OptionsEndAtTheProgram) {
  const Options options = parse({"-v", "prog", "--nproc-per-node", "2", "-v"});
  EXPECT_TRUE(options.verbose);
  EXPECT_EQ(options.nproc_per_node, 1);
  EXPECT_EQ(options.command, (std::vector<std::string>{"prog", "--nproc-per-node", "2", "-v"}));
  EXPECT_EQ(parse({"--", "-weird-name"}).command, std::vector<std::string>{"-weird-name"});
}

TEST(Options, ParsesEverySetting) {
  const Options options = parse({"--master_addr=10.0.0.1",
                                 "--master-port",
                                 "1234",
                                 "--rdzv-id",
                                 "job",
                                 "--standalone",
                                 "--max-restarts=3",
                                 "--monitor-interval",
                                 "250ms",
                                 "--grace-period",
                                 "2",
                                 "--timeout",
                                 "1m",
                                 "-r",
                                 "0:1,2:3",
                                 "-t3",
                                 "--log-dir",
                                 "/tmp/x",
                                 "--local-ranks-filter=0,3",
                                 "--no-prefix",
                                 "--numa-binding",
                                 "core",
                                 "p"});
  EXPECT_EQ(options.master_addr, "10.0.0.1");
  EXPECT_EQ(options.master_port, 1234);
  EXPECT_EQ(options.run_id, "job");
  EXPECT_TRUE(options.standalone);
  EXPECT_EQ(options.max_restarts, 3);
  EXPECT_DOUBLE_EQ(options.monitor_interval_s, 0.25);
  EXPECT_DOUBLE_EQ(options.grace_period_s, 2);
  EXPECT_EQ(options.timeout, "60");
  EXPECT_EQ(options.redirects.mask_for(0), kStdout);
  EXPECT_EQ(options.redirects.mask_for(1), kNoStream);
  EXPECT_EQ(options.redirects.mask_for(2), kBothStreams);
  EXPECT_EQ(options.tee.mask_for(7), kBothStreams);
  EXPECT_EQ(options.log_dir, "/tmp/x");
  EXPECT_EQ(options.local_ranks_filter, (std::vector<int>{0, 3}));
  EXPECT_FALSE(options.prefix);
  EXPECT_EQ(options.numa, NumaMode::kCore);
  EXPECT_EQ(parse({"--numa-binding", "socket", "p"}).numa, NumaMode::kSocket);
  EXPECT_EQ(parse({"--numa-binding=core-complex", "p"}).numa, NumaMode::kCoreComplex);
  EXPECT_EQ(parse({"--run-id", "other", "p"}).run_id, "other");
  EXPECT_EQ(parse({"--stop-timeout=0", "p"}).grace_period_s, 0);
  EXPECT_TRUE(options.grace_period_given) << "--grace-period was given";
  EXPECT_FALSE(parse({"p"}).grace_period_given);
}

// The options of a torchrun command line that have no work to do on one host, or a torchrun name
// for one of shmrun's.
TEST(Options, AcceptsTheRestOfTorchrunsOptions) {
  const Options options = parse({"--role", "trainer", "--start_method=forkserver", "--local-addr",
                                 "10.0.0.7", "--shutdown-timeout", "12", "p"});
  EXPECT_EQ(options.role, "trainer");
  EXPECT_DOUBLE_EQ(options.grace_period_s, 12);
  EXPECT_TRUE(options.grace_period_given);
  EXPECT_EQ(options.command, std::vector<std::string>{"p"});
  EXPECT_EQ(parse({"p"}).role, "default");
  EXPECT_EQ(parse({"p"}).signals_to_handle, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
  EXPECT_EQ(parse({"--signals-to-handle", "SIGUSR1,usr2,SIGTERM,USR1", "p"}).signals_to_handle,
            (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}))
      << "the default four stay; each signal once";
  for (const char* method : {"spawn", "fork", "forkserver"})
    EXPECT_NO_THROW(parse({"--start-method", method, "p"})) << method;
}

TEST(Options, DuplicateFiltersAreCommaSeparatedWithDoubledCommasLiteral) {
  const Options options = parse(
      {"--duplicate-stdout-filters", "loss,a,,b,,", "--duplicate_stderr_filters=NCCL WARN", "p"});
  EXPECT_EQ(options.duplicate_stdout_filters, (std::vector<std::string>{"loss", "a,b,"}));
  EXPECT_EQ(options.duplicate_stderr_filters, std::vector<std::string>{"NCCL WARN"});
  EXPECT_TRUE(parse({"--duplicate-stdout-filters", ",", "p"}).duplicate_stdout_filters.empty())
      << "empty filters would copy every line: dropped";
  EXPECT_TRUE(parse({"--duplicate-stdout-filters=", "p"}).duplicate_stdout_filters.empty());
  EXPECT_TRUE(parse({"p"}).duplicate_stderr_filters.empty());
}

TEST(Options, VirtualLocalRankIsASwitch) {
  EXPECT_TRUE(parse({"--virtual-local-rank", "p"}).virtual_local_rank);
  EXPECT_TRUE(parse({"--virtual_local_rank", "p"}).virtual_local_rank);
  EXPECT_FALSE(parse({"p"}).virtual_local_rank);
  EXPECT_THROW(parse({"--virtual-local-rank=1", "p"}), UsageError) << "torchrun takes no value";
}

TEST(Options, ReapOrphansIsASwitch) {
  EXPECT_TRUE(parse({"--reap-orphans", "p"}).reap_orphans);
  EXPECT_TRUE(parse({"--reap_orphans", "p"}).reap_orphans);
  EXPECT_FALSE(parse({"p"}).reap_orphans);
  EXPECT_THROW(parse({"--reap-orphans=1", "p"}), UsageError);
}

TEST(Options, RdzvEndpointIsHostAndOptionalPort) {
  const Options options = parse({"--rdzv-backend=c10d", "--rdzv-endpoint", "localhost:29400", "p"});
  ASSERT_TRUE(options.rdzv_endpoint);
  EXPECT_EQ(options.rdzv_endpoint->host, "localhost");
  EXPECT_EQ(options.rdzv_endpoint->port, 29400);
  EXPECT_EQ(options.rdzv_endpoint->given, "localhost:29400");
  EXPECT_EQ(options.rdzv_backend, "c10d");
  EXPECT_EQ(options.master_addr, "127.0.0.1") << "--master-addr's own value stays";
  // IPv6 addresses in brackets, as torchrun parses them.
  const Options v6 = parse({"--rdzv-endpoint", "[::1]:29401", "p"});
  EXPECT_EQ(v6.rdzv_endpoint->host, "::1");
  EXPECT_EQ(v6.rdzv_endpoint->port, 29401);
  const Options v6_alone = parse({"--rdzv-endpoint", "[fe80::2]", "p"});
  EXPECT_EQ(v6_alone.rdzv_endpoint->host, "fe80::2");
  EXPECT_EQ(v6_alone.rdzv_endpoint->port, std::nullopt) << "the launch plan's default";
  EXPECT_EQ(parse({"--rdzv-endpoint", "node7", "p"}).rdzv_endpoint->host, "node7");
  EXPECT_EQ(parse({"--rdzv-endpoint", "localhost:0", "p"}).rdzv_endpoint->port, 0);
  EXPECT_THROW(parse({"--rdzv-endpoint", ":29400", "p"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-endpoint", "[]:29400", "p"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-endpoint", "[::1]:port", "p"}), UsageError);
}

TEST(Options, Modes) {
  EXPECT_EQ(parse({"--help"}).mode, Mode::kHelp);
  EXPECT_EQ(parse({"--version"}).mode, Mode::kVersion);
  EXPECT_EQ(parse({"--dump-config"}).mode, Mode::kDumpConfig);
  const Options cleanup = parse({"--cleanup", "ns1", "ns2"});
  EXPECT_EQ(cleanup.mode, Mode::kCleanup);
  EXPECT_EQ(cleanup.command, (std::vector<std::string>{"ns1", "ns2"}));
}

TEST(Options, RejectsMalformedCommandLines) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{},
                                             {"--unknown", "p"},
                                             {"--nproc-per-node"},
                                             {"--nproc-per-node", "x", "p"},
                                             {"--nproc-per-node", "3x", "p"},
                                             {"--nproc-per-node", "0", "p"},
                                             {"--master-port", "-1", "p"},
                                             {"--max-restarts", "", "p"},
                                             {"--monitor-interval", "0", "p"},
                                             {"--timeout", "forever", "p"},
                                             {"--timeout", "1e10", "p"},  // overflows a deadline
                                             {"--grace-period", "1e12", "p"},
                                             {"--monitor-interval", "1e12", "p"},
                                             {"-r", "4", "p"},
                                             {"--tee", "0:1,x", "p"},
                                             {"--local-ranks-filter", "0,,1", "p"},
                                             {"--numa-binding", "all", "p"},
                                             {"--standalone=1", "p"},
                                             {"--v", "p"},
                                             {"-verbose", "p"},
                                             {"-m", "p"},
                                             {"--run-path", "p"},
                                             {"--signals-to-handle", "SIGKILL", "p"},
                                             {"--signals-to-handle", "SIGCHLD", "p"},
                                             {"--signals-to-handle", "SIGTERM,,SIGINT", "p"},
                                             {"--signals-to-handle", "SIGNOPE", "p"},
                                             {"--role", "", "p"},
                                             {"--start-method", "thread", "p"},
                                             {"--local-addr=", "p"},
                                             {"--shutdown-timeout", "-1", "p"},
                                             {"--nnodes", "2", "p"},
                                             {"--nnodes", "1:2", "p"},
                                             {"--nnodes", "x", "p"},
                                             {"--node-rank", "3", "p"}}) {
    EXPECT_THROW(parse(args), UsageError) << ::testing::PrintToString(args);
  }
}

// torchrun's PET_<NAME> variables (Kubeflow's PyTorchJob sets PET_NPROC_PER_NODE, PET_NNODES,
// PET_MASTER_ADDR...) give options; the command line's own come after them and win.
TEST(Options, PetVariablesGiveOptionsTheCommandLineOverrides) {
  const std::map<std::string, std::string> env = {{"PET_NPROC_PER_NODE", "4"},
                                                  {"PET_NNODES", "1"},
                                                  {"PET_MASTER_ADDR", "10.0.0.9"},
                                                  {"PET_ROLE", "trainer"},
                                                  {"PET_STANDALONE", "1"},
                                                  {"PET_NO_PYTHON", "0"},
                                                  {"PET_UNRELATED", "x"},
                                                  {"PET_VIRTUAL_LOCAL_RANK", "1"},
                                                  {"PET_DUPLICATE_STDOUT_FILTERS", "loss,step"}};
  auto get = [&env](const char* name) -> const char* {
    const auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  };
  std::vector<std::string> args = environment_options(get);
  EXPECT_EQ(args,
            (std::vector<std::string>{"--nproc-per-node=4", "--nnodes=1", "--master-addr=10.0.0.9",
                                      "--role=trainer", "--duplicate-stdout-filters=loss,step",
                                      "--standalone", "--virtual-local-rank"}));
  args.insert(args.end(), {"--nproc-per-node", "2", "prog"});
  const Options options = parse(args);
  EXPECT_EQ(options.nproc_per_node, 2) << "the command line wins";
  EXPECT_EQ(options.master_addr, "10.0.0.9");
  EXPECT_EQ(options.role, "trainer");
  EXPECT_TRUE(options.standalone);
  EXPECT_TRUE(options.virtual_local_rank);
  EXPECT_EQ(options.duplicate_stdout_filters, (std::vector<std::string>{"loss", "step"}));
  EXPECT_EQ(options.command, std::vector<std::string>{"prog"});
}

TEST(Options, AMalformedPetVariableIsNamed) {
  for (const auto& [name, value, expected] :
       {std::tuple{"PET_NPROC_PER_NODE", "many", "PET_NPROC_PER_NODE='many': option "},
        std::tuple{"PET_NNODES", "2", "PET_NNODES='2': multi-node is not supported yet"},
        std::tuple{"PET_STANDALONE", "yes", "PET_STANDALONE='yes': expected 1"},
        std::tuple{"PET_MODULE", "1", "PET_MODULE=1: shmrun runs executables"}}) {
    auto get = [&](const char* variable) -> const char* {
      return std::string(variable) == name ? value : nullptr;
    };
    try {
      environment_options(get);
      ADD_FAILURE() << name << " was taken";
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(expected, 0), 0u) << error.what();
    }
  }
}

TEST(Options, MultiNodeMessage) {
  try {
    parse({"--nnodes=2", "p"});
    FAIL();
  } catch (const UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "multi-node is not supported yet: shmccl runs the ranks of one host (--nnodes=1)");
  }
}

}  // namespace
}  // namespace shmccl::launcher
