// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tests of the simulated NPU's memory arena: reservation and per-segment commit, address-space
// and machine-memory exhaustion as OutOfMemoryError, and mapping an arena across real processes.
#include "device/arena.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/file_descriptor.h"
#include "page_tables.h"
#include "shmccl/error.hpp"
#include "syscall_filter.h"

namespace shmccl::device {
namespace {

using ::testing::HasSubstr;
using testing::kernel_makes_huge_pages;
using testing::minor_faults;
using testing::pmd_mapped_bytes;

constexpr uint64_t kMiB = 1ull << 20;

// Bytes of physical memory behind the memfd `fd` (shmem counts allocated pages exactly).
uint64_t physical_bytes(int fd) {
  struct stat status {};
  EXPECT_EQ(::fstat(fd, &status), 0);
  return static_cast<uint64_t>(status.st_blocks) * 512;
}

// The what() of the exception of type E that `body` throws; a test failure if it throws none.
template <typename E>
std::string error_text(const std::function<void()>& body) {
  try {
    body();
  } catch (const E& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

void write_all(int fd, const void* data, size_t bytes) {
  auto p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n <= 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(100);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

bool read_all(int fd, void* data, size_t bytes) {
  auto p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// Two pipes between this process and a forked child, closed on scope exit.
struct Channel {
  int to_parent[2] = {-1, -1};
  int to_child[2] = {-1, -1};
  Channel() {
    EXPECT_EQ(::pipe(to_parent), 0);
    EXPECT_EQ(::pipe(to_child), 0);
  }
  ~Channel() {
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]})
      ::close(fd);
  }
};

// Forks; the child runs `child` and exits with its result (any exception: 99). Returns the
// child's pid; `wait_child` reaps it and returns its exit code (-1 on a signal).
pid_t fork_child(const std::function<int()>& child) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = child();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child: %s\n", error.what());
    }
    ::_exit(code);
  }
  EXPECT_GT(pid, 0);
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint8_t pattern(uint64_t i, uint8_t seed) {
  return static_cast<uint8_t>(i * 131 + seed);
}

void fill(char* p, uint64_t bytes, uint8_t seed) {
  for (uint64_t i = 0; i < bytes; ++i)
    p[i] = static_cast<char>(pattern(i, seed));
}

bool check(const char* p, uint64_t bytes, uint8_t seed) {
  for (uint64_t i = 0; i < bytes; ++i) {
    if (static_cast<uint8_t>(p[i]) != pattern(i, seed)) return false;
  }
  return true;
}

TEST(ArenaTest, ReservesSparselyAndCommitsPerSegment) {
  Arena arena(3, 64 * kMiB);
  EXPECT_EQ(arena.device(), 3);
  EXPECT_EQ(arena.capacity(), 64 * kMiB);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  const int fd = arena.handle().fd;
  EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes);  // only the header page

  char name[256] = {};
  ASSERT_GT(::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), name, sizeof(name) - 1), 0);
  EXPECT_THAT(name, HasSubstr("memfd:shmccl-npu3"));

  const uint64_t offset = arena.allocate_segment(1);
  EXPECT_EQ(offset % Arena::kSegmentGranularity, 0u);
  EXPECT_EQ(arena.committed_bytes(), 2 * kMiB);
  EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes + 2 * kMiB);
  std::memset(arena.base() + offset, 0xab, 2 * kMiB);
  EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes + 2 * kMiB);  // writing added no pages

  arena.free_segment(offset, 1);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes);

  // Recommitted memory is fresh zero pages, at the same (first-fit) place.
  EXPECT_EQ(arena.allocate_segment(2 * kMiB), offset);
  EXPECT_EQ(arena.base()[offset], 0);
  EXPECT_EQ(arena.base()[offset + 2 * kMiB - 1], 0);
  EXPECT_TRUE(arena.contains(arena.base()));
  EXPECT_FALSE(arena.contains(arena.base() + arena.capacity()));
  EXPECT_FALSE(arena.contains(arena.base() - 1));
}

