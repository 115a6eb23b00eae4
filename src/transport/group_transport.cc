// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/group_transport.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "core/check.h"
#include "core/config.h"
#include "core/cpu_quota.h"
#include "core/logging.h"
#include "core/memory_order.h"
#include "core/process_id.h"
#include "device/device_context.h"
#include "transport/asymmetric_fence.h"
#include "transport/core_mates.h"
#include "transport/futex.h"

namespace shmccl::transport {
namespace {

static_assert(sizeof(cpu_set_t) == kCpuMaskWords * sizeof(uint64_t));

// Of `cpus` CPUs in the affinity masks, how many the ranks can keep busy under a cgroup limit of
// `quota` whole CPUs (0: none).
int cores_to_run_on(int cpus, int quota) {
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

// The CPUs this process may run on: its affinity mask, or every online CPU when it cannot be read.
cpu_set_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    CPU_ZERO(&set);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < online && cpu < CPU_SETSIZE; ++cpu)
      CPU_SET(static_cast<int>(cpu), &set);
  }
  return set;
}

// Peer arenas mapped into this process, by (pid, token), shared by the groups that reach them.
// Each group holds the ones it mapped (GroupTransport::peer_arenas_): a mapping stays valid after
// its owner exits (we hold our own fd), so late readers in a live group never fault.
struct ArenaMappings {
  std::mutex mutex;
  std::map<std::pair<int32_t, uint64_t>, std::weak_ptr<device::ArenaMapping>> mappings;
};

ArenaMappings& arena_mappings() {
  static auto* instance = new ArenaMappings();  // never destroyed: used until exit
  return *instance;
}

}  // namespace

GroupTransport::GroupTransport(ShmSegment segment, int rank, int size)
    : segment_(std::move(segment)),
      header_(static_cast<ControlHeader*>(segment_.data())),
      slots_(rank_slots(header_)),
      rank_(rank),
      size_(size),
      peer_pids_(static_cast<size_t>(size), 0),
      own_cpus_(usable_cpus()),
      balance_(slots_, rank, size),
      wake_check_interval_(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
              std::max(config::get_seconds("SHMCCL_WAKE_CHECK_TIME"), 1e-3)))),
      max_sleep_slice_(wake_check_interval_) {
  enable_asymmetric_fences();
  // Until every rank attached, this rank's own CPUs are all it knows of the group's.
  const int quota = detail::cpu_quota_cores();
  set_oversubscribed(size > cores_to_run_on(CPU_COUNT(&own_cpus_), quota),
                     size <= CPU_COUNT(&own_cpus_));
}

void GroupTransport::set_oversubscribed(bool oversubscribed, bool cores_suffice) {
  oversubscribed_ = oversubscribed;
  spin_budget_ = std::chrono::nanoseconds(0);
  yield_budget_ = std::chrono::nanoseconds(0);
  mate_spin_budget_ = std::chrono::nanoseconds(0);
  balance_cores_ = false;
  auto seconds = [](const char* name) {
    return std::chrono::nanoseconds(static_cast<int64_t>(config::get_seconds(name) * 1e9));
  };
  if (!oversubscribed_) {
    spin_budget_ = seconds("SHMCCL_SPIN_TIME");
  } else if (cores_suffice) {
    // Only a cgroup's CPU limit makes the ranks too many: each has a core, but every moment on
    // it counts against the quota. A yield finds nothing else to run there and returns at once,
    // spending the quota as a spin does: sleep after a few checks instead (2 ranks limited to 1
    // CPU, 500 us of work on one of them between all-reduces: docs/performance.md).
  } else {
    yield_budget_ = seconds("SHMCCL_YIELD_TIME");
    // A sub-group's slots do not show the job's other ranks, which may need this core.
    if (whole_job_) {
      mate_spin_budget_ = seconds("SHMCCL_MATE_SPIN_TIME");
      balance_cores_ = config::get_bool("SHMCCL_CORE_BALANCE");
    }
  }
}

namespace {

// The calling thread's involuntary context switches: a sched_yield that ran another task counts
// as one, a yield the scheduler answered with this thread again does not.
int64_t involuntary_context_switches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw;
}

