// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the flight recorder under shmrun. When a rank dies, the others write their
// recorder (SHMCCL_TRACE_FILE.<rank>) before shmrun stops them, and the failure summary points at
// the files; SIGUSR1 to shmrun makes every rank dump.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "shmrun_harness.h"
#include "transport/multiprocess.h"

namespace shmccl::launcher::testing {
namespace {

const std::string kShmcclWorker = SHMCCL_BINARY_DIR "/tests/launcher/launcher_shmccl_worker";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() /
                 ("shmrun_trace_" + std::to_string(getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
    prefix_ = (directory_ / "flight").string();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string file(int rank) const { return prefix_ + "." + std::to_string(rank); }

  std::filesystem::path directory_;
  std::string prefix_;
};

TEST_F(TraceFiles, SurvivorsOfADeadRankWriteTheirRecorderAndTheSummaryPointsAtIt) {
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 dies once ranks 0 and 2 sleep inside the fourth all_reduce (the worker waits for
  // that), so their dumps must show it, whether they write them on learning of the death or as
  // the collective fails.
  const std::string markers = (directory_ / "inside").string();
  const RunResult result =
      run_shmrun({"-v", "--nproc-per-node", "3", kShmcclWorker, "die", "1", markers},
                 {"SHMCCL_TRACE_FILE=" + prefix_});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
  for (int rank : {0, 2}) {
    const std::string text = read_file(file(rank));
    EXPECT_NE(text.find("shmccl flight recorder: rank " + std::to_string(rank)), std::string::npos)
        << text;
    EXPECT_NE(text.find("rank 1 (pid "), std::string::npos) << text;
    EXPECT_NE(text.find("died"), std::string::npos) << text;
    EXPECT_NE(text.find("seq=3 op=all_reduce state=completed"), std::string::npos) << text;
    // Failed, or still in progress when the rank dumped on learning of the death (its own
    // failure dump may come too late: shmrun stops the ranks once each wrote a file).
    EXPECT_TRUE(text.find("seq=4 op=all_reduce state=failed") != std::string::npos ||
                text.find("seq=4 op=all_reduce state=started") != std::string::npos)
        << text;
    EXPECT_NE(result.err.find("trace_file : " + file(rank) + "\n"), std::string::npos)
        << result.err;
  }
  // The dead rank wrote nothing, and the summary says so.
  EXPECT_FALSE(std::filesystem::exists(file(1)));
  EXPECT_NE(result.err.find("trace_file : " + file(1) + " (not written)"), std::string::npos)
      << result.err;
  // The survivors' dumps ended shmrun's wait well before its 1 s bound.
  EXPECT_NE(result.err.find("every running rank wrote its flight recorder"), std::string::npos)
      << result.err;
  EXPECT_LT(seconds, 10.0);
  expect_shm_clean(namespaces(result.err));
}

TEST_F(TraceFiles, Sigusr1ToShmrunMakesEveryRankDump) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kShmcclWorker, "dump"},
                {"SHMCCL_TRACE_FILE=" + prefix_});
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << shmrun.out()
      << shmrun.err();
  // The ranks sleep in pause(), as in a job that seems stuck. (Under TSan this matters: GCC 12's
  // runtime can lose an asynchronous signal that arrives while the thread is still in an
  // intercepted call, such as the fflush of the ready line; one that wakes a sleeping thread is
  // delivered.)
  const std::vector<pid_t> pids = Shmrun::ready_pids(shmrun.out());
  ASSERT_EQ(pids.size(), 2u) << shmrun.out();
  for (pid_t pid : pids)
    ASSERT_TRUE(transport::testing::wait_until_sleeping(pid, "pause")) << "rank pid " << pid;
  shmrun.send(SIGUSR1);
  // The dumps are asynchronous: wait for both files (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto complete = [&](int rank) {
    const std::string text = read_file(file(rank));
    return text.find("seq=3 op=all_reduce state=completed") != std::string::npos;
  };
  while (!(complete(0) && complete(1)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int rank : {0, 1}) {
    const std::string text = read_file(file(rank));
    EXPECT_NE(text.find(": SIGUSR1; 3 collectives"), std::string::npos) << text;
    EXPECT_TRUE(complete(rank)) << "rank " << rank << ": " << text;
  }
  shmrun.send(SIGTERM);
  const RunResult result = shmrun.wait();
  if (HasFailure()) ADD_FAILURE() << "shmrun's stderr:\n" << result.err;
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  expect_shm_clean(namespaces(result.err));
}

}  // namespace
}  // namespace shmccl::launcher::testing
