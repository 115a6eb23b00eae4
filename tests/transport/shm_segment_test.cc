// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ShmSegment and the segment naming helpers: creation, sharing across processes, O_EXCL, mode
// 0600, size checks, unlink policies, and /dev/shm exhaustion reported as OutOfMemoryError.
#include "transport/shm_segment.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/file_descriptor.h"
#include "core/huge_page_mapping.h"
#include "page_tables.h"
#include "shmccl/error.hpp"
#include "transport/multiprocess.h"
#include "transport/segment_names.h"

namespace shmccl::transport {
namespace {

using ::testing::HasSubstr;
using testing::NamespaceTest;

class ShmSegmentTest : public NamespaceTest {
 protected:
  std::string name(const std::string& suffix = "seg") const { return segment_name(ns_, suffix); }
};

TEST_F(ShmSegmentTest, CreateMapsZeroedMemoryOfTheRequestedSize) {
  ShmSegment segment = ShmSegment::create(name(), 12345);
  EXPECT_EQ(segment.size(), 12345u);
  EXPECT_EQ(segment.name(), name());
  EXPECT_EQ(segment.unlink_policy(), UnlinkPolicy::kOnDestroy);
  EXPECT_EQ(segment.huge_page_error(), ShmSegment::kHugePagesNotAsked);
  const auto* bytes = static_cast<const unsigned char*>(segment.data());
  for (size_t i = 0; i < segment.size(); ++i)
    ASSERT_EQ(bytes[i], 0) << "byte " << i;
  EXPECT_EQ(ShmSegment::size_of(name()), 12345u);
}

TEST_F(ShmSegmentTest, ProcessesShareTheMemory) {
  ShmSegment segment = ShmSegment::create(name(), 4096);
  std::strcpy(static_cast<char*>(segment.data()), "from the creator");
  const std::string failures = testing::run_processes(2, [&](int rank) {
    ShmSegment mine = ShmSegment::open(name(), 4096);
    auto* text = static_cast<char*>(mine.data());
    CHILD_CHECK(std::string(text) == "from the creator", "got '", text, "'");
    static_cast<char*>(mine.data())[100 + rank] = static_cast<char>('A' + rank);
  });
  EXPECT_EQ(failures, "");
  EXPECT_EQ(static_cast<char*>(segment.data())[100], 'A');
  EXPECT_EQ(static_cast<char*>(segment.data())[101], 'B');
}

// A segment of 2 MiB pages: the creator and a process that opens it later map it with an entry
// per 2 MiB, so touching every 4 KiB page of it costs each a handful of faults, not 1024 (a
// control block's first collectives paid 3-4 ms of faults in a VM).
TEST_F(ShmSegmentTest, HugePagesMapWithOneEntryPer2MiBInEveryProcess) {
  if (!::shmccl::testing::kernel_makes_huge_pages())
    GTEST_SKIP() << "this kernel makes no 2 MiB pages";
  constexpr size_t kBytes = 4u << 20;
  ShmSegment segment =
      ShmSegment::create(name(), kBytes, UnlinkPolicy::kOnDestroy, PageSize::kHuge);
  // ENOMEM: no free 2 MiB after reclaim and compaction, which a busy machine may see for a while.
  if (segment.huge_page_error() == ENOMEM) GTEST_SKIP() << "the kernel has no 2 MiB pages now";
  ASSERT_EQ(segment.huge_page_error(), 0) << std::strerror(segment.huge_page_error());
  auto* bytes = static_cast<unsigned char*>(segment.data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes) % detail::kHugePageBytes, 0u);
  for (size_t i = 0; i < kBytes; i += 4096)
    bytes[i] = static_cast<unsigned char>(i / 4096);
  EXPECT_EQ(::shmccl::testing::pmd_mapped_bytes(bytes), static_cast<int64_t>(kBytes));

  const std::string failures = testing::run_processes(1, [&](int) {
    ShmSegment mine = ShmSegment::open(name(), kBytes, UnlinkPolicy::kManual, PageSize::kHuge);
    CHILD_CHECK(mine.huge_page_error() == ShmSegment::kHugePagesNotAsked,
                "an opener reports the creator's pages as its own");
    auto* theirs = static_cast<unsigned char*>(mine.data());
    const long before = ::shmccl::testing::minor_faults();
    bool intact = true;
    for (size_t i = 0; i < kBytes; i += 4096)
      intact = intact && theirs[i] == static_cast<unsigned char>(i / 4096);
    for (size_t i = 1; i < kBytes; i += 4096)
      theirs[i] = 1;
    const long faults = ::shmccl::testing::minor_faults() - before;
    CHILD_CHECK(intact, "the opener read other bytes than the creator wrote");
    CHILD_CHECK(::shmccl::testing::pmd_mapped_bytes(theirs) == static_cast<int64_t>(kBytes),
                "the opener maps ", ::shmccl::testing::pmd_mapped_bytes(theirs),
                " bytes with 2 MiB entries");
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)  // their shadows fault too
    CHILD_CHECK(faults < 64, "touching 1024 pages took ", faults, " faults");
#else
    (void)faults;
#endif
  });
  EXPECT_EQ(failures, "");
  EXPECT_EQ(bytes[1], 1);
}

