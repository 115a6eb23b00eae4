// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// GroupTransport: one process's attachment to a group's control block (see control_block.h).
// It owns the mapping, watches the peers' processes, and provides the two things collectives are
// built from: waits that end with an error instead of hanging (deadline, dead peer, abort), and
// the translation of a peer's BufferRef into an address here (bounds-checked).
//
// Waiting: spin briefly (less when ranks outnumber cores), then sleep on the group's futex word.
// Wakers bump the word only when someone sleeps, so the fast path has no syscall.
//
// Thread-safety: a group's collectives run one at a time (on its communication stream), so the
// wait/arrive functions are used by one thread at a time; abort() and the peer-death callback may
// run on any thread.
#pragma once

#include <sched.h>

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "core/memory_order.h"
#include "transport/asymmetric_fence.h"
#include "transport/control_block.h"
#include "transport/core_balance.h"
#include "transport/peer_monitor.h"
#include "transport/shm_segment.h"

namespace shmccl::device {
class ArenaMapping;
}  // namespace shmccl::device

namespace shmccl::transport {

class GroupTransport {
 public:
  using Clock = std::chrono::steady_clock;

  // Group rank 0 creates the control block `name`; the others open it (it must exist).
  // Neither waits for the peers: call wait_for_all_attached().
  static std::unique_ptr<GroupTransport> create(const std::string& name, int rank, int size);
  static std::unique_ptr<GroupTransport> open(const std::string& name, int rank, int size);
  ~GroupTransport();
  GroupTransport(const GroupTransport&) = delete;
  GroupTransport& operator=(const GroupTransport&) = delete;

  // Waits until every rank attached (else TimeoutError naming the missing ranks), removes the
  // segment's name (nothing is left in /dev/shm from here on), decides whether the group runs
  // oversubscribed (so it does when `job_oversubscribed`: the job's other ranks share the cores)
  // and starts watching the peers. `whole_job`: the group's ranks are all of the job's, so its
  // slots show every rank that may share a core with this one (core_mates.h).
  // `lost(r)`, when given, says why rank r cannot attach any more ("" while it may): a sub-group
  // knows its members' processes from the default group before they attach, so the wait fails at
  // once with RemoteError(lost(r)) when a member exits first, instead of at the deadline.
  void wait_for_all_attached(Clock::time_point deadline, bool job_oversubscribed = false,
                             bool whole_job = true,
                             const std::function<std::string(int rank)>& lost = nullptr);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // More ranks than the cores they may run on (the union of the ranks' affinity masks, known
  // once every rank attached): waits yield and sleep instead of spinning.
  bool oversubscribed() const { return oversubscribed_; }
  // This rank's arrivals may use a compiler barrier instead of a full fence (asymmetric_fence.h):
  // the group is not oversubscribed (so its sleepers make the barrier instead) and the process
  // registered for the sleepers' barriers.
  bool light_arrival_fence() const { return !oversubscribed_ && asymmetric_fences_enabled(); }

  // Barrier release (control_block.h): when ranks outnumber cores, a barrier's other ranks wait
  // for rank 0 to have seen every arrival, so that rank 0 leaves first. `awaits_release()`: this
  // rank waits for it (the group runs oversubscribed; each rank says so in its slot once every
  // rank attached). Rank 0 calls release_barrier() once every rank arrived at barrier
  // `sequence`; it stores and wakes only when some rank waits. barrier_released(): rank 0 did.
  bool awaits_release() const { return rank_ != 0 && oversubscribed_; }
  void release_barrier(uint64_t sequence);
  bool barrier_released(uint64_t sequence) const {
    return slots_[0].released.load(std::memory_order_acquire) >= sequence;
  }
  ControlHeader& header() const { return *header_; }
  // The group's work-pool chunk size: the creator's SHMCCL_CHUNK_BYTES (ControlHeader).
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  RankSlot& slot(int rank) const { return slots_[rank]; }
  pid_t peer_pid(int rank) const { return peer_pids_[static_cast<size_t>(rank)]; }
  // Whether rank `rank`'s process is known to have exited (its pidfd or /proc said so).
  bool peer_exited(int rank) const {
    return exited_[static_cast<size_t>(rank)].load(std::memory_order_acquire);
  }

