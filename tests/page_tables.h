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

// The value of `field` ("AnonHugePages", "VmFlags", ...) in /proc/self/smaps for the mapping
// that holds `address`: the text after the colon, spaces trimmed; empty when there is none.
inline std::string smaps_field(const void* address, const std::string& field) {
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
    if (inside && line.rfind(field + ":", 0) == 0) {
      const size_t first = line.find_first_not_of(' ', field.size() + 1);
      return first == std::string::npos ? std::string() : line.substr(first);
    }
  }
  return {};
}

// A size field ("ShmemPmdMapped: 2048 kB") of the mapping that holds `address`, in bytes; -1
// when no mapping holds it.
inline int64_t smaps_bytes(const void* address, const std::string& field) {
  long kib = 0;
  return std::sscanf(smaps_field(address, field).c_str(), "%ld kB", &kib) == 1
             ? static_cast<int64_t>(kib) * 1024
             : -1;
}

// Bytes of the mapping that holds `address` that this process maps with 2 MiB entries
// (ShmemPmdMapped); -1 when no mapping holds it.
inline int64_t pmd_mapped_bytes(const void* address) {
  return smaps_bytes(address, "ShmemPmdMapped");
}

// Bytes of the mapping that holds `address` in anonymous 2 MiB pages (AnonHugePages); -1 when no
// mapping holds it.
inline int64_t anon_huge_bytes(const void* address) {
  return smaps_bytes(address, "AnonHugePages");
}

// Whether the mapping that holds `address` was advised MADV_HUGEPAGE (VmFlags "hg").
inline bool advised_huge_pages(const void* address) {
  return (" " + smaps_field(address, "VmFlags") + " ").find(" hg ") != std::string::npos;
}

// Whether this kernel takes MADV_HUGEPAGE at all: one built without transparent huge pages
// refuses it (EINVAL) and has no such directory.
inline bool kernel_takes_huge_page_advice() {
  return ::access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

// Whether this kernel gives private memory advised MADV_HUGEPAGE 2 MiB pages when it is first
// touched: asked of a mapping of our own, not of the object under test.
inline bool kernel_makes_anonymous_huge_pages() {
  constexpr size_t kHuge = detail::kHugePageBytes;
  void* mapping =
      ::mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return false;
  char* aligned =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mapping) + kHuge - 1) / kHuge * kHuge);
  bool huge = false;  // (2 MiB of the mapping's 4 always start on a 2 MiB boundary)
  if (::madvise(aligned, kHuge, MADV_HUGEPAGE) == 0) {
    aligned[0] = 1;
    huge = anon_huge_bytes(aligned) > 0;
  }
  ::munmap(mapping, 2 * kHuge);
  return huge;
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