// SHMCCL_CHUNK_BYTES, at least 4 KiB and a whole number of cache lines (so a whole number of
// elements of every dtype).
uint64_t configured_chunk_bytes() {
  static const uint64_t bytes = [] {
    const uint64_t configured =
        std::clamp<uint64_t>(config::get_bytes("SHMCCL_CHUNK_BYTES"), 4096, kMaxChunkBytes);
    return configured / kCacheLine * kCacheLine;
  }();
  return bytes;
}

}  // namespace

std::unique_ptr<GroupTransport> GroupTransport::create(const std::string& name, int rank,
                                                       int size) {
  SHMCCL_CHECK_ARG(size >= 1 && size <= kMaxRanks, "group size ", size, " is out of range [1, ",
                   kMaxRanks, "]");
  ShmSegment segment = ShmSegment::create(name, control_block_segment_bytes(size),
                                          UnlinkPolicy::kOnDestroy, PageSize::kHuge);
  auto* header = static_cast<ControlHeader*>(segment.data());
  header->version = kControlVersion;
  header->world_size = static_cast<uint32_t>(size);
  header->segment_bytes = control_block_segment_bytes(size);
  header->chunk_bytes = configured_chunk_bytes();
  header->huge_page_error = segment.huge_page_error();
  header->abort_rank = -1;
  // The name reaches peers through the store, whose lock orders these writes before their reads.
  header->magic = kControlMagic;
  std::unique_ptr<GroupTransport> transport(new GroupTransport(std::move(segment), rank, size));
  transport->chunk_bytes_ = header->chunk_bytes;
  RankSlot& mine = transport->slot(rank);
  mine.pid.store(getpid(), std::memory_order_relaxed);
  std::memcpy(mine.cpus, &transport->own_cpus_, sizeof(mine.cpus));
  mine.cpu_quota = static_cast<uint32_t>(detail::cpu_quota_cores());
  publish_cpu(mine);
  mine.attached.store(kAttached, std::memory_order_relaxed);
  transport->header_->attached_count.fetch_add(1, std::memory_order_seq_cst);
  return transport;
}

std::unique_ptr<GroupTransport> GroupTransport::open(const std::string& name, int rank, int size) {
  ShmSegment segment = ShmSegment::open(name, control_block_segment_bytes(size),
                                        UnlinkPolicy::kManual, PageSize::kHuge);
  auto* header = static_cast<ControlHeader*>(segment.data());
  if (header->magic != kControlMagic || header->version != kControlVersion ||
      header->world_size != static_cast<uint32_t>(size)) {
    throw RemoteError(detail::concat("control block ", name, " is not a shmccl group of ", size,
                                     " ranks (magic ", header->magic, ", version ", header->version,
                                     ", size ", header->world_size, ")"));
  }
  // Read once: the creator wrote it before it published the block's name.
  const uint64_t chunk_bytes = header->chunk_bytes;
  if (chunk_bytes < 4096 || chunk_bytes > kMaxChunkBytes || chunk_bytes % kCacheLine != 0) {
    throw RemoteError(detail::concat("control block ", name, " gives a work-pool chunk of ",
                                     chunk_bytes, " bytes, outside [4096, ", kMaxChunkBytes,
                                     "] or not a multiple of ", kCacheLine));
  }
  if (chunk_bytes != configured_chunk_bytes()) {
    SHMCCL_WARN(kShm, "SHMCCL_CHUNK_BYTES is ", configured_chunk_bytes(), " bytes in rank ", rank,
                " of control block ", name, ", but its first rank set ", chunk_bytes,
                ": the group uses ", chunk_bytes);
  }
  // Before this rank's GroupTransport exists: its destructor would depart and detach the slot,
  // which is the other process's.
  const RankSlot& taken = rank_slots(header)[rank];
  SHMCCL_CHECK_ARG(taken.attached.load(std::memory_order_acquire) == 0, "rank ", rank,
                   " of control block ", name, " is already taken by pid ",
                   taken.pid.load(std::memory_order_relaxed), ": two processes use the same rank");
  std::unique_ptr<GroupTransport> transport(new GroupTransport(std::move(segment), rank, size));
  transport->chunk_bytes_ = chunk_bytes;
  RankSlot& mine = transport->slot(rank);
  mine.pid.store(getpid(), std::memory_order_relaxed);
  std::memcpy(mine.cpus, &transport->own_cpus_, sizeof(mine.cpus));
  mine.cpu_quota = static_cast<uint32_t>(detail::cpu_quota_cores());
  publish_cpu(mine);
  mine.attached.store(kAttached, std::memory_order_seq_cst);
  transport->header_->attached_count.fetch_add(1, std::memory_order_seq_cst);
  transport->notify();
  return transport;
}