TEST_F(ShmSegmentTest, HugePagesNeedASizeOfWhole2MiBPages) {
  const auto expect_refused = [](const std::function<void()>& call) {
    try {
      call();
      FAIL() << "no error";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(),
                  HasSubstr("must have a size that is a multiple of 2 MiB, got 3145728"));
    }
  };
  expect_refused(
      [&] { ShmSegment::create(name(), 3u << 20, UnlinkPolicy::kOnDestroy, PageSize::kHuge); });
  EXPECT_FALSE(ShmSegment::size_of(name()).has_value()) << "the name was left behind";
  ShmSegment made = ShmSegment::create(name(), 3u << 20);
  expect_refused(
      [&] { ShmSegment::open(name(), 3u << 20, UnlinkPolicy::kManual, PageSize::kHuge); });
}

TEST_F(ShmSegmentTest, CreateIsExclusive) {
  ShmSegment first = ShmSegment::create(name(), 4096);
  try {
    ShmSegment::create(name(), 4096);
    FAIL() << "a second create of the same name succeeded";
  } catch (const SystemError& error) {
    EXPECT_EQ(error.error_code(), EEXIST);
    EXPECT_THAT(error.what(), HasSubstr(name()));
    EXPECT_THAT(error.what(), HasSubstr("already exists"));
  }
  // The failed create must not have removed the first one's name.
  EXPECT_EQ(ShmSegment::size_of(name()), 4096u);
}

