// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the processes a rank leaves behind. shmrun --reap-orphans (a child subreaper), and
// shmrun as PID 1 of a PID namespace (a container's entry point), reap them while the job runs:
// an init that does not collects their zombies for as long as it lives.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "multiprocess.h"
#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

TEST(Orphans, ShmrunReapsWhatARankLeavesBehindWithReapOrphans) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/orphan.pid";
  const RunResult result =
      run_shmrun({"--nproc-per-node", "2", "--reap-orphans", kWorker, "orphan", pid_file});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("orphan "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" reaped"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("not reaped"), std::string::npos) << result.out;
}

// In a PID namespace of its own (and a /proc mounted for it), shmrun is PID 1 and reaps without
// being asked. Needs the rights to make namespaces (root, or CAP_SYS_ADMIN): skipped without.
TEST(Orphans, ShmrunAsPidOneReapsWhatARankLeavesBehind) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/orphan.pid";
  const std::string output = dir.path() + "/out.txt";
  // Made before fork(): the child only makes namespaces, forks and execs.
  std::vector<std::string> args{kShmrun, "--nproc-per-node", "2", kWorker, "orphan", pid_file};
  std::vector<char*> argv;
  for (std::string& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  constexpr int kNoNamespaces = 77;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) _exit(kNoNamespaces);
    const pid_t init = fork();  // PID 1 of the new namespace
    if (init < 0) _exit(70);
    if (init == 0) {
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        _exit(kNoNamespaces);
      }
      const int out = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (out < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0) _exit(71);
      execv(argv[0], argv.data());
      _exit(127);
    }
    int status = 0;
    if (waitpid(init, &status, 0) != init) _exit(72);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 73);
  }
  const int code = shmccl::testing::exit_code_within(child, std::chrono::seconds(60));
  if (code == kNoNamespaces) GTEST_SKIP() << "no rights to make a PID and a mount namespace";
  const std::string text = read_file(output);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find(" reaped"), std::string::npos) << text;
  EXPECT_EQ(text.find("not reaped"), std::string::npos) << text;
}

}  // namespace
}  // namespace shmccl::launcher::testing