  // Spins, then sleeps until `ready()` holds. Throws RemoteError when the group is aborted or a
  // peer died, TimeoutError at `deadline`; `describe()` adds what was awaited (late ranks...).
  // `shared_wait`, when not 0, names a wait in which every rank waits for the same condition
  // (core_mates.h; the collective's sequence number for its arrival wait).
  template <typename Ready, typename Describe>
  void wait_until(Ready&& ready, Clock::time_point deadline, Describe&& describe,
                  uint64_t shared_wait = 0);
  // The same with a timeout counted from the end of the spin phase (no clock read when the
  // condition comes true while spinning: the common case of a collective).
  template <typename Ready, typename Describe>
  void wait_until(Ready&& ready, std::chrono::milliseconds timeout, Describe&& describe,
                  uint64_t shared_wait = 0);
  // Wakes sleepers after a change to shared state they may wait for (cheap when none sleeps).
  void notify();
  // Some rank sleeps on the group's futex word (seq_cst: after a fenced publication, as notify()
  // reads it; when false, every later sleeper sees the publication before it sleeps).
  bool someone_sleeps() const { return header_->sleepers.load(std::memory_order_seq_cst) != 0; }

  // Marks the group aborted for every member; pending and future waits fail with `reason`.
  void abort(const std::string& reason);
  // Called (on the peer monitor's thread; must not block) with "rank 1 (pid 123) died" when a
  // peer process exits. Set it once, after construction.
  void set_peer_death_listener(std::function<void(const std::string&)> listener);

  // Called on the waiting thread, with the time (CLOCK_MONOTONIC ns), each time a wait gives up
  // spinning and yielding and goes to sleep in the kernel (the slow path: the flight recorder
  // stamps the collective then). Set it once, after construction.
  void set_sleep_listener(void (*listener)(void*, uint64_t), void* context) {
    sleep_listener_ = listener;
    sleep_listener_context_ = context;
  }

  // This rank takes no part in collective `first_missed` and later ones (it failed a
  // collective, or destroys its side of the group): the peers' waits in those fail at once,
  // naming it (RankSlot::departed_at). A later call only moves it earlier: a call that failed
  // before it arrived departs at its own number, and calls queued before it that then find the
  // group failed move the departure down to theirs. Thread-safe. Lowering it is safe only when
  // no call of this rank runs: the departure says that every call before it is done here.
  void depart(uint64_t first_missed);
  // This rank gives up on collective `sequence` (RankSlot::gave_up, with the reason). Its threads
  // take turns, and the earliest call given up stays: the peers of a failed call look for its
  // own number there, and a later call another thread fails (before it arrived) must not hide it.
  void give_up(uint64_t sequence, const std::string& reason, FailureKind kind);
  // Of the other ranks that departed and satisfy `pick(slot)`, the one that departed first;
  // -1 when none did (cheap while nobody departed).
  template <typename Pick>
  int first_departed(Pick&& pick) const {
    if (header_->departures.load(std::memory_order_acquire) == 0) [[likely]]
      return -1;
    int first = -1;
    uint32_t first_order = 0;
    for (int r = 0; r < size_; ++r) {
      const RankSlot& slot = slots_[r];
      if (r == rank_ || slot.departed_at.load(std::memory_order_acquire) == 0 || !pick(slot))
        continue;
      const uint32_t order = slot.departure_order.load(std::memory_order_relaxed);
      if (first < 0 || order < first_order) {
        first = r;
        first_order = order;
      }
    }
    return first;
  }
  // The collective this rank runs now: waits fail when a rank they may wait for departed
  // before it (set by the executing thread before each collective).
  void set_current_sequence(uint64_t sequence) {
    current_sequence_.store(sequence, std::memory_order_relaxed);
  }