TEST_F(ShmSegmentTest, ModeIsOwnerReadWriteOnly) {
  const mode_t old_umask = ::umask(0);  // even a permissive umask must not widen the mode
  ShmSegment segment = ShmSegment::create(name(), 4096);
  ::umask(old_umask);
  FileDescriptor fd(::shm_open(name().c_str(), O_RDONLY, 0));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  struct stat info {};
  ASSERT_EQ(::fstat(fd.get(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_EQ(info.st_uid, ::geteuid());
}

TEST_F(ShmSegmentTest, OpenChecksTheSize) {
  ShmSegment segment = ShmSegment::create(name(), 8192);
  try {
    ShmSegment::open(name(), 4096);
    FAIL() << "open with the wrong size succeeded";
  } catch (const RemoteError& error) {
    EXPECT_THAT(error.what(), HasSubstr(name()));
    EXPECT_THAT(error.what(), HasSubstr("8192"));
    EXPECT_THAT(error.what(), HasSubstr("4096"));
  }
}

TEST_F(ShmSegmentTest, MissingSegments) {
  EXPECT_FALSE(ShmSegment::try_open(name(), 4096).has_value());
  EXPECT_FALSE(ShmSegment::size_of(name()).has_value());
  EXPECT_FALSE(ShmSegment::unlink_name(name()));
  try {
    ShmSegment::open(name(), 4096);
    FAIL() << "open of a missing segment succeeded";
  } catch (const SystemError& error) {
    EXPECT_EQ(error.error_code(), ENOENT);
    EXPECT_THAT(error.what(), HasSubstr(name()));
  }
}

TEST_F(ShmSegmentTest, UnlinkIsIdempotentAndKeepsTheMapping) {
  ShmSegment segment = ShmSegment::create(name(), 4096);
  ShmSegment other = ShmSegment::open(name(), 4096);
  segment.unlink();
  segment.unlink();
  other.unlink();  // someone else removed it already: fine
  EXPECT_FALSE(ShmSegment::try_open(name(), 4096).has_value());
  static_cast<char*>(segment.data())[0] = 42;  // both mappings still work and still share
  EXPECT_EQ(static_cast<char*>(other.data())[0], 42);
  // The name is free again.
  ShmSegment again = ShmSegment::create(name(), 4096);
  EXPECT_EQ(static_cast<char*>(again.data())[0], 0);
}

TEST_F(ShmSegmentTest, StillNamedFollowsTheName) {
  ShmSegment segment = ShmSegment::create(name(), 4096);
  ShmSegment other = ShmSegment::open(name(), 4096);
  EXPECT_TRUE(segment.still_named());
  EXPECT_TRUE(other.still_named());
  segment.unlink();
  EXPECT_FALSE(segment.still_named());
  EXPECT_FALSE(other.still_named());
  // A new segment under the same name is not the one the old mappings hold.
  ShmSegment again = ShmSegment::create(name(), 4096);
  EXPECT_TRUE(again.still_named());
  EXPECT_FALSE(other.still_named());
}

TEST_F(ShmSegmentTest, UnlinkPolicies) {
  { ShmSegment created = ShmSegment::create(name("a"), 4096); }
  EXPECT_FALSE(ShmSegment::size_of(name("a")).has_value()) << "kOnDestroy must unlink";

  {
    ShmSegment created = ShmSegment::create(name("b"), 4096);
    created.keep();
  }
  EXPECT_TRUE(ShmSegment::size_of(name("b")).has_value()) << "keep() must leave the name";
  { ShmSegment opened = ShmSegment::open(name("b"), 4096); }
  EXPECT_TRUE(ShmSegment::size_of(name("b")).has_value()) << "open() defaults to kManual";
  { ShmSegment opened = ShmSegment::open(name("b"), 4096, UnlinkPolicy::kOnDestroy); }
  EXPECT_FALSE(ShmSegment::size_of(name("b")).has_value());

  { ShmSegment manual = ShmSegment::create(name("c"), 4096, UnlinkPolicy::kManual); }
  EXPECT_TRUE(ShmSegment::unlink_name(name("c")));
}

TEST_F(ShmSegmentTest, MoveTransfersOwnership) {
  ShmSegment first = ShmSegment::create(name("a"), 4096);
  void* data = first.data();
  ShmSegment second = std::move(first);
  EXPECT_EQ(second.data(), data);
  EXPECT_EQ(second.size(), 4096u);
  {
    ShmSegment moved_from = std::move(first);  // NOLINT: a moved-from segment owns nothing
    EXPECT_EQ(moved_from.data(), nullptr);
  }
  EXPECT_TRUE(ShmSegment::size_of(name("a")).has_value());
  ShmSegment third = ShmSegment::create(name("b"), 4096);
  third = std::move(second);  // releases "b" (kOnDestroy), takes over "a"
  EXPECT_FALSE(ShmSegment::size_of(name("b")).has_value());
  EXPECT_EQ(third.name(), name("a"));
}

TEST(ShmSegmentNames, InvalidNamesAreRejected) {
  for (const std::string& bad : std::vector<std::string>{"", "/", "noslash", "/a/b", "/.", "/..",
                                                         "/" + std::string(255, 'x')}) {
    EXPECT_THROW(ShmSegment::create(bad, 4096), InvalidArgument) << "'" << bad << "'";
  }
  EXPECT_THROW(ShmSegment::create("/shmccl.valid-but-empty", 0), InvalidArgument);
}

TEST_F(ShmSegmentTest, AbsurdSizeIsOutOfMemory) {
  constexpr size_t kOnePebibyte = size_t{1} << 50;
  try {
    ShmSegment::create(name(), kOnePebibyte);
    FAIL() << "a 1 PiB segment was created";
  } catch (const OutOfMemoryError& error) {
    EXPECT_THAT(error.what(), HasSubstr("not enough space in /dev/shm for segment " + name()));
    EXPECT_THAT(error.what(), HasSubstr(std::to_string(kOnePebibyte)));
  }
  EXPECT_FALSE(ShmSegment::size_of(name()).has_value()) << "the half-made segment must be gone";
}

// A really full /dev/shm: a child process mounts a 1 MiB tmpfs over /dev/shm in a private mount
// namespace. Skipped where that is not permitted.
TEST(ShmSegmentFull, FullDevShmIsOutOfMemoryNotSigbus) {
  constexpr int kSkipped = 77;
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      ::_exit(kSkipped);
    }
    try {
      ShmSegment half = ShmSegment::create("/shmccl.full.a", 600 << 10);
      try {
        ShmSegment::create("/shmccl.full.b", 600 << 10);  // 1.2 MiB in total: does not fit
        ::_exit(1);
      } catch (const OutOfMemoryError&) {
      }
      if (ShmSegment::size_of("/shmccl.full.b")) ::_exit(2);  // unlinked again
      // Nothing stayed allocated: the rest of the space is still usable, and touchable.
      ShmSegment rest = ShmSegment::create("/shmccl.full.c", 300 << 10);
      std::memset(rest.data(), 1, rest.size());
      ::_exit(0);
    } catch (...) {
      ::_exit(3);
    }
  }
  const int status = testing::wait_for_exit(child, std::chrono::seconds(10));
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSkipped) {
    GTEST_SKIP() << "cannot mount a private tmpfs over /dev/shm here";
  }
  EXPECT_EQ(status, 0) << testing::describe_status(status);
}

