// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The layout of a group's control block: one shared-memory segment per process group, created by
// the group's first rank and mapped by every member. Everything here is read by processes that
// may be buggy, dead or hostile, so readers bounds-check every size and offset they take from it.
//
//   ControlHeader                       4 KiB   identity, work-pool counters, wake word, abort
//   RankSlot[world_size]               cache-line aligned, each holding the last kCallRing calls:
//     arrivals[kCallRing]      a line each   sequence, fingerprint, tiny payload
//     pid ... released         1 line        owner's pid, attach state, pool, host-staging and
//                                            pull progress, barrier release
//     descriptors[kCallRing]                 the calls
//     small_inline[kCallRing]  2 KiB each    payloads of 49 B to 2 KiB
//     inline_data[kInlineRing] 16 KiB each   payloads of 2 to 16 KiB (of the last 8 calls)
//
// Protocol of collective number `s` (1, 2, ...) on the group; its entry is e = s % kCallRing:
//   1. each rank writes its OpDescriptor into descriptors[e] of its own slot, its payload (if
//      the collective is small) into arrivals[e].payload or its inline area (inline_area()), the
//      call's fingerprint into arrivals[e], then release-stores arrivals[e].sequence = s;
//   2. each rank waits until every slot's arrivals[e].sequence == s (acquire) and compares
//      fingerprints (the full descriptors are read only to describe a mismatch). A collective
//      whose payload fits the 48 bytes of the arrival line costs one cache-line transfer per peer;
//   3. the ranks claim chunks of work, each rank's stripe of them (collectives/work_stripes.h)
//      from `stripe_claimed` in its slot, and count finished ones in the header's `done`; the
//      counters only grow, so no reset races between collectives;
//   4. a rank returns once `done >= pool_end`.
// A barrier adds one step to 2: rank 0 stores `released = s` in its slot once every rank has
// arrived, and the others wait for that too, so rank 0 leaves first (executor.cc says why).
// A collective with host tensors replaces 3-4 by the host-staging pipeline
// (collectives/host_pipeline.h): windows numbered like pool chunks (monotonic across
// collectives), with per-rank `staged`, `reduced` and `consumed` window counters in the slots.
// Some ranks need only some arrivals (a broadcast's ranks, a reduce-scatter rank that receives
// nothing) and may finish a small collective early, so ranks may be up to kCallRing - 1 calls
// apart. A rank writes entry e again at s + kCallRing only once every rank has arrived at
// s + 1 (so none reads call s any more) and it has compared every rank's fingerprint of call s
// (collectives/early_finish.h); likewise inline_data[s % kInlineRing] at s + kInlineRing.
// (Only 8 large inline areas, for memory: a slot is 494 KiB. The segment is rounded up to whole
// 2 MiB pages: see control_block_segment_bytes.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/huge_page_mapping.h"
#include "device/arena.h"