  // Throws the group's failure (abort, dead peer, a rank that departed) if there is one.
  void check_healthy() const;
  bool healthy() const;

  // Who copies the pages of a resolved peer buffer: this rank alone, the same ones every call (a
  // pull, a host pipeline), or the work pool's ranks, among which oversubscribed ranks share the
  // pieces out anew at every call.
  enum class Copier { kThisRank, kWorkPool };
  // The address of `ref`'s first byte in this process; checks that `bytes` fit in its arena and
  // that the offset is a multiple of `alignment` (the element size, a power of two: kernels load
  // whole elements, and every tensor a rank describes starts on one). Maps a peer's arena on first
  // use (and keeps it mapped while this group, or another group of this process that mapped it,
  // lives).
  char* resolve(const BufferRef& ref, uint64_t bytes, uint64_t alignment,
                Copier copier = Copier::kThisRank) const;
  // Peer buffers from this size up get this process's page tables filled when resolved; in an
  // oversubscribed group, the work pool's buffers of every size.
  static constexpr uint64_t kPopulateBytes = 64 * 1024;
  // ... and, when the group is oversubscribed, touched whole up to this size: its ranks take
  // each other's stripes of the work pool, so which pages a rank copies changes from call to
  // call, and each cold page cost it ~5 us in a PVM guest (8-rank 2 MiB all-gather: 1-10 ms a
  // call for 40 calls, against 1-2 ms once touched; a chunk writing a peer's cold 32 KiB output
  // took ~45 us instead of 2). Larger buffers stay lazy: touching them whole would cost seconds
  // on the first call.
  static constexpr uint64_t kTouchBytes = 32ull << 20;

 private:
  GroupTransport(ShmSegment segment, int rank, int size);
  // Sets oversubscribed_ and the waits' spin and yield budgets that follow from it.
  // `cores_suffice`: the ranks have a core each, and only a cgroup's CPU limit makes them too
  // many (then waits do not yield, they sleep soon).
  void set_oversubscribed(bool oversubscribed, bool cores_suffice = false);
  void on_peer_death(pid_t pid);
  std::string failure_message() const;
  // Throws the group's failure with `context` (what this rank waited for) appended: a
  // TimeoutError when it is a departure of a rank that timed out, else a RemoteError.
  [[noreturn]] void throw_failure(const std::string& context) const;
  // The sleeping half of wait_until (after spinning): futex waits with deadline and checks.
  void sleep_until(bool (*ready)(void*), void* context, Clock::time_point deadline,
                   std::string (*describe)(void*), void* describe_context, uint64_t shared_wait);
  // sleep_until for wait_until's callables (type-erased: the sleeping half is not a template).
  template <typename Ready, typename Describe>
  void sleep_until_ready(Ready& ready, Clock::time_point deadline, Describe& describe,
                         uint64_t shared_wait);
  static void cpu_relax() { __builtin_ia32_pause(); }
  // Spins until `ready()` or the spin budget is spent; true when ready. Spinning is for ranks
  // that have a core each: a sleeping rank costs a wake-up of several microseconds (tens in a
  // VM whose idle vCPU halts), so it spins for SHMCCL_SPIN_TIME (default 1 ms) first. Ranks that
  // outnumber cores only check briefly, then yield and sleep: spinning steals the peer's slice.
  template <typename Ready>
  bool spin(Ready& ready) {
    // A pause costs ~30 ns on this machine's cores (Zen 5 in a VM), as long as a peer's line
    // takes to arrive: the first checks do without it, so a waiter notices an arrival as soon as
    // the line lands. Ranks that outnumber cores give up after a few checks: the peer they wait
    // for is likely queued behind them on their own core.
    const int eager_checks = oversubscribed_ ? kOversubscribedChecks : kEagerChecks;
    for (int i = 0; i < eager_checks; ++i) {
      if (ready()) [[likely]]
        return true;
    }
    if (oversubscribed_) return false;
    for (int i = 0; i < kPausedChecks; ++i) {
      if (ready()) [[likely]]
        return true;
      cpu_relax();
    }
    if (spin_budget_.count() == 0) return false;
    const auto start = Clock::now();
    while (true) {
      for (int i = 0; i < 256; ++i) {
        if (ready()) return true;
        cpu_relax();
      }
      const auto spun = Clock::now() - start;
      if (spun > spin_budget_ || !healthy()) return false;
      // A peer that lost its core to another program may be runnable on ours: past a short
      // pure spin, offer the core now and then (a yield with nothing else runnable costs well
      // under a microsecond; without it the peer waited out the whole spin budget, ~1 ms).
      if (spun > kPureSpin) sched_yield();
    }
  }

