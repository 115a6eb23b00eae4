// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/shm_store.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <optional>
#include <thread>

#include "core/check.h"
#include "core/directory.h"
#include "core/fnv1a.h"
#include "core/logging.h"
#include "transport/futex.h"
#include "transport/peer_monitor.h"
#include "transport/segment_names.h"
#include "transport/shm_store_layout.h"

namespace shmccl::transport {
namespace {

using Clock = std::chrono::steady_clock;

// How often a process waiting for the creator re-checks that the creator is alive.
constexpr std::chrono::milliseconds kCreatorCheckInterval{10};

// One read of a field that another process may modify: the value used after validation is the
// value validated (a plain read could legally be repeated by the compiler).
template <typename T>
T read_shared(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

uint64_t hash_key(const std::string& key) {
  return detail::fnv1a(key);
}

// The CLOCK_REALTIME time matching a steady-clock deadline (pthread_mutex_timedlock takes
// realtime). Capped at a day ahead: lock hold times are microseconds, and a cap keeps the
// arithmetic far from overflow.
timespec realtime_deadline(Clock::time_point deadline) {
  auto remaining = deadline - Clock::now();
  remaining =
      std::clamp<Clock::duration>(remaining, Clock::duration::zero(), std::chrono::hours(24));
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(remaining).count() +
                     static_cast<int64_t>(now.tv_nsec);
  timespec result{};
  result.tv_sec = now.tv_sec + static_cast<time_t>(nanos / 1'000'000'000);
  result.tv_nsec = static_cast<long>(nanos % 1'000'000'000);
  return result;
}

// Short waits of the creation protocol for states that last microseconds (a creator between
// shm_open and ftruncate, a stale store between being abandoned and unlinked).
// How long a store's name may stay unsized (shm_open done, fallocate not) before openers take it
// as left by a creator that died making it. Making it takes milliseconds.
constexpr std::chrono::milliseconds kUnsizedGrace{2000};

void backoff(int attempt) {
  if (attempt < 16) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::min(1000, 10 << std::min(attempt - 16, 7))));
  }
}

std::string printable_key(const std::string& key) {
  return key.size() <= 64 ? key : key.substr(0, 64) + "...";
}

}  // namespace

static_assert(ShmStore::kCapacity == kStoreCapacity && ShmStore::kMaxKeySize == kStoreMaxKeySize &&
              ShmStore::kMaxValueSize == kStoreMaxValueSize &&
              ShmStore::kMaxMembers == kStoreMaxMembers);

size_t ShmStore::segment_size() noexcept {
  return kStoreTableOffset + kCapacity * sizeof(ShmStoreEntry);
}
size_t ShmStore::table_offset() noexcept {
  return kStoreTableOffset;
}

// Holds the store's mutex, with a deadline; repairs the table when the previous owner died.
class ShmStore::Lock {
 public:
  Lock(ShmStore& store, Clock::time_point deadline) : store_(store) {
    pthread_mutex_t* mutex = &store_.header().mutex;
    // Uncontended (the common case): no clock reads, no syscall. A dead owner is also reported
    // here (EOWNERDEAD), which sanitizers understand for trylock but not for timedlock.
    int result = ::pthread_mutex_trylock(mutex);
    if (result == EBUSY) {
      const timespec until = realtime_deadline(deadline);
      result = ::pthread_mutex_timedlock(mutex, &until);
    }
    if (result == 0) return;
    if (result == EOWNERDEAD) {
      store_.recover_after_owner_death();
      ::pthread_mutex_consistent(mutex);
      return;
    }
    const std::string& name = store_.name();
    if (result == ETIMEDOUT) {
      throw TimeoutError(detail::concat("ShmStore ", name,
                                        ": timed out waiting for the store's lock (is a process "
                                        "holding it stopped?)"));
    }
    if (result == ENOTRECOVERABLE) {
      throw Error(detail::concat("ShmStore ", name,
                                 ": the store's lock is unrecoverable (its owner died and the "
                                 "recovery did not complete)"));
    }
    detail::throw_system_error(detail::concat("pthread_mutex_timedlock(ShmStore ", name, ")"),
                               result);
  }
  ~Lock() { ::pthread_mutex_unlock(&store_.header().mutex); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  ShmStore& store_;
};

ShmStore::ShmStore(ShmSegment segment, std::chrono::milliseconds timeout, bool created)
    : Store(timeout), segment_(std::move(segment)), created_(created) {}

ShmStoreHeader& ShmStore::header() const noexcept {
  return *static_cast<ShmStoreHeader*>(segment_.data());
}

ShmStoreEntry& ShmStore::entry(uint32_t slot) const noexcept {
  auto* table =
      reinterpret_cast<ShmStoreEntry*>(static_cast<char*>(segment_.data()) + kStoreTableOffset);
  return table[slot];  // callers pass slot < kCapacity
}

void ShmStore::throw_corrupt(const std::string& what) const {
  throw Error(detail::concat("ShmStore ", name(), " is corrupt: ", what));
}

std::unique_ptr<ShmStore> ShmStore::open_or_create(const std::string& ns,
                                                   std::chrono::milliseconds timeout) {
  SHMCCL_CHECK_ARG(timeout.count() > 0, "ShmStore timeout must be > 0 ms, got ", timeout.count());
  const std::string name = segment_name(ns, "store");
  const auto deadline = deadline_after(timeout);
  std::optional<ShmSegment::Identity> unsized;  // the name's file seen unsized, and since when
  Clock::time_point unsized_since;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (Clock::now() >= deadline) {
        throw TimeoutError(detail::concat("ShmStore ", name,
                                          ": could not open or create the store "
                                          "within ",
                                          timeout.count(), " ms"));
      }
      backoff(attempt);
    }
    // Try to be the creator: O_EXCL makes exactly one process win.
    try {
      ShmSegment segment = ShmSegment::create(name, segment_size(), UnlinkPolicy::kManual);
      // A creator descheduled past kUnsizedGrace between its shm_open and the end of its
      // fallocate may have had its name taken as abandoned (below): it starts over.
      if (!segment.still_named()) continue;
      try {
        initialise(segment);
      } catch (...) {
        segment.unlink();
        throw;
      }
      SHMCCL_INFO(kShm, "created store ", name);
      return std::unique_ptr<ShmStore>(new ShmStore(std::move(segment), timeout, true));
    } catch (const SystemError& error) {
      if (error.error_code() != EEXIST) throw;
    }
    // Someone else holds the name: open it.
    const std::optional<ShmSegment::Identity> identity = ShmSegment::identity_of(name);
    if (!identity) continue;  // removed meanwhile
    if (identity->size == 0) {
      // Its creator has not sized it yet, which takes it a few milliseconds, or was killed before
      // it did (the kernel undoes an interrupted fallocate): no pid in it tells which. A name
      // that stays unsized for kUnsizedGrace is taken as abandoned, or every later job with this
      // job id would wait here in vain.
      if (!unsized || unsized->inode != identity->inode || unsized->device != identity->device) {
        unsized = identity;
        unsized_since = Clock::now();
      } else if (Clock::now() - unsized_since >= kUnsizedGrace &&
                 ShmSegment::unlink_if_same(name, *identity)) {
        SHMCCL_WARN(kShm, "removed store ", name, ": it stayed empty for ", kUnsizedGrace.count(),
                    " ms (its creator died while making it)");
      }
      continue;
    }
    if (identity->size != segment_size()) {
      throw Error(detail::concat("ShmStore ", name, " has size ", identity->size,
                                 " bytes, expected ", segment_size(),
                                 " (made by another shmccl version?)"));
    }
    std::optional<ShmSegment> segment;
    try {
      segment = ShmSegment::try_open(name, segment_size());
    } catch (const RemoteError&) {
      continue;  // replaced by a new, not yet sized store between size_of and try_open
    }
    if (!segment) continue;
    std::unique_ptr<ShmStore> store(new ShmStore(std::move(*segment), timeout, false));
    if (store->join(deadline) == JoinResult::kRetry) continue;  // unmaps the stale one
    SHMCCL_INFO(kShm, "opened store ", name);
    return store;
  }
}