GroupTransport::~GroupTransport() {
  for (PeerMonitor::WatchId id : watches_)
    PeerMonitor::instance().unwatch(id);
  // A rank that destroys its side while its peers go on must not leave them waiting for it.
  depart(arrived_sequence(slots_[rank_]) + 1);
  slots_[rank_].attached.store(kDetached, std::memory_order_release);
}

void GroupTransport::depart(uint64_t first_missed) {
  // Only this rank writes its slot; its threads take turns.
  std::lock_guard<std::mutex> lock(depart_mutex_);
  RankSlot& mine = slots_[rank_];
  const uint64_t departed_at = mine.departed_at.load(std::memory_order_relaxed);
  if (departed_at != 0 && departed_at <= first_missed) return;
  if (departed_at == 0) {
    // Dekker with a sleeper, as notify(): the count and the slot, then the wake, against its
    // re-check. A peer that sees the count before the slot finds no departure yet, and looks
    // again.
    const uint32_t order = header_->departures.fetch_add(1, std::memory_order_seq_cst) + 1;
    mine.departure_order.store(order, std::memory_order_relaxed);
  }
  mine.departed_at.store(first_missed, std::memory_order_seq_cst);
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&header_->wake_word);
}

void GroupTransport::give_up(uint64_t sequence, const std::string& reason, FailureKind kind) {
  std::lock_guard<std::mutex> lock(depart_mutex_);
  RankSlot& mine = slots_[rank_];
  const uint64_t given = mine.gave_up.load(std::memory_order_relaxed);
  if (given != 0 && given <= sequence) return;
  transport::give_up(mine, sequence, reason, kind);
}

int GroupTransport::departed_rank() const {
  const uint64_t current = current_sequence_.load(std::memory_order_relaxed);
  return first_departed([current](const RankSlot& slot) {
    return slot.departed_at.load(std::memory_order_acquire) <= current;
  });
}

std::string GroupTransport::departure_message(int rank) const {
  const RankSlot& slot = slots_[rank];
  const uint64_t departed_at = slot.departed_at.load(std::memory_order_acquire);
  const std::string failure = failure_text(slot);
  const std::string who =
      detail::concat("rank ", rank, " (pid ", peer_pids_[static_cast<size_t>(rank)], ")");
  if (failure.empty()) {
    return detail::concat(who, " destroyed its side of the group after collective ",
                          departed_at - 1, " and takes no part in collective ", departed_at,
                          " or later");
  }
  return detail::concat(who, " failed collective ", slot.gave_up.load(std::memory_order_acquire),
                        " and takes no part in collective ", departed_at, " or later: ", failure);
}

