// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Prefetches that say what the line is for. A prefetch for write asks for the line in the
// exclusive state: a line that peers on other cores have read must be taken back from them before
// a store to it can complete, and asked for early that transfer overlaps other work instead of
// stalling the store (or the fence or full store buffer behind it).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace shmccl::detail {

#if defined(__x86_64__) || defined(__i386__)
// PREFETCHW (CPUID 0x80000001 ECX bit 8, "3dnowprefetch"). GCC emits it for a write prefetch only
// when the whole build targets it, so it is issued here when the CPU has it (every x86-64 CPU since
// about 2014) and replaced by a plain prefetch where it does not.
inline const bool kHasPrefetchW = [] {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 8)) != 0;
}();
#endif

inline void prefetch_for_write(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  if (kHasPrefetchW) [[likely]] {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address)));
    return;
  }
  __builtin_prefetch(address, 0, 3);
#else
  __builtin_prefetch(address, 1, 3);
#endif
}

inline void prefetch_for_read(const void* address) {
  __builtin_prefetch(address, 0, 3);
}

}  // namespace shmccl::detail
