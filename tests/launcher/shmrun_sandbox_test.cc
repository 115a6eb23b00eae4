// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: shmrun where a container on an Ubuntu host puts it. Docker's default seccomp
// profile refuses io_uring (since Docker 25), and Yama's ptrace_scope 1 refuses pidfd_getfd
// between sibling ranks. Both are refused here with a seccomp filter (tests/syscall_filter.h),
// in a child of the test that then runs shmrun: the job of zero-copy collectives completes, and a
// rank's death still stops the job, named, with nothing left behind.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "shmrun_harness.h"
#include "syscall_filter.h"

namespace shmccl::launcher::testing {
namespace {

const std::string kShmcclWorker = SHMCCL_BINARY_DIR "/tests/launcher/launcher_shmccl_worker";

// Runs `body` (gtest assertions and all) in a child where io_uring_setup and pidfd_getfd fail
// with EPERM, as in such a container; the test fails when the child's assertions did.
void in_container(const std::function<void()>& body) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    shmccl::testing::refuse_syscalls({SYS_io_uring_setup, SYS_pidfd_getfd}, EPERM);
    body();
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the assertions above, made in the sandboxed child, failed (status " << status << ")";
}

TEST(ShmrunInAContainer, RunsAJobOfZeroCopyCollectives) {
  in_container([] {
    const RunResult result =
        run_shmrun({"-v", "--nproc-per-node", "4", kShmcclWorker, "collectives"});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_NE(result.out.find("ok rank=" + std::to_string(rank)), std::string::npos)
          << result.out << result.err;
    }
    expect_shm_clean(namespaces(result.err));
  });
}

TEST(ShmrunInAContainer, ARankThatDiesStopsTheJob) {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("shmrun_container_" + std::to_string(getpid()));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  const std::string markers = (directory / "inside").string();
  in_container([&] {
    const RunResult result =
        run_shmrun({"-v", "--nproc-per-node", "3", kShmcclWorker, "die", "1", markers});
    EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
    // The summary names the rank that died, and how.
    const size_t root_cause = result.err.find("Root Cause");
    ASSERT_NE(root_cause, std::string::npos) << result.err;
    const std::string summary = result.err.substr(root_cause);
    EXPECT_NE(summary.find(": 1 (local_rank: 1)"), std::string::npos) << summary;
    EXPECT_NE(summary.find("Signal 9 (SIGKILL)"), std::string::npos) << summary;
    for (pid_t pid : rank_pids(result.err))
      EXPECT_TRUE(process_gone(pid, std::chrono::seconds(5))) << "rank pid " << pid << " alive";
    expect_shm_clean(namespaces(result.err));
  });
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace shmccl::launcher::testing
