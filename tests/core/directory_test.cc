// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Directory, the owner of a DIR stream every /dev/shm and /proc listing uses: it lists a
// directory's entries without "." and "..", stops when asked, is empty when it cannot open, and
// closes its stream, also when a visit throws.
#include "core/directory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>

namespace shmccl::detail {
namespace {

class DirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shmccl-directory-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    for (const char* name : {"a", "b", "17", "c"}) {
      const int fd = ::open((root_ + "/" + name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      ASSERT_GE(fd, 0);
      ::close(fd);
    }
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // The number of this process's open descriptors.
  static int open_fds() {
    int count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
      ++count;
    return count;
  }

  std::string root_;
};

TEST_F(DirectoryTest, ListsEveryEntryButDotAndDotDot) {
  std::set<std::string> names;
  Directory(root_).for_each([&](const char* name) {
    names.emplace(name);
    return true;
  });
  EXPECT_EQ(names, (std::set<std::string>{"a", "b", "17", "c"}));
}

TEST_F(DirectoryTest, StopsWhenTheVisitSaysSo) {
  int visited = 0;
  Directory(root_).for_each([&](const char*) { return ++visited < 2; });
  EXPECT_EQ(visited, 2);
}

TEST_F(DirectoryTest, ADirectoryThatCannotBeOpenedIsEmptyAndKeepsTheError) {
  Directory missing(root_ + "/none");
  EXPECT_FALSE(missing.valid());
  EXPECT_EQ(missing.error(), ENOENT);
  EXPECT_EQ(missing.fd(), -1);
  int visited = 0;
  missing.for_each([&](const char*) { return ++visited > 0; });
  EXPECT_EQ(visited, 0);

  Directory file(root_ + "/a");
  EXPECT_FALSE(file.valid());
  EXPECT_EQ(file.error(), ENOTDIR);
}

TEST_F(DirectoryTest, ClosesItsStreamAlsoWhenAVisitThrows) {
  const int before = open_fds();
  {
    Directory directory(root_);
    ASSERT_TRUE(directory.valid());
    EXPECT_EQ(open_fds(), before + 1);
    EXPECT_GE(directory.fd(), 0);
  }
  EXPECT_EQ(open_fds(), before);
  EXPECT_THROW(Directory(root_).for_each(
                   [](const char*) -> bool { throw std::runtime_error("visit failed"); }),
               std::runtime_error);
  EXPECT_EQ(open_fds(), before);
}

TEST(NumericEntryTest, TakesDecimalDigitsOnly) {
  EXPECT_EQ(numeric_entry("0"), 0);
  EXPECT_EQ(numeric_entry("4711"), 4711);
  EXPECT_EQ(numeric_entry("self"), std::nullopt);
  EXPECT_EQ(numeric_entry("12a"), std::nullopt);
  EXPECT_EQ(numeric_entry("-1"), std::nullopt);
  EXPECT_EQ(numeric_entry("+1"), std::nullopt);
  EXPECT_EQ(numeric_entry(" 1"), std::nullopt);
  EXPECT_EQ(numeric_entry(""), std::nullopt);
}

TEST(ForEachProcessTest, FindsThisProcessAndNoOtherNames) {
  bool found_self = false;
  bool all_positive = true;
  for_each_process([&](long pid) {
    found_self = found_self || pid == ::getpid();
    all_positive = all_positive && pid > 0;
    return true;
  });
  EXPECT_TRUE(found_self);
  EXPECT_TRUE(all_positive);
}

}  // namespace
}  // namespace shmccl::detail