void ShmStore::initialise(ShmSegment& segment) {
  // The segment is fresh from fallocate: all zero, which is a valid empty header and table.
  auto& header = *static_cast<ShmStoreHeader*>(segment.data());
  const pid_t self = ::getpid();
  header.creator_pid.store(self, std::memory_order_relaxed);  // lets openers detect our death
  header.version = kStoreLayoutVersion;
  header.capacity = kCapacity;
  header.max_key_size = kMaxKeySize;
  header.max_value_size = kMaxValueSize;
  header.max_members = kMaxMembers;

  pthread_mutexattr_t attributes;
  int result = ::pthread_mutexattr_init(&attributes);
  if (result == 0) result = ::pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  if (result == 0) result = ::pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  if (result == 0) result = ::pthread_mutex_init(&header.mutex, &attributes);
  ::pthread_mutexattr_destroy(&attributes);
  if (result != 0) {
    detail::throw_system_error(detail::concat("pthread_mutex_init(ShmStore ", segment.name(), ")"),
                               result);
  }
  header.members[0] = self;
  header.num_members = 1;
  // Release: an opener that reads kStoreReadyMagic (acquire) sees everything written above.
  header.magic.store(kStoreReadyMagic, std::memory_order_release);
  futex_wake(&header.magic);
}