void GroupTransport::wait_for_all_attached(Clock::time_point deadline, bool job_oversubscribed,
                                           bool whole_job,
                                           const std::function<std::string(int rank)>& lost) {
  whole_job_ = whole_job;
  auto all_attached = [&] {
    return header_->attached_count.load(std::memory_order_acquire) >= static_cast<uint32_t>(size_);
  };
  std::string lost_rank;  // why a rank that has not attached never will
  auto lost_one = [&] {
    for (int r = 0; r < size_ && lost_rank.empty(); ++r) {
      if (slots_[r].attached.load(std::memory_order_acquire) != 0) continue;
      std::string why = lost(r);
      // It may have attached, then died, while `lost` looked: it did join, and the group's
      // first collective names its death. A rank found dead and still unattached never joins.
      if (slots_[r].attached.load(std::memory_order_seq_cst) == 0) lost_rank = std::move(why);
    }
    return !lost_rank.empty();
  };
  if (lost)
    max_sleep_slice_ =
        std::min<Clock::duration>(wake_check_interval_, std::chrono::milliseconds(10));
  wait_until([&] { return all_attached() || (lost && lost_one()); }, deadline,
             [&] {
               const std::string missing = ranks_below(*this, 1, [](const RankSlot& slot) {
                 return slot.attached.load(std::memory_order_acquire);
               });
               return "waiting for " +
                      ranks_that(missing, " to join the group", " to join the group");
             });
  max_sleep_slice_ = wake_check_interval_;
  if (!all_attached()) throw RemoteError(lost_rank);
  // Every member has it mapped: the name is no longer needed, and without it a crash leaks nothing.
  segment_.unlink();
  for (int r = 0; r < size_; ++r) {
    const pid_t pid = slots_[r].pid.load(std::memory_order_acquire);
    if (pid <= 0) {
      throw RemoteError(detail::concat("rank ", r, " attached to the group with pid ", pid,
                                       ": the control block is corrupt"));
    }
    peer_pids_[static_cast<size_t>(r)] = pid;
  }
  // The ranks outnumber the cores they may run on, all ranks' CPUs together: two ranks bound to
  // two cores do not, two ranks pinned to one core do. Every rank reads the same masks, so all
  // decide alike; the barrier's ranks read awaits_release only at a barrier, after this store.
  // A cgroup's CPU limit caps the count (the tightest any rank reports: ranks of one job share
  // their container).
  cpu_set_t group_cpus;
  CPU_ZERO(&group_cpus);
  int quota = 0;
  for (int r = 0; r < size_; ++r) {
    cpu_set_t rank_cpus;
    std::memcpy(&rank_cpus, slots_[r].cpus, sizeof(rank_cpus));
    CPU_OR(&group_cpus, &group_cpus, &rank_cpus);
    const int rank_quota = static_cast<int>(std::min<uint32_t>(slots_[r].cpu_quota, CPU_SETSIZE));
    if (rank_quota > 0) quota = quota > 0 ? std::min(quota, rank_quota) : rank_quota;
  }
  // A sub-group of a job whose ranks outnumber its cores is too (as Open MPI's yield-when-idle is
  // a job's setting): the members of the job's other groups need the cores its waits would spin on.
  const bool outnumbered = CPU_COUNT(&group_cpus) > 0
                               ? size_ > cores_to_run_on(CPU_COUNT(&group_cpus), quota)
                               : oversubscribed_;
  set_oversubscribed(job_oversubscribed || outnumbered,
                     !job_oversubscribed && size_ <= CPU_COUNT(&group_cpus));
  slots_[rank_].awaits_release.store(awaits_release() ? 1 : 0, std::memory_order_relaxed);
  // Only now watch: a callback (on the monitor thread) reads peer_pids_, which must be complete
  // and no longer written; watch() publishes it to that thread.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    watches_.push_back(PeerMonitor::instance().watch(peer_pids_[static_cast<size_t>(r)],
                                                     [this](pid_t dead) { on_peer_death(dead); }));
  }
}

void GroupTransport::on_peer_death(pid_t pid) {
  int dead_rank = -1;
  for (int r = 0; r < size_; ++r) {
    if (peer_pids_[static_cast<size_t>(r)] == pid) dead_rank = r;
  }
  if (dead_rank >= 0)
    exited_[static_cast<size_t>(dead_rank)].store(true, std::memory_order_release);
  // A peer that destroyed its side of the group first left on purpose (the end of a program).
  // It departed before it detached (~GroupTransport): that departure already fails the
  // collectives it takes no part in, naming it. The ones it finished must not fail for its exit:
  // a rank that finished a call early (a small broadcast's root, a reduce-scatter rank that
  // receives nothing) may exit while its peers still wait there for each other.
  if (dead_rank >= 0 && slots_[dead_rank].attached.load(std::memory_order_acquire) == kDetached) {
    SHMCCL_INFO(kShm, "group peer rank ", dead_rank, " (pid ", pid,
                ") destroyed its side of the group and exited");
    return;
  }
  const std::string what = detail::concat("rank ", dead_rank, " (pid ", pid, ") died");
  std::function<void(const std::string&)> listener;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (peer_death_message_.empty()) peer_death_message_ = what;
    listener = peer_death_listener_;
  }
  peer_dead_.store(true, std::memory_order_release);
  SHMCCL_INFO(kShm, "group peer ", what);
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&header_->wake_word);
  if (listener) listener(what);
}

void GroupTransport::set_peer_death_listener(std::function<void(const std::string&)> listener) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  peer_death_listener_ = std::move(listener);
}

bool GroupTransport::healthy() const {
  return !peer_dead_.load(std::memory_order_acquire) &&
         header_->abort_flag.load(std::memory_order_acquire) == 0 && departed_rank() < 0;
}