namespace shmccl::transport {

inline constexpr int kMaxRanks = 64;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kInlineBytes = 16 * 1024;
inline constexpr uint64_t kMaxChunkBytes =
    1ull << 30;  // the work pool's largest chunk  // small-collective payload per inline entry
// Calls a slot holds: how far ranks that finish early may run ahead of the slowest (Open MPI's
// eager sends let a broadcast's root run as far ahead as its buffers allow). A long loop of tiny
// broadcasts costs its receivers' wake-ups, context switches on a shared core, once per
// kCallRing - 1 calls: with 64, 0.34-0.55 us per call at 4 ranks on 2 cores, against 0.56-1.02
// us with 32 (1.1-1.4 us with 8; docs/performance.md). 64 is what `unchecked_`'s bits hold.
inline constexpr int kCallRing = 64;
// Payloads of 49 B to 2 KiB travel in one of kCallRing small inline areas, larger ones (up to
// 16 KiB) in one of kInlineRing large ones: fewer, for memory.
inline constexpr size_t kSmallInlineBytes = 2 * 1024;
inline constexpr int kInlineRing = 8;
inline constexpr uint64_t kControlMagic = 0x73686d63636c4342ull;  // "shmcclCB"
inline constexpr uint32_t kControlVersion = 19;

// The slot entry of collective `sequence`, and its inline area.
inline constexpr int ring_entry(uint64_t sequence) {
  return static_cast<int>(sequence % static_cast<uint64_t>(kCallRing));
}
// How many calls apart the uses of the place a payload of `bytes` travels in (inline or not) are.
inline constexpr uint64_t ring_of_payload(bool in_inline_area, uint64_t bytes) {
  return in_inline_area && bytes > kSmallInlineBytes ? kInlineRing : kCallRing;
}

// A buffer one rank exposes for one collective: where it lives in its owner's device arena.
// arena.pid == 0 means "no buffer".
struct BufferRef {
  device::ArenaHandle arena;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(BufferRef) == 48);

enum class OpKind : uint8_t {
  kNone = 0,
  kBarrier,
  kAllGather,      // into one tensor, uneven rows
  kAllGatherList,  // into a list of per-rank tensors
  kReduceScatter,  // uneven rows
  kAllReduce,
  kBroadcast,
};

// How a collective's data travels; every rank derives it from the call alone (and the
// fingerprint covers it), so all take the same path.
enum class Transfer : uint8_t {
  kArenas = 0,       // the work pool over peers' arenas, or the host-staging pipeline
  kInlineArea = 1,   // the slots' inline areas
  kArrivalLine = 2,  // the arrival lines themselves (a few dozen bytes)
  kPull = 3,         // a broadcast's receivers copy from the root's arena (pull_broadcast.h)
};

// What a rank called: compared across ranks before any data moves (mismatch detection) and
// printed on both sides when they disagree.
struct OpDescriptor {
  uint64_t sequence;
  OpKind kind;
  uint8_t dtype;
  uint8_t reduce_op;
  uint8_t transfer;  // a Transfer: how the data travels (part of the call's fingerprint)
  int32_t root;
  int64_t input_numel;
  int64_t output_numel;
  int64_t row_elements;  // elements per dim-0 row
  int32_t num_splits;
  uint8_t host_sides;   // kHostInput | kHostOutput: this rank's tensors on the host
  uint8_t uneven_name;  // called by the _uneven name (for messages; the forms interoperate)
  uint8_t reserved[2];
  uint64_t staging_window;       // this rank's host-staging window in bytes (host_staging.h)
  int64_t splits[kMaxRanks];     // rows per rank
  BufferRef input;               // an NPU input, or the rank's staging area when kHostInput
  BufferRef output;              // an NPU output (none when kHostOutput)
  BufferRef outputs[kMaxRanks];  // kAllGatherList: one output tensor per source rank
};

// OpDescriptor::host_sides.
inline constexpr uint8_t kHostInput = 1;
inline constexpr uint8_t kHostOutput = 2;

inline constexpr size_t kArrivalPayloadBytes = 48;
inline constexpr size_t kFailureTextBytes = 232;
inline constexpr size_t kCpuMaskWords = 16;  // 1024 CPUs, as a cpu_set_t

// A call's fingerprint: the hash of the fields same-call checks compare in the upper 48 bits, the
// low 16 bits of its sequence number below. A rank checking an earlier call's fingerprints reads
// entries their owners may be rewriting for a later call: the fingerprint alone says which call
// it belongs to (ranks are fewer than 2^16 calls apart).
inline constexpr uint64_t call_fingerprint(uint64_t sequence, uint64_t hash) {
  return (hash << 16) | (sequence & 0xFFFF);
}
inline constexpr bool fingerprint_of_call(uint64_t fingerprint, uint64_t sequence) {
  return ((fingerprint ^ sequence) & 0xFFFF) == 0;
}

// One cache line: a rank's arrival at a collective, with the call's fingerprint and, for tiny
// collectives, the data itself, so a peer gets all three with one line transfer.
struct alignas(kCacheLine) ArrivalLine {
  std::atomic<uint64_t> sequence;     // the collective this line describes (release-stored last)
  std::atomic<uint64_t> fingerprint;  // call_fingerprint() (atomic: read while being rewritten)
  unsigned char payload[kArrivalPayloadBytes];
};
static_assert(sizeof(ArrivalLine) == kCacheLine);

struct alignas(kCacheLine) RankSlot {
  // Written by the slot's owner only.
  ArrivalLine arrivals[kCallRing];  // by ring_entry(sequence)
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> attached;  // kAttached once the rank mapped the segment, kDetached after
  // The last collective whose work pool this rank left with no chunk of its own unfinished: a
  // timeout in the pool names the ranks behind (diagnostics only; never trusted for progress).
  std::atomic<uint64_t> pool_finished;
  // Host-staging pipeline progress, in windows (monotonic across collectives, like the pool's
  // chunk numbers): this rank's sources of windows below `staged` are readable; its reduced
  // shares of windows below `reduced` are final (all-reduce); it reads nothing of windows below
  // `consumed` any more. Readers check them against the collective's window range.
  std::atomic<uint64_t> staged;
  std::atomic<uint64_t> reduced;
  std::atomic<uint64_t> consumed;
  // The last pull broadcast this rank finished reading from its root (pull_broadcast.h).
  std::atomic<uint64_t> pulled;
  // Rank 0's slot only: the last barrier at which it saw every rank arrive. The other ranks
  // leave a barrier once it is there, so rank 0 always leaves first (executor.cc).
  std::atomic<uint64_t> released;
  // Non-zero when this rank waits for rank 0's barrier release (it runs oversubscribed); written
  // before it attaches. Rank 0 releases only when some rank waits.
  std::atomic<uint32_t> awaits_release;
  OpDescriptor descriptors[kCallRing];
  alignas(kCacheLine) unsigned char small_inline[kCallRing][kSmallInlineBytes];
  unsigned char inline_data[kInlineRing][kInlineBytes];
  // The first collective this rank takes no part in, 0 while it does: it failed a collective
  // (the one after it, or that one when it never arrived there) or destroyed its side of the
  // group. A peer waiting for it in that collective or a later one fails at once
  // (GroupTransport::healthy) instead of at its timeout. Read only when the header's
  // `departures` says some rank left.
  std::atomic<uint64_t> departed_at;
  // The collective this rank failed (gave up on), 0 before any. Set before the error reaches the
  // caller, who may then reuse its tensors: a pull broadcast's receiver checks its root's after
  // copying (executor.cc). A group that failed runs no more collectives. 64 bits, as are
  // pool_claimed and zero_copy_entered: the low 32 of collective 2^32 would read as 0 ("none"),
  // and a group reaches it (4.3 billion small calls) within hours.
  std::atomic<uint64_t> gave_up;
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  // Why this rank gave up on collective `gave_up`: a FailureKind and a text (NUL-terminated, cut
  // to fit), written before gave_up for the peers that find it there.
  uint32_t failure_kind;
  // The last collective in which this rank claimed a chunk of the work pool (stored at its first
  // claim): with `pool_finished` and `departed_at`, a peer tells a rank that failed the call
  // holding unfinished chunks, which no one else will finish.
  std::atomic<uint64_t> pool_claimed;

