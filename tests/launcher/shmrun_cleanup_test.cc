// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: `shmrun --cleanup` removes the namespaces nobody holds and leaves live ones alone.
// The test names its namespaces on the command line so it never touches another job's.
#include <sys/file.h>
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

std::string make_entry(const std::string& ns, const std::string& suffix) {
  const std::string path = "/dev/shm/shmccl." + ns + "." + suffix;
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  close(fd);
  return path;
}

TEST(Cleanup, RemovesStaleNamespacesButNotLiveOnes) {
  const std::string tag = "cleanuptest" + std::to_string(getpid());
  const std::string unlocked = tag + "-unlocked", lockless = tag + "-lockless",
                    held = tag + "-held";
  Shmrun job({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(
      job.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  const std::vector<std::string> live = namespaces(job.err());
  ASSERT_EQ(live.size(), 1u);
  const size_t live_entries = shm_entries(live[0]).size();
  EXPECT_EQ(live_entries, 3u) << "the lock and one segment per rank";

  // (Made after the job started: a starting shmrun removes unlocked namespaces with a lock file by
  // itself, and one of another test may do so before --cleanup below.)
  make_entry(unlocked, "lock");
  make_entry(unlocked, "seg");
  make_entry(lockless, "seg0");
  make_entry(lockless, "seg1");
  const int held_lock = open(make_entry(held, "lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_EQ(flock(held_lock, LOCK_SH), 0);
  make_entry(held, "seg");

  const RunResult cleanup = run_shmrun({"--cleanup", unlocked, lockless, held, live[0]});
  EXPECT_EQ(cleanup.exit_code, 0) << cleanup.err;
  // A shmrun of another test, starting meanwhile, may hold the unlocked namespace's lock while it
  // removes that namespace itself (a CI run saw it): --cleanup then keeps it as live, and the
  // other shmrun's removal is waited for (bounded).
  const bool raced = cleanup.out.find("kept namespace " + unlocked + ":") != std::string::npos;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (raced && !shm_entries(unlocked).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_TRUE(shm_entries(unlocked).empty());
  EXPECT_TRUE(shm_entries(lockless).empty());
  EXPECT_EQ(shm_entries(held).size(), 2u);
  EXPECT_EQ(shm_entries(live[0]).size(), live_entries);
  EXPECT_NE(cleanup.out.find("removed /dev/shm/shmccl." + lockless + ".seg1\n"), std::string::npos);
  EXPECT_NE(cleanup.out.find("kept namespace " + held), std::string::npos) << cleanup.out;
  EXPECT_NE(cleanup.out.find("kept namespace " + live[0]), std::string::npos) << cleanup.out;
  EXPECT_NE(cleanup.out.find(raced ? "kept 3 live namespaces" : "kept 2 live namespaces"),
            std::string::npos)
      << cleanup.out;

  job.send(SIGINT);
  EXPECT_EQ(job.wait().exit_code, 130);
  EXPECT_TRUE(shm_entries(live[0]).empty());

  // Once its holder lets go, the namespace is stale too.
  close(held_lock);
  EXPECT_EQ(run_shmrun({"--cleanup", held}).exit_code, 0);
  EXPECT_TRUE(shm_entries(held).empty());
}

// A shmrun killed by SIGKILL leaves its job's shared memory (its ranks die with it, PDEATHSIG);
// the next shmrun removes it before its own job. A namespace without a lock file (ranks started
// by hand or by mpirun, whose being live shmrun cannot tell) is left to `--cleanup`.
TEST(Cleanup, TheNextJobRemovesWhatAKilledShmrunLeft) {
  const std::string lockless = "cleanuptest" + std::to_string(getpid()) + "-handmade";
  make_entry(lockless, "seg");
  Shmrun killed({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(
      killed.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  const std::vector<std::string> left = namespaces(killed.err());
  ASSERT_EQ(left.size(), 1u);
  const std::vector<pid_t> ranks = rank_pids(killed.err());
  killed.send(SIGKILL);
  EXPECT_EQ(killed.wait().exit_code, 128 + SIGKILL);
  for (pid_t pid : ranks)
    ASSERT_TRUE(process_gone(pid, std::chrono::seconds(5))) << "rank " << pid;
  EXPECT_EQ(shm_entries(left[0]).size(), 3u) << "what the killed shmrun could not remove";

  const RunResult next = run_shmrun({"-v", kWorker, "exit", "0", "0"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_TRUE(shm_entries(left[0]).empty()) << next.err;
  EXPECT_EQ(shm_entries(lockless).size(), 1u) << "a namespace shmrun did not make is not its own";
  EXPECT_EQ(run_shmrun({"--cleanup", lockless}).exit_code, 0);
  EXPECT_TRUE(shm_entries(lockless).empty());
}

// A lock file is made under a temporary name (/dev/shm/.shmccl-lock-XXXXXX), locked, then given
// its public name. A process killed in between leaves the temporary; a starting shmrun removes
// those older than a minute that nobody holds.
TEST(Cleanup, TheNextJobRemovesLockTemporariesAKilledProcessLeft) {
  const std::string tag = "/dev/shm/.shmccl-lock-test" + std::to_string(getpid());
  const auto make_temporary = [](const std::string& path, int age_seconds) {
    const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    const timespec times[2] = {{0, UTIME_OMIT}, {time(nullptr) - age_seconds, 0}};
    EXPECT_EQ(futimens(fd, times), 0) << path;
    return fd;
  };
  const auto exists = [](const std::string& path) { return access(path.c_str(), F_OK) == 0; };
  close(make_temporary(tag + "-abandoned", 120));
  const int held = make_temporary(tag + "-held", 120);
  ASSERT_EQ(flock(held, LOCK_SH), 0);
  close(make_temporary(tag + "-young", 0));

  const RunResult next = run_shmrun({"-v", kWorker, "exit", "0", "0"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_FALSE(exists(tag + "-abandoned")) << next.err;
  EXPECT_TRUE(exists(tag + "-held")) << "a held one is being made into a lock";
  EXPECT_TRUE(exists(tag + "-young")) << "a young one may be about to be locked";
  close(held);
  unlink((tag + "-held").c_str());
  unlink((tag + "-young").c_str());
}

}  // namespace
}  // namespace shmccl::launcher::testing