std::string GroupTransport::failure_message() const {
  if (header_->abort_flag.load(std::memory_order_acquire) != 0) {
    return detail::concat("the group was aborted by rank ", header_->abort_rank, ": ",
                          printable_text(header_->abort_reason, sizeof(header_->abort_reason)));
  }
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (!peer_death_message_.empty()) return peer_death_message_;
  }
  const int departed = departed_rank();
  return departed >= 0 ? departure_message(departed) : "the group failed";
}

void GroupTransport::throw_failure(const std::string& context) const {
  std::string message = failure_message();
  if (!context.empty()) message += "; " + context;
  const bool only_departed = !peer_dead_.load(std::memory_order_acquire) &&
                             header_->abort_flag.load(std::memory_order_acquire) == 0;
  const int departed = only_departed ? departed_rank() : -1;
  if (departed >= 0 &&
      slots_[departed].failure_kind == static_cast<uint32_t>(FailureKind::kTimeout)) {
    throw TimeoutError(message);
  }
  throw RemoteError(message);
}

void GroupTransport::check_healthy() const {
  if (!healthy()) [[unlikely]] {
    throw_failure("");
  }
}

void GroupTransport::abort(const std::string& reason) {
  uint32_t expected = 0;
  if (header_->abort_flag.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
    header_->abort_rank = rank_;
    std::memset(header_->abort_reason, 0, sizeof(header_->abort_reason));
    std::memcpy(header_->abort_reason, reason.data(),
                std::min(reason.size(), sizeof(header_->abort_reason) - 1));
    header_->abort_flag.store(1, std::memory_order_release);
  }
  header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&header_->wake_word);
}

void GroupTransport::release_barrier(uint64_t sequence) {
  int8_t others_wait = others_await_release_.load(std::memory_order_relaxed);
  if (others_wait < 0) {
    others_wait = 0;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && slots_[r].awaits_release.load(std::memory_order_acquire) != 0)
        others_wait = 1;
    }
    others_await_release_.store(others_wait, std::memory_order_relaxed);
  }
  if (others_wait == 0) return;
  detail::release_to_peers();
  slots_[rank_].released.store(
      sequence, detail::kThreadSanitizer ? std::memory_order_seq_cst : std::memory_order_release);
  // The store, then notify()'s read of the sleeper count, in the single total order.
  detail::fence(std::memory_order_seq_cst);
  notify();
}

void GroupTransport::notify() {
  // Dekker with the sleeper: the change we publish (a seq_cst store or RMW by the caller) and
  // this seq_cst load, against its seq_cst increment of `sleepers` and its re-check: either we
  // see the sleeper and wake it, or it sees the change before it sleeps.
  if (header_->sleepers.load(std::memory_order_seq_cst) != 0) {
    header_->wake_word.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&header_->wake_word);
  }
}