ShmStore::JoinResult ShmStore::join(Clock::time_point deadline) {
  ShmStoreHeader& header = this->header();
  const std::string& name = this->name();
  // 1. Wait until the creator has published the store, or has died trying.
  for (;;) {
    const uint32_t magic = header.magic.load(std::memory_order_acquire);
    if (magic == kStoreReadyMagic) break;
    if (magic == kStoreAbandonedMagic) return JoinResult::kRetry;
    if (magic != 0) {
      throw Error(detail::concat("shm segment ", name, " is not a shmccl store (magic 0x", std::hex,
                                 magic, ")"));
    }
    const pid_t creator = header.creator_pid.load(std::memory_order_relaxed);
    if (creator > 0 && !PeerMonitor::is_alive(creator)) {
      // Only the process that wins this exchange unlinks, so a newer store is never removed.
      uint32_t expected = 0;
      if (header.magic.compare_exchange_strong(expected, kStoreAbandonedMagic,
                                               std::memory_order_acq_rel)) {
        SHMCCL_WARN(kShm, "removing store ", name, ": its creator (pid ", creator,
                    ") died before initialising it");
        ShmSegment::unlink_name(name);
        futex_wake(&header.magic);
      }
      return JoinResult::kRetry;
    }
    // A creator that failed (ENOSPC, say) unlinked the name before recording its pid.
    if (!segment_.still_named()) return JoinResult::kRetry;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError(detail::concat(
          "ShmStore ", name, ": timed out waiting for its creator (",
          creator > 0 ? "pid " + std::to_string(creator) : std::string("pid not recorded yet"),
          ") to initialise the store; if that process died, remove the namespace's segments"));
    }
    futex_wait_until(&header.magic, 0, std::min(deadline, now + kCreatorCheckInterval));
  }
  if (header.version != kStoreLayoutVersion || header.capacity != kCapacity ||
      header.max_key_size != kMaxKeySize || header.max_value_size != kMaxValueSize ||
      header.max_members != kMaxMembers) {
    throw Error(detail::concat("ShmStore ", name, " has layout version ", header.version,
                               " capacity ", header.capacity, " limits ", header.max_key_size, "/",
                               header.max_value_size, "/", header.max_members, ", expected ",
                               kStoreLayoutVersion, " ", kCapacity, " ", kMaxKeySize, "/",
                               kMaxValueSize, "/", kMaxMembers));
  }

  // 2. Under the lock: is it stale? If not, record ourselves as a member.
  Lock lock(*this, deadline);
  if (header.magic.load(std::memory_order_relaxed) == kStoreAbandonedMagic) {
    return JoinResult::kRetry;  // declared stale by another process while we waited for the lock
  }
  const uint32_t count = read_shared(header.num_members);
  if (count > kMaxMembers) throw_corrupt(detail::concat("member count ", count));
  const pid_t self = ::getpid();
  bool any_alive = false;
  std::vector<pid_t> dead;
  for (uint32_t i = 0; i < count && !any_alive; ++i) {
    const pid_t member = read_shared(header.members[i]);
    if (member == self || (member > 0 && PeerMonitor::is_alive(member))) {
      any_alive = true;
    } else {
      dead.push_back(member);
    }
  }
  if (!any_alive) {
    SHMCCL_WARN(kShm, "removing stale store ", name, ": every process that used it has exited ",
                dead, "; creating a fresh one");
    header.magic.store(kStoreAbandonedMagic, std::memory_order_relaxed);  // under the lock
    ShmSegment::unlink_name(name);
    remove_orphans();
    return JoinResult::kRetry;
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (read_shared(header.members[i]) == self) return JoinResult::kJoined;
  }
  if (count < kMaxMembers) {
    header.members[count] = self;
    header.num_members = count + 1;
    return JoinResult::kJoined;
  }
  for (uint32_t i = 0; i < kMaxMembers; ++i) {  // full: reuse the slot of a dead process
    const pid_t member = read_shared(header.members[i]);
    if (member <= 0 || !PeerMonitor::is_alive(member)) {
      header.members[i] = self;
      return JoinResult::kJoined;
    }
  }
  throw Error(detail::concat("ShmStore ", name, " already has ", kMaxMembers,
                             " live processes; cannot add process ", self));
}