TEST(ArenaTest, RoundsCapacityAndSegmentsToGranularity) {
  // A capacity below one segment still holds one: every byte of it can be allocated.
  Arena tiny(0, 1);
  EXPECT_EQ(tiny.capacity(), 2 * kMiB);
  EXPECT_EQ(tiny.allocate_segment(1), 0u);
  EXPECT_THROW(tiny.allocate_segment(1), OutOfMemoryError);
  Arena odd(0, 3 * kMiB);
  EXPECT_EQ(odd.capacity(), 4 * kMiB);
  EXPECT_EQ(odd.allocate_segment(2 * kMiB + kMiB / 2), 0u);

  Arena arena(0, 16 * kMiB);
  EXPECT_EQ(arena.allocate_segment(2 * kMiB + 1), 0u);
  EXPECT_EQ(arena.committed_bytes(), 4 * kMiB);
  EXPECT_EQ(arena.allocate_segment(1), 4 * kMiB);
  EXPECT_THROW(arena.allocate_segment(0), InvalidArgument);
}

TEST(ArenaTest, FreedRangesCoalesce) {
  Arena arena(0, 8 * kMiB);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 4; ++i)
    offsets.push_back(arena.allocate_segment(2 * kMiB));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 2 * kMiB, 4 * kMiB, 6 * kMiB}));
  EXPECT_THROW(arena.allocate_segment(2 * kMiB), OutOfMemoryError);

  arena.free_segment(2 * kMiB, 2 * kMiB);
  arena.free_segment(4 * kMiB, 2 * kMiB);
  EXPECT_EQ(arena.allocate_segment(4 * kMiB), 2 * kMiB);  // the two holes merged
  arena.free_segment(0, 2 * kMiB);
  arena.free_segment(6 * kMiB, 2 * kMiB);
  arena.free_segment(2 * kMiB, 4 * kMiB);
  EXPECT_EQ(arena.committed_bytes(), 0u);
  EXPECT_EQ(arena.allocate_segment(8 * kMiB), 0u);  // all of it is one range again
}

TEST(ArenaTest, OutOfAddressSpaceNamesTheSizes) {
  Arena arena(5, 8 * kMiB);
  EXPECT_EQ(error_text<OutOfMemoryError>([&] { arena.allocate_segment(16 * kMiB); }),
            "NPU 5 arena: no free range for a segment of 16.00 MiB (requested 16777216 bytes); "
            "0 bytes committed of 8.00 MiB capacity, largest free range 8.00 MiB");
  arena.allocate_segment(6 * kMiB);
  EXPECT_EQ(error_text<OutOfMemoryError>([&] { arena.allocate_segment(3 * kMiB); }),
            "NPU 5 arena: no free range for a segment of 4.00 MiB (requested 3145728 bytes); "
            "6.00 MiB committed of 8.00 MiB capacity, largest free range 2.00 MiB");
  arena.allocate_segment(2 * kMiB);
  EXPECT_EQ(error_text<OutOfMemoryError>([&] { arena.allocate_segment(1); }),
            "NPU 5 arena: no free range for a segment of 2.00 MiB (requested 1 bytes); "
            "8.00 MiB committed of 8.00 MiB capacity, largest free range 0 bytes");
  EXPECT_EQ(arena.committed_bytes(), 8 * kMiB);  // the failures changed nothing
}

TEST(ArenaTest, FreeSegmentRejectsUnknownRanges) {
  Arena arena(0, 8 * kMiB);
  const uint64_t offset = arena.allocate_segment(4 * kMiB);
  EXPECT_THAT(error_text<Error>([&] { arena.free_segment(offset + 2 * kMiB, 2 * kMiB); }),
              HasSubstr("does not match a segment (none starts there)"));
  EXPECT_THAT(error_text<Error>([&] { arena.free_segment(offset, 2 * kMiB); }),
              HasSubstr("(the one there has 4194304 bytes)"));
  arena.free_segment(offset, 4 * kMiB);
  EXPECT_THROW(arena.free_segment(offset, 4 * kMiB), Error);  // double free
}