  ShmSegment segment_;
  ControlHeader* header_;
  RankSlot* slots_;
  const int rank_;
  const int size_;
  std::vector<pid_t> peer_pids_;
  std::vector<PeerMonitor::WatchId> watches_;
  // The peer arenas this group mapped, held while it lives. The process-wide registry keeps only
  // weak references: once no group can read a peer's memory, its mapping goes, and with it the
  // peer's memory if the peer exited (a long-lived rank meeting new peers job after job would
  // otherwise keep every one's memory). Guarded by the registry's mutex.
  mutable std::vector<std::shared_ptr<device::ArenaMapping>> peer_arenas_;
  // The last two peer buffers resolve() mapped per owner rank (a call's input and output): a
  // collective that a training loop repeats resolves the same ones call after call, and a repeat
  // costs a compare instead of the registry's lock and the populate check. Valid while the
  // owner's decommit count stays as it was (a punched hole may come back as a new tensor at the
  // same offset, with cold pages). Used by the thread that runs the group's collective.
  struct ResolvedBuffer {
    BufferRef ref{};  // as read and checked
    uint64_t bytes = 0;
    uint64_t alignment = 0;
    Copier copier = Copier::kThisRank;
    const device::ArenaMapping* mapping = nullptr;  // held in peer_arenas_
    uint64_t decommits = 0;                         // the owner's count before the populate
    char* address = nullptr;                        // nullptr: an empty entry
  };
  mutable std::array<std::array<ResolvedBuffer, 2>, kMaxRanks> resolved_{};
  mutable std::array<uint8_t, kMaxRanks> resolved_next_{};  // the entry to replace next
  bool oversubscribed_ = false;
  uint64_t chunk_bytes_ = 0;
  bool whole_job_ = true;  // wait_for_all_attached's `whole_job`
  cpu_set_t own_cpus_;     // this process's affinity mask, published in its slot as it attaches
  // Whether another rank waits for barrier releases: read once every rank arrived at a barrier
  // (each wrote its flag before it attached), then kept. -1: not read yet.
  std::atomic<int8_t> others_await_release_{-1};
  static constexpr std::chrono::microseconds kPureSpin{20};
  static constexpr int kEagerChecks = 512;         // ~0.5-1 us of back-to-back checks
  static constexpr int kOversubscribedChecks = 8;  // then yield (sleep_until)
  // sleep_until looks every kYieldsPerSwitchCheck yields (a look is a system call, ~1 us in a
  // VM) whether they ran anyone else, and sleeps once they have run no one for
  // kFruitlessYieldTime. 40 us: with 20 us, 8 ranks on 2 cores read a 13% higher median for
  // their tiny calls, with 40 us level with no check (docs/performance.md, session 46).
  static constexpr int kYieldsPerSwitchCheck = 8;
  static constexpr std::chrono::microseconds kFruitlessYieldTime{40};
  static constexpr int kPausedChecks = 256;
  std::chrono::nanoseconds spin_budget_{0};
  std::chrono::nanoseconds yield_budget_{0};
  // How long a waiter whose core-mates all wait where it waits spins before it yields once
  // (core_mates.h); 0: it always yields.
  std::chrono::nanoseconds mate_spin_budget_{0};
  // Whether waits move this rank off a crowded core (core_balance.h): only when ranks outnumber
  // cores and the slots show every rank of the job (a sub-group's do not).
  bool balance_cores_ = false;
  CoreBalance balance_;

