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

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

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

// Happens-before that travels through another process. TSan sees the synchronization between
// the threads of its own process only: when thread A publishes to the peers (a store in the
// control block), a peer acts on it, and thread B of this process then observes that peer, the
// order A -> B went through the peer's process, and TSan reported A's and B's accesses to a
// peer's buffer as a race (A read a peer's input in one collective, B wrote the output the peer
// put in the same memory for the next). Every publication to the peers releases, and every wait
// for them that succeeds acquires, one object per process: that states this order, and nothing
// finer. Nothing outside TSan builds.
#if defined(__SANITIZE_THREAD__)
inline char g_peer_order;
inline void release_to_peers() {
  __tsan_release(&g_peer_order);
}
inline void acquire_from_peers() {
  __tsan_acquire(&g_peer_order);
}
#else
inline void release_to_peers() {}
inline void acquire_from_peers() {}
#endif

}  // namespace shmccl::detail