void GroupTransport::sleep_until(bool (*ready)(void*), void* context, Clock::time_point deadline,
                                 std::string (*describe)(void*), void* describe_context,
                                 uint64_t shared_wait) {
  // Yield before sleeping: when ranks outnumber cores the peer we wait for is usually runnable on
  // our core, and a yield hands it the core in about a microsecond, while a futex sleep costs a
  // wake-up of 5-10 us (tens in a VM). Bounded by SHMCCL_YIELD_TIME, then sleep for real. Once
  // the ranks on our core all wait where we wait, spin instead (core_mates.h), for at most
  // SHMCCL_MATE_SPIN_TIME between yields.
  //
  // A yield may also hand the core to no one: when nothing else is runnable here, and when the
  // rank we wait for is runnable here but not yet eligible (Linux's EEVDF picks a yielding task
  // again until its core-mates' lag allows them, up to a slice later; traced at 4 ranks on 2
  // cores: a rank woken from a sleep yielded for the whole SHMCCL_YIELD_TIME while the core-mate
  // it waited for stayed runnable, 200 us instead of 13 per call). A yield that ran another task
  // is an involuntary context switch of this thread; once yields have switched to no one for
  // kFruitlessYieldTime, sleep: the core then goes to that rank, or an idle core's balancing
  // pulls one over. The first look comes after the first batch of yields, so that the short
  // waits, most of them, pay no system call for it.
  const auto yield_until = Clock::now() + yield_budget_;
  CoreMates mates(slots_, rank_, size_, mate_spin_budget_.count() > 0 ? shared_wait : 0);
  Clock::time_point spin_until = Clock::time_point::max();  // max: not spinning
  int yields = 0;
  int64_t switches_seen = -1;  // -1: not looked yet, so the first look counts as a switch
  Clock::time_point last_switch;
  for (int i = 0;; ++i) {
    if (ready(context)) return;
    if (!healthy()) throw_failure(describe(describe_context));
    if (i >= 16 && Clock::now() >= yield_until) break;
    if (mates.all_wait_here()) {
      const auto now = Clock::now();
      if (spin_until == Clock::time_point::max()) spin_until = now + mate_spin_budget_;
      if (now < spin_until) {
        for (int k = 0; k < 64 && !ready(context); ++k)
          cpu_relax();
        continue;
      }
    }
    if (yields > 0 && yields % kYieldsPerSwitchCheck == 0) {
      const int64_t switches = involuntary_context_switches();
      const auto now = Clock::now();
      if (switches != switches_seen) {
        switches_seen = switches;
        last_switch = now;
      } else if (now - last_switch >= kFruitlessYieldTime) {
        break;
      }
    }
    sched_yield();
    ++yields;
    const uint32_t cpu = mates.refresh_cpu();
    if (balance_cores_ && yields % kYieldsPerSwitchCheck == 0)
      balance_.maybe_move(cpu, Clock::now());
    spin_until = Clock::time_point::max();
  }
  bool announced = false;
  while (true) {
    const uint32_t observed = header_->wake_word.load(std::memory_order_seq_cst);
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    // Peers whose arrivals skip the full fence (light_arrival_fence) pass one now instead.
    if (!oversubscribed_) sleeper_fence();
    const bool done = ready(context);
    if (!done && healthy()) {
      const auto now = Clock::now();
      // Only a wait that sleeps is announced: when ranks outnumber cores most waits end in the
      // yields above, and the listener's precise stamp would cost every such collective.
      if (!announced && sleep_listener_ != nullptr) {
        announced = true;
        sleep_listener_(sleep_listener_context_,
                        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  now.time_since_epoch())
                                                  .count()));
      }
      if (now < deadline) {
        // Wake at least every slice (SHMCCL_WAKE_CHECK_TIME) so a wait survives a lost wakeup
        // from a dying peer.
        const auto slice = std::min<Clock::duration>(deadline - now, max_sleep_slice_);
        futex_wait(&header_->wake_word, observed, slice);
      }
    }
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done || ready(context)) return;
    if (!healthy()) throw_failure(describe(describe_context));
    if (Clock::now() >= deadline) {
      throw TimeoutError(detail::concat("timed out ", describe(describe_context)));
    }
  }
}