TEST(ArenaTest, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(64 * 1024), "64.00 KiB");
  EXPECT_EQ(format_bytes(2 * kMiB), "2.00 MiB");
  EXPECT_EQ(format_bytes(3 * kMiB / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes(16ull << 30), "16.00 GiB");
}

// A commit the machine cannot back must be an exception at allocation time, not a SIGBUS when
// the memory is first touched. A cgroup-v1 memory limit with the OOM killer disabled makes
// fallocate fail with ENOMEM in a child process; skipped where no such cgroup can be made.
TEST(ArenaTest, FailedCommitThrowsInsteadOfSigbus) {
#if defined(__SANITIZE_THREAD__)
  // TSan's shadow memory does not fit a 32 MiB cgroup, and with the OOM killer disabled the
  // child would block on memory instead of failing: the plain and ASan builds run this test.
  GTEST_SKIP() << "not under ThreadSanitizer";
#endif
  const std::string cgroup =
      "/sys/fs/cgroup/memory/shmccl-arena-test-" + std::to_string(::getpid());
  if (::mkdir(cgroup.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create a memory cgroup: " << std::strerror(errno);
  }
  auto write_file = [](const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.flush();
    return static_cast<bool>(out);
  };
  auto read_number = [](const std::string& path) {
    std::ifstream in(path);
    uint64_t value = 0;
    in >> value;
    return in ? value : 0;
  };
  const bool limited = write_file(cgroup + "/memory.oom_control", "1");
  Channel channel;
  pid_t child = -1;
  if (limited) {
    child = fork_child([&]() -> int {
      if (!write_file(cgroup + "/cgroup.procs", std::to_string(::getpid()))) return 77;
      Arena arena(0, 256 * kMiB);
      // Room for 8 segments and 1 MiB more: the 9th commit fails and leaves that MiB for the
      // error's allocations. A page fault over the limit, with the OOM killer off, would sleep
      // forever: a limit fixed in advance left 0-2 MiB, and under ASan, whose allocator takes
      // fresh pages for the exception, the child hung there (5 runs of 5 on one machine).
      const uint64_t usage = read_number(cgroup + "/memory.usage_in_bytes");
      if (usage == 0 ||
          !write_file(cgroup + "/memory.limit_in_bytes", std::to_string(usage + 17 * kMiB))) {
        return 77;
      }
      std::vector<uint64_t> offsets;
      std::string message;
      try {
        for (int i = 0; i < 128; ++i) {
          offsets.push_back(arena.allocate_segment(2 * kMiB));
          std::memset(arena.base() + offsets.back(), 1, 2 * kMiB);
        }
        return 3;  // the limit did not bite
      } catch (const OutOfMemoryError& error) {
        message = error.what();
      }
      write_all(channel.to_parent[1], message.data(), message.size());
      if (offsets.size() < 7 || offsets.size() > 8 ||
          arena.committed_bytes() != offsets.size() * 2 * kMiB)
        return 4;
      // Nothing of the failed commit stayed behind: a freed segment can be committed again.
      arena.free_segment(offsets.back(), 2 * kMiB);
      if (arena.allocate_segment(2 * kMiB) != offsets.back()) return 5;
      return 0;
    });
  }
  ::close(channel.to_parent[1]);
  channel.to_parent[1] = -1;
  std::string message(4096, '\0');
  ssize_t got = child > 0 ? ::read(channel.to_parent[0], message.data(), message.size()) : 0;
  message.resize(got > 0 ? static_cast<size_t>(got) : 0);
  const int code = child > 0 ? wait_child(child) : 77;
  for (int attempt = 0; attempt < 100 && ::rmdir(cgroup.c_str()) != 0; ++attempt)
    ::usleep(10000);
  if (code == 77) GTEST_SKIP() << "cannot limit memory with the cgroup";
  EXPECT_EQ(code, 0) << message;
  EXPECT_THAT(message, HasSubstr("NPU 0 arena: cannot commit a segment of 2.00 MiB"));
  EXPECT_THAT(message, HasSubstr("fallocate: Cannot allocate memory"));
  EXPECT_THAT(message, HasSubstr("of 256.00 MiB capacity"));
}

TEST(ArenaMappingTest, SameProcessMappingAliasesTheArena) {
  Arena arena(2, 8 * kMiB);
  const uint64_t offset = arena.allocate_segment(2 * kMiB);
  auto mapping = ArenaMapping::open(arena.handle());
  EXPECT_EQ(mapping->capacity(), arena.capacity());
  EXPECT_NE(mapping->base(), arena.base());
  fill(arena.base() + offset, 4096, 7);
  EXPECT_TRUE(check(mapping->base() + offset, 4096, 7));
  fill(mapping->base() + offset, 4096, 9);
  EXPECT_TRUE(check(arena.base() + offset, 4096, 9));
}

// The child owns the arena; the parent maps it, reads the child's pattern and writes its own.
TEST(ArenaMappingTest, ParentMapsChildArena) {
  constexpr uint64_t kBytes = 2 * kMiB;
  Channel channel;
  pid_t child = fork_child([&]() -> int {
    Arena arena(1, 16 * kMiB);
    arena.allocate_segment(2 * kMiB);  // so the shared segment is not at offset 0
    const uint64_t offset = arena.allocate_segment(kBytes);
    fill(arena.base() + offset, kBytes, 1);
    const ArenaHandle handle = arena.handle();
    write_all(channel.to_parent[1], &handle, sizeof(handle));
    write_all(channel.to_parent[1], &offset, sizeof(offset));
    char done = 0;
    if (!read_all(channel.to_child[0], &done, 1)) return 2;
    return check(arena.base() + offset, kBytes, 2) ? 0 : 1;
  });
  ArenaHandle handle;
  uint64_t offset = 0;
  ASSERT_TRUE(read_all(channel.to_parent[0], &handle, sizeof(handle)));
  ASSERT_TRUE(read_all(channel.to_parent[0], &offset, sizeof(offset)));
  EXPECT_EQ(handle.pid, child);
  EXPECT_EQ(handle.device, 1);
  auto mapping = ArenaMapping::open(handle);
  EXPECT_EQ(mapping->capacity(), 16 * kMiB);
  EXPECT_EQ(offset, 2 * kMiB);
  EXPECT_TRUE(check(mapping->base() + offset, kBytes, 1));
  fill(mapping->base() + offset, kBytes, 2);
  write_all(channel.to_child[1], "x", 1);
  EXPECT_EQ(wait_child(child), 0);
  // The mapping keeps the memory alive after its owner is gone.
  EXPECT_TRUE(check(mapping->base() + offset, kBytes, 2));
}

// The minor faults this process takes while it fills `bytes` at `at` (from `seed`).
long faults_filling(char* at, uint64_t bytes, uint8_t seed) {
  const long before = minor_faults();
  fill(at, bytes, seed);
  return minor_faults() - before;
}

// The minor faults a fresh, unpopulated mapping of `arena` takes while it fills `bytes` at
// `offset`: what populate() is to save.
long faults_of_a_fresh_mapping(const Arena& arena, uint64_t offset, uint64_t bytes, uint8_t seed) {
  auto fresh = ArenaMapping::open(arena.handle());
  return faults_filling(fresh->base() + offset, bytes, seed);
}

// A peer's mapping filled by populate() takes no page fault per page when written; a range
// inside one already populated is remembered (no second madvise needed to stay fault-free).
// These fault counts need 4 KiB pages (huge pages: further down).
TEST(ArenaMappingTest, PopulateFillsThePageTablesOfAPeerMapping) {
#if defined(__SANITIZE_THREAD__)
  // Every write also faults in TSan's shadow memory (4 bytes per byte): the count says nothing.
  GTEST_SKIP() << "fault counts are meaningless under ThreadSanitizer";
#endif
  constexpr uint64_t kBytes = 8 * kMiB;  // 2048 pages
  Arena arena(5, 32 * kMiB, /*huge_pages=*/false);
  const uint64_t offset = arena.allocate_segment(kBytes);
  fill(arena.base() + offset, kBytes, 1);  // the owner's pages exist
  const long faults_without = faults_of_a_fresh_mapping(arena, offset, kBytes / 2, 2);

  auto mapping = ArenaMapping::open(arena.handle());
  mapping->populate(offset + 4096, kBytes / 4);          // the first quarter, unaligned
  mapping->populate(offset + kBytes / 4, kBytes / 4);    // adjacent: merged
  mapping->populate(offset + 8192, kBytes / 2 - 16384);  // covered: nothing to do
  const long faults_with = faults_filling(mapping->base() + offset + 4096, kBytes / 2 - 4096, 3);
  // Relative: under ASan the writes also fault in its shadow memory (one page per 8), alike in
  // both cases.
  EXPECT_GT(faults_without, 256) << "the unpopulated mapping should fault per page";
  EXPECT_LT(faults_with, faults_without / 4)
      << "the populated range faulted " << faults_with << " times, unpopulated " << faults_without;
  EXPECT_TRUE(check(arena.base() + offset + 4096, kBytes / 2 - 4096, 3));
  // Out-of-range requests are ignored, never an access beyond the arena.
  mapping->populate(arena.capacity() - 4096, 8192);
  mapping->populate(~uint64_t{0} - 10, 100);
}

// populate(touch = true) prefaults like populate() and then reads every page, also over a range
// populated before without touching: the page tables are filled and the owner's data is intact.
// (What touching saves, a trap per page under shadow paging, is invisible from inside the guest.)
TEST(ArenaMappingTest, PopulateWithTouchKeepsTheDataAndFillsThePageTables) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fault counts are meaningless under ThreadSanitizer";
#endif
  constexpr uint64_t kBytes = 8 * kMiB;  // 2048 pages
  Arena arena(7, 32 * kMiB, /*huge_pages=*/false);
  const uint64_t offset = arena.allocate_segment(kBytes);
  fill(arena.base() + offset, kBytes, 1);
  const long faults_without = faults_of_a_fresh_mapping(arena, offset, kBytes / 2, 1);

  auto mapping = ArenaMapping::open(arena.handle());
  mapping->populate(offset, kBytes / 4);                   // populated only
  mapping->populate(offset, kBytes / 2, /*touch=*/true);   // covers it and more: touched whole
  mapping->populate(offset + 4096, 8192, /*touch=*/true);  // covered: nothing to do
  EXPECT_TRUE(check(mapping->base() + offset, kBytes, 1)) << "touching changed the data";
  const long faults_with = faults_filling(mapping->base() + offset, kBytes / 2, 4);
  EXPECT_GT(faults_without, 256) << "the unpopulated mapping should fault per page";
  EXPECT_LT(faults_with, faults_without / 4)
      << "the touched range faulted " << faults_with << " times, unpopulated " << faults_without;
  EXPECT_TRUE(check(arena.base() + offset, kBytes / 2, 4));
  EXPECT_TRUE(check(arena.base() + offset + kBytes / 2, kBytes / 2, 1));
  mapping->populate(arena.capacity() - 4096, 8192, /*touch=*/true);  // out of range: ignored
}