  // This rank's place among the group's departures (1 for the first), written before
  // departed_at: a rank that failed because another departed names that one, not itself.
  std::atomic<uint32_t> departure_order;
  // The whole CPUs this rank's cgroup lets it keep busy (core/cpu_quota.h), 0 without a limit;
  // written before it attaches, read with `cpus`.
  uint32_t cpu_quota;
  char failure[kFailureTextBytes];
  // The CPUs this rank may run on (its affinity mask, as a cpu_set_t), written before it
  // attaches: whether the group's ranks outnumber the cores they share is read off the union of
  // every rank's (a launcher that binds each rank to a core of its own oversubscribes nothing).
  uint64_t cpus[kCpuMaskWords];
  // Where this rank waits when ranks outnumber cores (transport/core_mates.h): the CPU it last
  // ran on, and the shared wait it is in (0: none). Written by the owner, read as a hint only.
  alignas(kCacheLine) std::atomic<uint32_t> wait_cpu;
  std::atomic<uint64_t> waits_in;
  // The last collective whose zero-copy phase (the work pool, where ranks read and write each
  // other's tensors) this rank entered: stored before it checks whether a peer gave up on the
  // call, so that a peer giving up at that moment sees it and waits until the rank is out of its
  // tensors (pool_finished) before its caller may reuse them (executor.cc).
  std::atomic<uint64_t> zero_copy_entered;
  // The work pool's chunks of this rank's stripe taken so far, over all collectives (taken by
  // this rank first, then by any rank that has finished its own).
  alignas(kCacheLine) std::atomic<uint64_t> stripe_claimed;
};
static_assert(sizeof(RankSlot) % kCacheLine == 0);
static_assert(offsetof(RankSlot, descriptors) == (kCallRing + 1) * kCacheLine);
static_assert(sizeof(RankSlot) == 505984);  // a layout change is a kControlVersion change
static_assert(offsetof(OpDescriptor, staging_window) % 8 == 0 && sizeof(OpDescriptor) == 3736);

// RankSlot::attached: 0 until the rank maps the segment, then kAttached; kDetached once it has
// destroyed its side of the group (its exit afterwards is not a failure worth a flight dump).
inline constexpr uint32_t kAttached = 1;
inline constexpr uint32_t kDetached = 2;

// The inline area of collective `sequence` whose payload is `bytes` (the same on every rank).
template <typename Slot>
inline auto* inline_area(Slot& slot, uint64_t sequence, uint64_t bytes) {
  return bytes <= kSmallInlineBytes ? slot.small_inline[sequence % kCallRing]
                                    : slot.inline_data[sequence % kInlineRing];
}

// Whether rank `slot` gave up on collective `sequence` (RankSlot::gave_up).
inline bool gave_up_on(const RankSlot& slot, uint64_t sequence) {
  return slot.gave_up.load(std::memory_order_acquire) == sequence;
}

// RankSlot::failure_kind: what a peer that learns of the failure throws in turn (a rank that
// timed out makes its peers' errors timeouts too: a stalled rank is a TimeoutError everywhere).
enum class FailureKind : uint32_t { kRemote = 0, kTimeout = 1 };

// Whether the failure rank `slot` gave up for was its own timeout (read after its departed_at).
// Such a rank waited for a stalled one, as its peers do: they keep their own timeouts.
inline bool timed_out(const RankSlot& slot) {
  return slot.failure_kind == static_cast<uint32_t>(FailureKind::kTimeout);
}

// This rank gives up on collective `sequence` for `reason` (RankSlot::gave_up, failure).
void give_up(RankSlot& slot, uint64_t sequence, const std::string& reason, FailureKind kind);
// What rank `slot` gave as its reason, printable whatever the shared memory holds.
std::string failure_text(const RankSlot& slot);
// The NUL-terminated text in `bytes` (at most `size` of them), any unprintable byte shown as '?':
// a peer wrote it into shared memory, so whatever is there must print as text.
std::string printable_text(const char* bytes, size_t size);

// The last collective rank `slot` arrived at.
inline uint64_t arrived_sequence(const RankSlot& slot) {
  uint64_t last = 0;
  for (const ArrivalLine& arrival : slot.arrivals) {
    const uint64_t sequence = arrival.sequence.load(std::memory_order_acquire);
    if (sequence > last) last = sequence;
  }
  return last;
}

// Whether rank `slot` arrived at collective `sequence` (or a later one).
inline bool arrived_at(const RankSlot& slot, uint64_t sequence) {
  return slot.arrivals[ring_entry(sequence)].sequence.load(std::memory_order_acquire) >= sequence;
}

struct alignas(4096) ControlHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t world_size;
  uint64_t segment_bytes;
  uint64_t token;  // random, also in the segment's name
  // Bytes per chunk of the work pool, the creator's SHMCCL_CHUNK_BYTES: the pool's chunk numbers
  // are shared, so every rank must cut the same chunks.
  uint64_t chunk_bytes;
  // How the kernel answered the creator's request for 2 MiB pages: 0 when it made them, else the
  // errno (ShmSegment::huge_page_error()). A block in 4 KiB pages works, its first touches cost
  // more; this says why to whoever wonders.
  int32_t huge_page_error;
  alignas(kCacheLine) std::atomic<uint32_t> attached_count;
  alignas(kCacheLine) std::atomic<uint64_t> done;        // chunks finished
  alignas(kCacheLine) std::atomic<uint32_t> wake_word;   // futex: bumped when there is news
  std::atomic<uint32_t> sleepers;                        // ranks asleep on wake_word
  alignas(kCacheLine) std::atomic<uint32_t> abort_flag;  // non-zero: the group is aborted
  // How many ranks left the group (RankSlot::departed_at). On the abort flag's line: the waits
  // read both on every check, for the price of one.
  std::atomic<uint32_t> departures;
  int32_t abort_rank;
  char abort_reason[240];
};
static_assert(sizeof(ControlHeader) == 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

inline constexpr size_t control_block_bytes(int world_size) {
  return sizeof(ControlHeader) + sizeof(RankSlot) * static_cast<size_t>(world_size);
}

// The control block's segment: the layout rounded up to whole 2 MiB pages. Every rank touches
// all of its slot's entries and reads its peers', a few hundred 4 KiB pages per rank; in 2 MiB
// pages that is one page fault per 2 MiB per process instead of one per 4 KiB, which on a
// virtual machine was 3-4 ms spread over a group's first 64 small collectives.
inline constexpr size_t control_block_segment_bytes(int world_size) {
  return (control_block_bytes(world_size) + detail::kHugePageBytes - 1) / detail::kHugePageBytes *
         detail::kHugePageBytes;
}

inline RankSlot* rank_slots(ControlHeader* header) {
  return reinterpret_cast<RankSlot*>(reinterpret_cast<char*>(header) + sizeof(ControlHeader));
}

}  // namespace shmccl::transport