char* GroupTransport::resolve(const BufferRef& shared_ref, uint64_t bytes, uint64_t alignment,
                              Copier copier) const {
  if (bytes == 0) return nullptr;
  // One copy, then only the copy is used: a corrupt or hostile peer may change the descriptor
  // while we look at it, so a check and the use must read the same values.
  BufferRef ref;
  std::memcpy(&ref, &shared_ref, sizeof(ref));
  const device::ArenaHandle& handle = ref.arena;
  int owner = -1;
  for (int r = 0; r < size_; ++r) {
    if (handle.pid > 0 && peer_pids_[static_cast<size_t>(r)] == handle.pid) owner = r;
  }
  if (owner < 0) {
    throw RemoteError(detail::concat("a buffer descriptor names process ", handle.pid,
                                     ", which is not a member of this group (",
                                     "corrupt control block?)"));
  }
  auto out_of_bounds = [&](uint64_t capacity) {
    return ref.bytes < bytes || ref.offset > capacity || capacity - ref.offset < bytes;
  };
  auto bounds_error = [&](uint64_t capacity) {
    return RemoteError(detail::concat("rank ", owner, " (pid ", handle.pid,
                                      ") described a buffer of ", ref.bytes, " bytes at offset ",
                                      ref.offset, " of an arena of ", capacity, " bytes; ", bytes,
                                      " bytes were needed"));
  };
  if (out_of_bounds(handle.capacity)) throw bounds_error(handle.capacity);
  // Element sizes are powers of two: a mask, not a division, on every work-pool call's path.
  if ((ref.offset & (alignment - 1)) != 0) {
    throw RemoteError(detail::concat(
        "rank ", owner, " (pid ", handle.pid, ") described a buffer at offset ", ref.offset,
        ", not a multiple of the element size (", alignment, " bytes); corrupt control block?"));
  }
  // A repeat of a buffer checked and mapped before (the same bytes of descriptor, size and use).
  auto& recent = resolved_[static_cast<size_t>(owner)];
  for (const ResolvedBuffer& entry : recent) {
    if (entry.address != nullptr && entry.bytes == bytes && entry.alignment == alignment &&
        entry.copier == copier && std::memcmp(&entry.ref, &ref, sizeof(ref)) == 0 &&
        entry.mapping->owner_decommits() == entry.decommits) {
      return entry.address;
    }
  }
  if (handle.pid == ::shmccl::detail::current_pid()) {
    device::Arena* own = device::existing_arena(handle.device);
    if (own == nullptr || own->handle().token != handle.token) {
      throw RemoteError(detail::concat("a buffer descriptor names NPU ", handle.device,
                                       " of this process with a wrong token or no such arena"));
    }
    if (out_of_bounds(own->capacity())) throw bounds_error(own->capacity());
    return own->base() + ref.offset;
  }
  ArenaMappings& registry = arena_mappings();
  std::shared_ptr<device::ArenaMapping> mapping;
  try {
    std::lock_guard<std::mutex> lock(registry.mutex);
    const auto key = std::make_pair(handle.pid, handle.token);
    auto found = registry.mappings.find(key);
    if (found != registry.mappings.end()) mapping = found->second.lock();
    if (mapping == nullptr) {
      std::erase_if(registry.mappings, [](const auto& entry) { return entry.second.expired(); });
      mapping = device::ArenaMapping::open(handle);
      registry.mappings[key] = mapping;
    }
    if (std::find(peer_arenas_.begin(), peer_arenas_.end(), mapping) == peer_arenas_.end())
      peer_arenas_.push_back(mapping);
  } catch (const Error& error) {
    // Usually the peer died while we were about to map its memory: say which rank it was.
    if (!healthy()) throw_failure(error.what());
    // A peer whose memory is already gone is exiting; its exit is reported a moment later.
    if (PeerMonitor::wait_for_exit(handle.pid, std::chrono::milliseconds(100))) {
      throw RemoteError(
          detail::concat("rank ", owner, " (pid ", handle.pid, ") died; ", error.what()));
    }
    throw RemoteError(detail::concat("rank ", owner, " (pid ", handle.pid,
                                     "): cannot map its NPU memory: ", error.what()));
  }
  if (out_of_bounds(mapping->capacity())) throw bounds_error(mapping->capacity());
  // Read before the populate: a decommit during it makes the next call look again.
  const uint64_t decommits = mapping->owner_decommits();
  // A buffer of a few pages faults in quickly when the same rank copies it every call; a larger
  // one is prefaulted once (see populate). Oversubscribed ranks share the work pool's pieces out
  // anew at every call, so a small buffer's pages meet a new writer call after call: prefaulted
  // and touched too.
  if (bytes >= kPopulateBytes || (oversubscribed_ && copier == Copier::kWorkPool)) {
    mapping->populate(ref.offset, bytes, oversubscribed_ && bytes <= kTouchBytes);
  }
  char* const address = mapping->base() + ref.offset;
  uint8_t& next = resolved_next_[static_cast<size_t>(owner)];
  recent[next] = ResolvedBuffer{ref, bytes, alignment, copier, mapping.get(), decommits, address};
  next ^= 1;
  return address;
}

std::string late_ranks(const GroupTransport& transport, uint64_t sequence) {
  return ranks_below(transport, sequence,
                     [](const RankSlot& slot) { return arrived_sequence(slot); });
}

std::string ranks_that(const std::string& ranks, std::string_view singular,
                       std::string_view plural) {
  // Empty when the ranks came between the timeout and this message.
  if (ranks.empty()) return detail::concat("ranks (none by now)", plural);
  const bool one = ranks.find(',') == std::string::npos;
  std::string text = one ? "rank " : "ranks ";
  text += ranks;
  text += one ? singular : plural;
  return text;
}

std::string ranks_have_not(const std::string& ranks, std::string_view rest) {
  return ranks_that(ranks, detail::concat(" has not ", rest), detail::concat(" have not ", rest));
}

}  // namespace shmccl::transport