void ShmStore::check_key(const std::string& key) const {
  SHMCCL_CHECK_ARG(!key.empty() && key.size() <= kMaxKeySize, "ShmStore ", name(), ": key '",
                   printable_key(key), "' has ", key.size(), " bytes; keys must have 1 to ",
                   kMaxKeySize, " bytes");
}

int64_t ShmStore::find(const std::string& key) const {
  const uint64_t hash = hash_key(key);
  const auto start = static_cast<uint32_t>(hash % kCapacity);
  for (uint32_t probe = 0; probe < kCapacity; ++probe) {
    const uint32_t slot = (start + probe) % kCapacity;
    const ShmStoreEntry& e = entry(slot);
    const uint32_t state = read_shared(e.state);
    if (state == kEntryEmpty) return -1;
    if (state == kEntryDeleted) continue;
    if (state != kEntryUsed) throw_corrupt(detail::concat("entry ", slot, " has state ", state));
    const uint32_t key_size = read_shared(e.key_size);
    const uint32_t value_size = read_shared(e.value_size);
    if (key_size == 0 || key_size > kMaxKeySize || value_size > kMaxValueSize) {
      throw_corrupt(detail::concat("entry ", slot, " has key size ", key_size, " and value size ",
                                   value_size));
    }
    if (read_shared(e.hash) == static_cast<uint32_t>(hash) && key_size == key.size() &&
        std::memcmp(e.key, key.data(), key_size) == 0) {
      return slot;
    }
  }
  return -1;
}

void ShmStore::put(const std::string& key, const std::string& value) {
  ShmStoreHeader& h = header();
  int64_t slot = find(key);
  const bool is_new = slot < 0;
  if (is_new) {  // find() validated the probe sequence: take its first free slot
    const uint64_t start = hash_key(key) % kCapacity;
    for (uint32_t probe = 0; probe < kCapacity && slot < 0; ++probe) {
      const uint32_t candidate = (start + probe) % kCapacity;
      if (read_shared(entry(candidate).state) != kEntryUsed) slot = candidate;
    }
    if (slot < 0) {
      throw Error(detail::concat("ShmStore ", name(), " is full (", kCapacity,
                                 " keys); cannot add key '", printable_key(key), "'"));
    }
  }
  ShmStoreEntry& e = entry(static_cast<uint32_t>(slot));
  // A process may die at any instruction (the robust mutex then hands the table to the next
  // locker): mark the slot dirty before touching it and clean only after. Signal fences keep
  // the compiler from moving the entry's stores across the marks; the dying thread's own stores
  // are seen in program order up to the point where it stopped.
  h.dirty_slot = static_cast<uint32_t>(slot) + 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  e.hash = static_cast<uint32_t>(hash_key(key));
  e.key_size = static_cast<uint32_t>(key.size());
  std::memcpy(e.key, key.data(), key.size());
  e.value_size = static_cast<uint32_t>(value.size());
  std::memcpy(e.value, value.data(), value.size());
  e.state = kEntryUsed;
  if (is_new) h.num_keys = std::min(read_shared(h.num_keys) + 1, kCapacity);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  h.dirty_slot = 0;
}