// The owner decommitting a segment empties the peers' page tables there: a range populated
// before is populated again when it comes back (npu::empty_cache(), then a new tensor).
TEST(ArenaMappingTest, PopulateStartsOverAfterTheOwnerDecommits) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fault counts are meaningless under ThreadSanitizer";
#endif
  constexpr uint64_t kBytes = 8 * kMiB;  // 2048 pages
  Arena arena(6, 32 * kMiB, /*huge_pages=*/false);
  const uint64_t offset = arena.allocate_segment(kBytes);
  fill(arena.base() + offset, kBytes, 1);
  auto mapping = ArenaMapping::open(arena.handle());
  mapping->populate(offset, kBytes);
  arena.free_segment(offset, kBytes);
  ASSERT_EQ(arena.allocate_segment(kBytes), offset) << "the test needs the same range back";
  fill(arena.base() + offset, kBytes, 2);  // the owner's new pages
  mapping->populate(offset, kBytes);
  const long faults = faults_filling(mapping->base() + offset, kBytes, 3);
  EXPECT_LT(faults, 2048 / 4) << "the range was not populated again";
  EXPECT_TRUE(check(arena.base() + offset, kBytes, 3));
}

// Committed segments are 2 MiB pages: the owner and a peer that populates map them with an
// entry per 2 MiB, writing them faults a handful of times instead of once a page, a decommit
// frees them whole, and a recommitted range is huge again. With huge_pages = false, 4 KiB pages.
TEST(ArenaTest, SegmentsAreHugePagesWhereTheKernelCan) {
  if (!kernel_makes_huge_pages()) GTEST_SKIP() << "this kernel makes no 2 MiB pages of a memfd";
  constexpr uint64_t kBytes = 8 * kMiB;
  Arena arena(4, 32 * kMiB);
  const int fd = arena.handle().fd;
  for (int round = 0; round < 2; ++round) {  // the second: after a decommit
    const uint64_t offset = arena.allocate_segment(kBytes);
    // A busy machine may have no free 2 MiB for a while (ENOMEM), which the arena takes in its
    // stride; only a kernel that still makes them for the probe makes 4 KiB pages a failure.
    if (arena.huge_page_bytes() < kBytes && !kernel_makes_huge_pages()) {
      GTEST_SKIP() << "the kernel has no 2 MiB pages to give now";
    }
    EXPECT_EQ(arena.huge_page_bytes(), kBytes) << "round " << round;
    EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes + kBytes);
    EXPECT_EQ(pmd_mapped_bytes(arena.base() + offset), static_cast<int64_t>(kBytes));
    fill(arena.base() + offset, kBytes, static_cast<uint8_t>(round + 1));

    auto peer = ArenaMapping::open(arena.handle());
    EXPECT_EQ(pmd_mapped_bytes(peer->base() + offset), 0);
    peer->populate(offset + 4096, kBytes - 8192);  // the kernel maps the whole 2 MiB pages
    EXPECT_EQ(pmd_mapped_bytes(peer->base() + offset), static_cast<int64_t>(kBytes));
    EXPECT_TRUE(check(peer->base() + offset, kBytes, static_cast<uint8_t>(round + 1)));
    [[maybe_unused]] const long faults = faults_filling(peer->base() + offset, kBytes, 9);
#if !defined(__SANITIZE_THREAD__)  // TSan's shadow memory faults too
    EXPECT_LT(faults, 64) << "2048 4 KiB pages";
#endif
    EXPECT_TRUE(check(arena.base() + offset, kBytes, 9));

    arena.free_segment(offset, kBytes);
    EXPECT_EQ(arena.huge_page_bytes(), 0u);
    EXPECT_EQ(physical_bytes(fd), Arena::kHeaderPageBytes) << "the huge pages were not freed";
  }

  Arena small_pages(4, 32 * kMiB, /*huge_pages=*/false);
  const uint64_t offset = small_pages.allocate_segment(kBytes);
  EXPECT_EQ(small_pages.huge_page_bytes(), 0u);
  fill(small_pages.base() + offset, kBytes, 1);
  EXPECT_EQ(pmd_mapped_bytes(small_pages.base() + offset), 0);
}

