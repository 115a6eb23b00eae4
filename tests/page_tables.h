// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// What the kernel did with a process's mappings, for tests of huge pages and page faults: the
// minor faults taken so far, whether a page is mapped, the bytes a mapping maps with 2 MiB
// entries, and whether this kernel makes 2 MiB pages of shared memory on request at all (Linux
// 6.1, transparent huge pages).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/file_descriptor.h"
#include "core/huge_page_mapping.h"

namespace shmccl::testing {

inline long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Whether this process's page table maps the page that holds `address` (bit 63 of its
// /proc/self/pagemap entry); false when the entry cannot be read.
inline bool page_mapped(const void* address) {
  const auto page_size = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  FileDescriptor pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (pagemap.get() < 0) return false;
  // Whole 8-byte entries only: a buffered stream's reads are refused.
  uint64_t entry = 0;
  const off_t at =
      static_cast<off_t>(reinterpret_cast<uintptr_t>(address) / page_size * sizeof(entry));
  if (::pread(pagemap.get(), &entry, sizeof(entry), at) != sizeof(entry)) return false;
  return (entry >> 63) != 0;
}

// Bytes of the mapping that holds `address` that this process maps with 2 MiB entries
// (/proc/self/smaps, ShmemPmdMapped); -1 when no mapping holds it.
inline int64_t pmd_mapped_bytes(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0;
    uintptr_t end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 &&
        line.find('-') < line.find(' ')) {
      inside = target >= start && target < end;
      continue;
    }
    long kib = 0;
    if (inside && std::sscanf(line.c_str(), "ShmemPmdMapped: %ld kB", &kib) == 1) {
      return static_cast<int64_t>(kib) * 1024;
    }
  }
  return -1;
}

// Whether this kernel turns a committed range of shared memory into 2 MiB pages on request:
// asked of a memfd of our own, not of the object under test.
inline bool kernel_makes_huge_pages() {
  constexpr size_t kBytes = 2 * detail::kHugePageBytes;
  FileDescriptor fd(::memfd_create("shmccl-huge-probe", MFD_CLOEXEC));
  if (fd.get() < 0 || ::fallocate(fd.get(), 0, 0, static_cast<off_t>(kBytes)) != 0) return false;
  void* mapping = detail::map_shared_huge_aligned(fd.get(), kBytes);
  if (mapping == MAP_FAILED) return false;
  const bool huge = detail::collapse_into_huge_pages(mapping, kBytes) == 0;
  ::munmap(mapping, kBytes);
  return huge;
}

}  // namespace shmccl::testing