std::string ShmStore::value_of(uint32_t slot) const {
  const ShmStoreEntry& e = entry(slot);
  const uint32_t size = read_shared(e.value_size);
  if (size > kMaxValueSize) throw_corrupt(detail::concat("entry ", slot, " has value size ", size));
  return std::string(e.value, size);
}

bool ShmStore::publish_change() noexcept {
  ShmStoreHeader& h = header();
  h.generation.fetch_add(1, std::memory_order_relaxed);
  // A waiter increments `waiters` under the lock before sleeping on the old generation, so a
  // zero read here (under the lock) means nobody can be asleep on it: the wake can be skipped.
  return h.waiters.load(std::memory_order_relaxed) != 0;
}

void ShmStore::wake_waiters() noexcept {
  try {
    futex_wake(&header().generation);
  } catch (...) {  // only EFAULT/EINVAL, impossible for our own mapping
  }
}

void ShmStore::recover_after_owner_death() noexcept {
  ShmStoreHeader& h = header();
  SHMCCL_WARN(kShm, "ShmStore ", name(), ": a process died holding the store's lock; repairing");
  const uint32_t dirty = read_shared(h.dirty_slot);
  if (dirty != 0 && dirty <= kCapacity) entry(dirty - 1).state = kEntryDeleted;
  h.dirty_slot = 0;
  uint32_t count = 0;
  for (uint32_t slot = 0; slot < kCapacity; ++slot) {
    ShmStoreEntry& e = entry(slot);
    const uint32_t state = read_shared(e.state);
    if (state == kEntryUsed && read_shared(e.key_size) > 0 &&
        read_shared(e.key_size) <= kMaxKeySize && read_shared(e.value_size) <= kMaxValueSize) {
      ++count;
    } else if (state != kEntryEmpty) {
      e.state = kEntryDeleted;
    }
  }
  h.num_keys = count;
  h.generation.fetch_add(1, std::memory_order_relaxed);
  wake_waiters();
}

template <typename Attempt>
bool ShmStore::wait_until(Clock::time_point deadline, Attempt&& attempt) {
  ShmStoreHeader& h = header();
  for (;;) {
    uint32_t generation;
    {
      Lock lock(*this, deadline);
      if (attempt()) return true;
      if (Clock::now() >= deadline) return false;
      // Both under the lock: a set() after this unlock sees our increment and wakes us, and
      // one before it has already changed what attempt() saw.
      generation = h.generation.load(std::memory_order_relaxed);
      h.waiters.fetch_add(1, std::memory_order_relaxed);
    }
    // kValueChanged, kWoken, kInterrupted and kTimedOut all lead to the same re-check.
    futex_wait_until(&h.generation, generation, deadline);
    h.waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

void ShmStore::set(const std::string& key, const std::string& value) {
  check_key(key);
  SHMCCL_CHECK_ARG(value.size() <= kMaxValueSize, "ShmStore ", name(), ": the value of key '",
                   printable_key(key), "' has ", value.size(), " bytes; at most ", kMaxValueSize,
                   " are allowed");
  bool wake;
  {
    Lock lock(*this, deadline_after(timeout()));
    put(key, value);
    wake = publish_change();
  }
  if (wake) wake_waiters();
}

std::string ShmStore::get(const std::string& key) {
  check_key(key);
  const auto wait_time = timeout();
  std::string value;
  const bool found = wait_until(deadline_after(wait_time), [&] {
    const int64_t slot = find(key);
    if (slot < 0) return false;
    value = value_of(static_cast<uint32_t>(slot));
    return true;
  });
  if (!found) {
    throw TimeoutError(detail::concat("ShmStore ", name(), ": timed out after ", wait_time.count(),
                                      " ms waiting for key '", printable_key(key), "'"));
  }
  return value;
}

int64_t ShmStore::add(const std::string& key, int64_t delta) {
  check_key(key);
  int64_t result;
  bool wake;
  {
    Lock lock(*this, deadline_after(timeout()));
    int64_t current = 0;
    const int64_t slot = find(key);
    if (slot >= 0) {
      const std::string text = value_of(static_cast<uint32_t>(slot));
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), current);
      SHMCCL_CHECK_ARG(error == std::errc() && end == text.data() + text.size(), "ShmStore ",
                       name(), ": key '", printable_key(key),
                       "' does not hold an integer; cannot add to it");
    }
    SHMCCL_CHECK_ARG(!__builtin_add_overflow(current, delta, &result), "ShmStore ", name(),
                     ": adding ", delta, " to key '", printable_key(key), "' (", current,
                     ") overflows int64");
    put(key, std::to_string(result));
    wake = publish_change();
  }
  if (wake) wake_waiters();
  return result;
}