// The parent owns the arena; a child maps it through pidfd_getfd of its parent.
TEST(ArenaMappingTest, ChildMapsParentArena) {
  constexpr uint64_t kBytes = 4 * kMiB;
  Arena arena(4, 32 * kMiB);
  const uint64_t offset = arena.allocate_segment(kBytes);
  fill(arena.base() + offset, kBytes, 3);
  const ArenaHandle handle = arena.handle();
  pid_t child = fork_child([&]() -> int {
    auto mapping = ArenaMapping::open(handle);
    if (mapping->base() == arena.base()) return 3;
    if (!check(mapping->base() + offset, kBytes, 3)) return 1;
    fill(mapping->base() + offset, kBytes, 4);
    return 0;
  });
  EXPECT_EQ(wait_child(child), 0);
  EXPECT_TRUE(check(arena.base() + offset, kBytes, 4));
}

// Where pidfd_getfd is refused (Yama's ptrace_scope 1 between siblings, EPERM; kernels before
// 5.6 and valgrind, ENOSYS), a peer's arena is opened through /proc/<pid>/fd/<n>, with the same
// checks and the same errors.
TEST(ArenaMappingTest, ChildMapsParentArenaWhenPidfdGetfdIsRefused) {
  constexpr uint64_t kBytes = 4 * kMiB;
  Arena arena(4, 32 * kMiB);
  const uint64_t offset = arena.allocate_segment(kBytes);
  fill(arena.base() + offset, kBytes, 5);
  const ArenaHandle handle = arena.handle();
  for (int error : {EPERM, ENOSYS}) {
    pid_t child = fork_child([&]() -> int {
      testing::refuse_syscalls({SYS_pidfd_getfd, SYS_pidfd_open}, error);
      auto mapping = ArenaMapping::open(handle);
      if (!check(mapping->base() + offset, kBytes, 5)) return 1;
      fill(mapping->base() + offset, kBytes, 6);
      ArenaHandle bad = handle;
      bad.fd = 1 << 20;
      if (error_text<RemoteError>([&] { ArenaMapping::open(bad); }).find("has no open fd") ==
          std::string::npos) {
        return 2;
      }
      bad = handle;
      bad.token ^= 1;
      if (error_text<RemoteError>([&] { ArenaMapping::open(bad); }).find("token mismatch") ==
          std::string::npos) {
        return 3;
      }
      return 0;
    });
    EXPECT_EQ(wait_child(child), 0) << std::strerror(error);
    EXPECT_TRUE(check(arena.base() + offset, kBytes, 6)) << std::strerror(error);
    fill(arena.base() + offset, kBytes, 5);
  }
}

