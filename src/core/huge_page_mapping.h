// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Shared mappings that can hold 2 MiB pages: device arenas and control blocks. The first touch of
// a 4 KiB page of a shared segment costs each process that maps it a page fault (1-16 us here,
// docs/performance.md "Cold pages"); a 2 MiB page costs one fault per 512 of them. The kernel maps
// a file's huge page with one entry only where the address and the file offset agree modulo
// 2 MiB, hence the aligned mapping.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmccl::detail {

inline constexpr uint64_t kHugePageBytes = 2ull << 20;

// Maps `bytes` of `fd` from offset 0, shared and read-write, at a 2 MiB boundary (an address
// range one huge page larger is reserved, the file mapped over its aligned part, the rest given
// back). `extra_flags` are added to MAP_SHARED | MAP_FIXED (MAP_NORESERVE, for one). Returns
// MAP_FAILED with errno set on failure, like mmap.
void* map_shared_huge_aligned(int fd, size_t bytes, int extra_flags = 0);

// Turns the pages of [address, address + bytes), whole 2 MiB pages of a file mapped by
// map_shared_huge_aligned, into 2 MiB pages (madvise MADV_COLLAPSE, Linux 6.1, whatever
// transparent_hugepage/shmem_enabled says). Returns 0, or the errno: EAGAIN, ENOMEM or EBUSY when
// no 2 MiB of memory can be had for now, EINVAL when the kernel cannot at all.
int collapse_into_huge_pages(void* address, size_t bytes);

}  // namespace shmccl::detail