  // The rank (not this one) that departed at or before the current collective; -1 if none.
  int departed_rank() const;
  std::string departure_message(int rank) const;

  std::atomic<bool> peer_dead_{false};
  std::array<std::atomic<bool>, kMaxRanks> exited_{};  // by rank: peer_exited()
  std::atomic<uint64_t> current_sequence_{0};
  mutable std::mutex failure_mutex_;
  std::mutex depart_mutex_;  // one departure at a time (the caller's thread, the stream's)
  std::string peer_death_message_;
  std::function<void(const std::string&)> peer_death_listener_;  // guarded by failure_mutex_
  void (*sleep_listener_)(void*, uint64_t) = nullptr;
  void* sleep_listener_context_ = nullptr;
  // The longest futex sleep of a wait before it looks again (SHMCCL_WAKE_CHECK_TIME): short
  // while wait_for_all_attached polls `lost` (no peer monitor wakes it for a process that has
  // not attached).
  Clock::duration wake_check_interval_;
  Clock::duration max_sleep_slice_;
};

template <typename Ready, typename Describe>
void GroupTransport::wait_until(Ready&& ready, Clock::time_point deadline, Describe&& describe,
                                uint64_t shared_wait) {
  // Spin while a core is likely free for the peer; when ranks outnumber cores, spinning only
  // steals the time slice the peer needs, so give up early and sleep.
  if (!spin(ready)) [[unlikely]]
    sleep_until_ready(ready, deadline, describe, shared_wait);
  detail::acquire_from_peers();
}

template <typename Ready, typename Describe>
void GroupTransport::wait_until(Ready&& ready, std::chrono::milliseconds timeout,
                                Describe&& describe, uint64_t shared_wait) {
  if (!spin(ready)) [[unlikely]]
    sleep_until_ready(ready, detail::deadline_after(timeout), describe, shared_wait);
  detail::acquire_from_peers();
}

template <typename Ready, typename Describe>
void GroupTransport::sleep_until_ready(Ready& ready, Clock::time_point deadline, Describe& describe,
                                       uint64_t shared_wait) {
  sleep_until([](void* context) -> bool { return (*static_cast<Ready*>(context))(); }, &ready,
              deadline,
              [](void* context) -> std::string { return (*static_cast<Describe*>(context))(); },
              &describe, shared_wait);
}

// The ranks whose slot value `read(slot)` is below `value`, as "1, 3", leaving out rank `skip`
// (for error messages: the ranks a wait is waiting for).
template <typename Read>
std::string ranks_below(const GroupTransport& transport, uint64_t value, Read&& read,
                        int skip = -1) {
  std::string ranks;
  for (int r = 0; r < transport.size(); ++r) {
    if (r != skip && read(transport.slot(r)) < value) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return ranks;
}

// The ranks whose slot has not arrived at `sequence`, as "1, 3" (for error messages).
std::string late_ranks(const GroupTransport& transport, uint64_t sequence);

// A list of ranks as "1, 3" (ranks_below, late_ranks) as the subject of a sentence:
// "rank 1" + `singular` or "ranks 1, 3" + `plural` ("ranks (none by now)" + `plural` for none).
std::string ranks_that(const std::string& ranks, std::string_view singular,
                       std::string_view plural);
// ranks_that for the common sentence: "rank 1 has not " / "ranks 1, 3 have not " + `rest`.
std::string ranks_have_not(const std::string& ranks, std::string_view rest);

}  // namespace shmccl::transport
