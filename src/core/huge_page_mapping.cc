// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/huge_page_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace shmccl::detail {
namespace {

// MADV_COLLAPSE (Linux 6.1), which glibc's <sys/mman.h> before 2.37 does not name.
constexpr int kMadviseCollapse = 25;

}  // namespace

void* map_shared_huge_aligned(int fd, size_t bytes, int extra_flags) {
  const size_t reserved = bytes + kHugePageBytes;
  void* region =
      ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return MAP_FAILED;
  const auto start = reinterpret_cast<uintptr_t>(region);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  void* address = ::mmap(reinterpret_cast<void*>(aligned), bytes, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_FIXED | extra_flags, fd, 0);
  if (address == MAP_FAILED) {
    const int error = errno;
    ::munmap(region, reserved);
    errno = error;
    return MAP_FAILED;
  }
  if (aligned > start) ::munmap(region, aligned - start);
  // The mapping ends at a page boundary, whatever `bytes` is.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (const uintptr_t end = (aligned + bytes + page - 1) & ~(page - 1); start + reserved > end) {
    ::munmap(reinterpret_cast<void*>(end), start + reserved - end);
  }
  return address;
}

int collapse_into_huge_pages(void* address, size_t bytes) {
  return ::madvise(address, bytes, kMadviseCollapse) == 0 ? 0 : errno;
}

}  // namespace shmccl::detail
