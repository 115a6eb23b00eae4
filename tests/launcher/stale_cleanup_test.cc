// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What keeps a namespace without a lock file from `shmrun --cleanup` (ranks started by hand or by
// mpirun remove their lock file once they have all joined): a process that maps or holds open one
// of its entries, and, when the namespace is not named, an entry younger than a minute. The test
// looks at namespaces of its own only.
#include "launcher/stale_cleanup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <string>

namespace shmccl::launcher {
namespace {

// A 4 KiB entry shmccl.<ns>.seg of a namespace of this test; unlinked when the test ends.
class Entry {
 public:
  explicit Entry(const std::string& tag)
      : name_("shmccl.staletest" + std::to_string(getpid()) + "-" + tag + ".seg"),
        path_("/dev/shm/" + name_) {
    const int fd = open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path_;
    EXPECT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
  }
  ~Entry() { unlink(path_.c_str()); }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  // Makes the entry look `seconds` old.
  void age(time_t seconds) const {
    const timespec times[2] = {{time(nullptr) - seconds, 0}, {time(nullptr) - seconds, 0}};
    EXPECT_EQ(utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  }

 private:
  const std::string name_;
  const std::string path_;
};

TEST(StaleCleanup, ALocklessNamespaceLivesWhileAProcessMapsOrHoldsAnEntryOpen) {
  const Entry entry("used");
  entry.age(3600);  // old: only the use can keep it
  const std::string user = "pid " + std::to_string(getpid()) + " has " + entry.path();
  EXPECT_EQ(lockless_namespace_sign_of_life({entry.name()}, /*named=*/true), "");

  const int fd = open(entry.path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_NE(lockless_namespace_sign_of_life({entry.name()}, true).find(user), std::string::npos);
  void* mapping = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  close(fd);
  // Mapped only: its fd is closed.
  EXPECT_NE(lockless_namespace_sign_of_life({entry.name()}, true).find(user), std::string::npos);
  munmap(mapping, 4096);
  EXPECT_EQ(lockless_namespace_sign_of_life({entry.name()}, true), "");
}

TEST(StaleCleanup, AnUnnamedLocklessNamespaceYoungerThanAMinuteIsKept) {
  const Entry entry("young");
  EXPECT_NE(lockless_namespace_sign_of_life({entry.name()}, /*named=*/false)
                .find("younger than a minute"),
            std::string::npos);
  EXPECT_EQ(lockless_namespace_sign_of_life({entry.name()}, /*named=*/true), "");
  entry.age(120);
  EXPECT_EQ(lockless_namespace_sign_of_life({entry.name()}, /*named=*/false), "");
}

}  // namespace
}  // namespace shmccl::launcher