bool ShmStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    check_key(key);
  Lock lock(*this, deadline_after(timeout()));
  return std::all_of(keys.begin(), keys.end(),
                     [&](const std::string& key) { return find(key) >= 0; });
}

void ShmStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& key : keys)
    check_key(key);
  SHMCCL_CHECK_ARG(timeout.count() > 0, "ShmStore::wait timeout must be > 0 ms, got ",
                   timeout.count());
  std::vector<std::string> missing;
  const bool found = wait_until(deadline_after(timeout), [&] {
    missing.clear();
    for (const std::string& key : keys) {
      if (find(key) < 0) missing.push_back(printable_key(key));
    }
    return missing.empty();
  });
  if (!found) {
    throw TimeoutError(detail::concat("ShmStore ", name(), ": timed out after ", timeout.count(),
                                      " ms waiting for keys ", missing));
  }
}

bool ShmStore::delete_key(const std::string& key) {
  check_key(key);
  Lock lock(*this, deadline_after(timeout()));
  const int64_t slot = find(key);
  if (slot < 0) return false;
  ShmStoreHeader& h = header();
  entry(static_cast<uint32_t>(slot)).state = kEntryDeleted;
  const uint32_t count = read_shared(h.num_keys);
  h.num_keys = count > 0 ? count - 1 : 0;
  return true;
}

int64_t ShmStore::num_keys() {
  Lock lock(*this, deadline_after(timeout()));
  const uint32_t count = read_shared(header().num_keys);
  if (count > kCapacity) throw_corrupt(detail::concat("key count ", count));
  return count;
}

std::vector<pid_t> ShmStore::members() {
  Lock lock(*this, deadline_after(timeout()));
  const uint32_t count = read_shared(header().num_members);
  if (count > kMaxMembers) throw_corrupt(detail::concat("member count ", count));
  std::vector<pid_t> pids;
  for (uint32_t i = 0; i < count; ++i)
    pids.push_back(read_shared(header().members[i]));
  return pids;
}

void ShmStore::remove_orphans() const {
  // The job's other segments (control blocks) whose names only this store knew: every process
  // that could use them has exited (a process that got a name from the store joined it first), so
  // nobody else would remove them. The lock file stays: it belongs to the launcher's liveness
  // check (shmrun --cleanup).
  const std::string store_entry = segment_.name().substr(1);
  const std::string prefix =
      store_entry.substr(0, store_entry.size() - std::string("store").size());
  std::vector<std::string> orphans;
  detail::Directory("/dev/shm").for_each([&](const char* name) {
    const std::string file = name;
    if (file.compare(0, prefix.size(), prefix) != 0 || file == store_entry) return true;
    if (file.ends_with(".lock")) return true;
    orphans.push_back(file);
    return true;
  });
  for (const std::string& file : orphans) {
    SHMCCL_WARN(kShm, "removing /dev/shm/", file, ", left by the job of the stale store");
    ShmSegment::unlink_name("/" + file);
  }
}

void ShmStore::unlink() {
  segment_.unlink();
}

void ShmStore::TEST_crash_during_set(const std::string& key, const std::string& value) {
  check_key(key);
  SHMCCL_CHECK_ARG(value.size() <= kMaxValueSize, "value too large");
  // Not a Lock: its destructor would unlock, and the point is to die holding the mutex.
  pthread_mutex_lock(&header().mutex);
  const int64_t slot = find(key);
  SHMCCL_CHECK_ARG(slot >= 0, "TEST_crash_during_set needs an existing key");
  ShmStoreEntry& e = entry(static_cast<uint32_t>(slot));
  header().dirty_slot = static_cast<uint32_t>(slot) + 1;
  e.value_size = static_cast<uint32_t>(value.size());
  std::memcpy(e.value, value.data(), value.size() / 2);
  ::_exit(0);
}

}  // namespace shmccl::transport