TEST(SegmentNames, Format) {
  EXPECT_EQ(segment_name("job1", "store"), "/shmccl.job1.store");
  EXPECT_EQ(segment_name("a-b_c", "arena.3"), "/shmccl.a-b_c.arena.3");
  EXPECT_THROW(segment_name("", "store"), InvalidArgument);
  EXPECT_THROW(segment_name("has.dot", "store"), InvalidArgument);  // would overlap namespaces
  EXPECT_THROW(segment_name("has/slash", "store"), InvalidArgument);
  EXPECT_THROW(segment_name("job", ""), InvalidArgument);
  EXPECT_THROW(segment_name("job", "a/b"), InvalidArgument);
  EXPECT_THROW(segment_name("job", std::string(250, 'x')), InvalidArgument);
}

TEST(SegmentNames, Sanitize) {
  EXPECT_EQ(sanitize_name_component(""), "default");
  EXPECT_EQ(sanitize_name_component("Job_1-a"), "Job_1-a");
  EXPECT_EQ(sanitize_name_component("a.b/c d\xff"), "a_b_c_d_");
  EXPECT_NO_THROW(segment_name(sanitize_name_component("any thing/at.all"), "store"));
}

// Long names keep their start and a hash of the whole: two ids that differ only past the cut
// (one host name, two ports) must not share a namespace.
TEST(SegmentNames, LongNamesKeepAHashOfTheWhole) {
  const std::string host(80, 'h');
  const std::string a = sanitize_name_component("torch-" + host + "-29500");
  const std::string b = sanitize_name_component("torch-" + host + "-29501");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, 47), ("torch-" + host).substr(0, 47));
  EXPECT_EQ(a, sanitize_name_component("torch-" + host + "-29500"));  // the same in every rank
  EXPECT_NO_THROW(segment_name(a, "store"));
  const std::string j = "j" + sanitize_name_component(std::string(63, 'x') + ".", 63);
  EXPECT_EQ(j.size(), 64u);
  EXPECT_NO_THROW(segment_name(j, "store"));
  EXPECT_EQ(sanitize_name_component(std::string(63, 'x'), 63), std::string(63, 'x'));
  EXPECT_THROW(sanitize_name_component("x", 65), InvalidArgument);
}

TEST(SegmentNames, RandomTokens) {
  std::set<std::string> tokens;
  for (int i = 0; i < 100; ++i) {
    const std::string token = random_token();
    ASSERT_EQ(token.size(), 16u);
    ASSERT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
    tokens.insert(token);
  }
  EXPECT_EQ(tokens.size(), 100u);
}

TEST_F(ShmSegmentTest, RemoveNamespaceSegmentsRemovesExactlyItsOwn) {
  const std::string other_ns = ns_ + "_other";  // shares a prefix with ns_, but not "ns_."
  ShmSegment a = ShmSegment::create(name("a"), 4096, UnlinkPolicy::kManual);
  ShmSegment b = ShmSegment::create(name("b.1"), 4096, UnlinkPolicy::kManual);
  ShmSegment other = ShmSegment::create(segment_name(other_ns, "a"), 4096);
  EXPECT_EQ(list_namespace_segments(ns_).size(), 2u);
  EXPECT_EQ(remove_namespace_segments(ns_), 2u);
  EXPECT_TRUE(list_namespace_segments(ns_).empty());
  EXPECT_EQ(list_namespace_segments(other_ns).size(), 1u);
  EXPECT_EQ(remove_namespace_segments(ns_), 0u);
}

TEST(FileDescriptor, OwnsAndClosesItsDescriptor) {
  auto is_open = [](int fd) { return ::fcntl(fd, F_GETFD) != -1; };
  int raw[2];
  ASSERT_EQ(::pipe(raw), 0);
  {
    FileDescriptor read_end(raw[0]);
    FileDescriptor write_end(raw[1]);
    EXPECT_TRUE(read_end.valid());
    FileDescriptor moved = std::move(read_end);
    EXPECT_FALSE(read_end.valid());  // NOLINT: checking the moved-from state
    EXPECT_EQ(moved.get(), raw[0]);
    const int released = write_end.release();
    EXPECT_FALSE(write_end.valid());
    write_end.reset(released);  // owned again
    EXPECT_TRUE(is_open(raw[0]) && is_open(raw[1]));
    moved.reset();
    EXPECT_FALSE(is_open(raw[0]));
  }
  EXPECT_FALSE(is_open(raw[1]));
  EXPECT_FALSE(FileDescriptor().valid());
}

}  // namespace
}  // namespace shmccl::transport
