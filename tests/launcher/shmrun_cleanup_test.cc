// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: `shmrun --cleanup` removes the namespaces nobody holds and leaves live ones alone.
// The test names its namespaces on the command line so it never touches another job's.
#include <sys/file.h>

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
  make_entry(unlocked, "lock");
  make_entry(unlocked, "seg");
  make_entry(lockless, "seg0");
  make_entry(lockless, "seg1");
  const int held_lock = open(make_entry(held, "lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_EQ(flock(held_lock, LOCK_SH), 0);
  make_entry(held, "seg");

  Shmrun job({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(
      job.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  const std::vector<std::string> live = namespaces(job.err());
  ASSERT_EQ(live.size(), 1u);
  const size_t live_entries = shm_entries(live[0]).size();
  EXPECT_EQ(live_entries, 3u) << "the lock and one segment per rank";

  const RunResult cleanup = run_shmrun({"--cleanup", unlocked, lockless, held, live[0]});
  EXPECT_EQ(cleanup.exit_code, 0) << cleanup.err;
  EXPECT_TRUE(shm_entries(unlocked).empty());
  EXPECT_TRUE(shm_entries(lockless).empty());
  EXPECT_EQ(shm_entries(held).size(), 2u);
  EXPECT_EQ(shm_entries(live[0]).size(), live_entries);
  EXPECT_NE(cleanup.out.find("removed /dev/shm/shmccl." + unlocked + ".seg\n"), std::string::npos)
      << cleanup.out;
  EXPECT_NE(cleanup.out.find("removed /dev/shm/shmccl." + lockless + ".seg1\n"), std::string::npos);
  EXPECT_NE(cleanup.out.find("kept namespace " + held), std::string::npos) << cleanup.out;
  EXPECT_NE(cleanup.out.find("kept namespace " + live[0]), std::string::npos) << cleanup.out;
  EXPECT_NE(cleanup.out.find("removed 4 entries, kept 2 live namespaces"), std::string::npos);

  job.send(SIGINT);
  EXPECT_EQ(job.wait().exit_code, 130);
  EXPECT_TRUE(shm_entries(live[0]).empty());

  // Once its holder lets go, the namespace is stale too.
  close(held_lock);
  EXPECT_EQ(run_shmrun({"--cleanup", held}).exit_code, 0);
  EXPECT_TRUE(shm_entries(held).empty());
}

}  // namespace
}  // namespace shmccl::launcher::testing