TEST(ArenaMappingTest, MismatchedHandlesAreRemoteErrors) {
  Arena arena(2, 8 * kMiB);
  const ArenaHandle good = arena.handle();
  const std::string pid = std::to_string(::getpid());

  ArenaHandle bad = good;
  bad.token ^= 1;
  std::string text = error_text<RemoteError>([&] { ArenaMapping::open(bad); });
  EXPECT_THAT(text, HasSubstr("process " + pid));
  EXPECT_THAT(text, HasSubstr("token mismatch"));

  bad = good;
  bad.device = 3;
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(bad); }),
              HasSubstr("device mismatch: handle has 3, arena header has 2"));

  bad = good;
  bad.capacity += 4096;
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(bad); }),
              HasSubstr("fd is not the arena: size 10485760 bytes, expected 10489856"));

  Arena other(2, 8 * kMiB);  // same size and device, different token
  bad = other.handle();
  bad.token = good.token;
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(bad); }),
              HasSubstr("token mismatch"));

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  bad = good;
  bad.fd = pipe_fds[0];
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(bad); }),
              HasSubstr("fd is not the arena"));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  bad.fd = 1 << 20;  // not open (a just-closed low number could be reused by open's own pidfd)
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(bad); }),
              HasSubstr("has no open fd 1048576"));

  bad = good;
  bad.capacity = 0;
  EXPECT_THROW(ArenaMapping::open(bad), InvalidArgument);
}

