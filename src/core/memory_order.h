// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Fences, and what stands in for them under ThreadSanitizer.
//
// TSan does not model std::atomic_thread_fence (GCC 12 rejects it with -Werror=tsan), so a TSan
// build orders the accesses themselves instead: a seqlock writer's relaxed field stores become
// release stores (each keeps the version's earlier 0 before it, as the release fence did) and a
// reader's relaxed field loads become acquire loads (each stays before the version's re-read, as
// the acquire fence did). Slower, and only there.
#pragma once

#include <atomic>

namespace shmccl::detail {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// The orders of a seqlock's data fields (see collectives/flight_recorder.h).
inline constexpr std::memory_order kSeqlockStore =
    kThreadSanitizer ? std::memory_order_release : std::memory_order_relaxed;
inline constexpr std::memory_order kSeqlockLoad =
    kThreadSanitizer ? std::memory_order_acquire : std::memory_order_relaxed;

// std::atomic_thread_fence(order); nothing under TSan, where the accesses carry the order.
inline void fence([[maybe_unused]] std::memory_order order) {
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(order);
#endif
}

}  // namespace shmccl::detail