// Peers hold the arena's fd read-write; sealed, none can resize it under the others' mappings.
// A mapper refuses a file of the right size and header that is not sealed.
TEST(ArenaMappingTest, TheArenaCannotBeResizedAndAnUnsealedFileIsRefused) {
  Arena arena(2, 8 * kMiB);
  const ArenaHandle good = arena.handle();
  const auto file_bytes = static_cast<off_t>(Arena::kHeaderBytes + arena.capacity());
  EXPECT_EQ(::ftruncate(good.fd, file_bytes - 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(good.fd, file_bytes + 4096), -1);
  EXPECT_EQ(errno, EPERM);
  const uint64_t offset = arena.allocate_segment(2 * kMiB);  // commits and decommits still work
  fill(arena.base() + offset, 4096, 5);
  arena.free_segment(offset, 2 * kMiB);

  // A copy of the arena's file (header page included), without the seals.
  const int copy = ::memfd_create("not-an-arena", MFD_CLOEXEC);
  ASSERT_GE(copy, 0);
  ASSERT_EQ(::ftruncate(copy, file_bytes), 0);
  char header[Arena::kHeaderPageBytes];
  ASSERT_EQ(::pread(good.fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  ASSERT_EQ(::pwrite(copy, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  ArenaHandle unsealed = good;
  unsealed.fd = copy;
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(unsealed); }),
              HasSubstr("fd is not the arena: not sealed against resizing"));
  ::close(copy);
  EXPECT_NE(ArenaMapping::open(good), nullptr);
}

TEST(ArenaMappingTest, DeadOwnerIsARemoteError) {
  Channel channel;
  pid_t child = fork_child([&]() -> int {
    Arena arena(1, 8 * kMiB);
    const ArenaHandle handle = arena.handle();
    write_all(channel.to_parent[1], &handle, sizeof(handle));
    return 0;
  });
  ArenaHandle handle;
  ASSERT_TRUE(read_all(channel.to_parent[0], &handle, sizeof(handle)));
  const std::string gone = "process " + std::to_string(child) + " is gone";

  // A zombie: exited, not yet reaped.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(handle); }), HasSubstr(gone));

  // Reaped: the pid no longer exists.
  EXPECT_EQ(wait_child(child), 0);
  EXPECT_THAT(error_text<RemoteError>([&] { ArenaMapping::open(handle); }), HasSubstr(gone));
}

// The same where pidfds are refused: the /proc way tells a dead owner from a missing fd.
TEST(ArenaMappingTest, DeadOwnerIsARemoteErrorWhenPidfdsAreRefused) {
  pid_t checker = fork_child([&]() -> int {
    testing::refuse_syscalls({SYS_pidfd_getfd, SYS_pidfd_open}, ENOSYS);
    Channel channel;
    pid_t owner = fork_child([&]() -> int {
      Arena arena(1, 8 * kMiB);
      const ArenaHandle handle = arena.handle();
      write_all(channel.to_parent[1], &handle, sizeof(handle));
      return 0;
    });
    ArenaHandle handle;
    if (!read_all(channel.to_parent[0], &handle, sizeof(handle))) return 1;
    const std::string gone = "process " + std::to_string(owner) + " is gone";
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(owner), &info, WEXITED | WNOWAIT) != 0) return 2;
    if (error_text<RemoteError>([&] { ArenaMapping::open(handle); }).find(gone) ==
        std::string::npos) {
      return 3;  // a zombie
    }
    if (wait_child(owner) != 0) return 4;
    if (error_text<RemoteError>([&] { ArenaMapping::open(handle); }).find(gone) ==
        std::string::npos) {
      return 5;  // reaped
    }
    return 0;
  });
  EXPECT_EQ(wait_child(checker), 0);
}

}  // namespace
}  // namespace shmccl::device
