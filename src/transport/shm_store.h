// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ShmStore: the job's default Store, a fixed-size hash table in the shared-memory segment
// "/shmccl.<ns>.store", usable by every process of the host that knows the namespace.
//
// Creation: open_or_create() races safely: exactly one process creates the segment (O_EXCL),
// initialises it and publishes a ready magic (release store + futex wake); the others open it
// and wait for that magic within the deadline.
//
// Concurrency: a process-shared *robust* pthread mutex in the segment guards the table. If a
// process dies holding it, the next locker gets EOWNERDEAD, drops the entry the dead process was
// writing (if any), recounts the table and marks the mutex consistent. Blocking get()/wait()
// check under the mutex, then sleep on a futex "generation" word that every set()/add() bumps.
//
// Stale stores: every process that opens the store records its pid in the segment. A store
// whose recorded processes are all dead is the leftover of a crashed job: open_or_create() logs
// a warning, unlinks it with the namespace's other segments (control blocks whose names only it
// knew; not the lock file) and creates a fresh one. Consequence: the store's data lives as long as
// one of its users does (the launcher, or any rank); pids are never removed on close.
//
// Hostile or corrupt segments: every size, index and count read from shared memory is checked
// before use; corruption is a shmccl::Error, never an out-of-bounds access.
//
// Limits: kCapacity keys, keys of 1 to kMaxKeySize bytes, values of up to kMaxValueSize bytes.
//
// Ownership: the object owns its mapping (unmapped by the destructor). The name is never
// unlinked implicitly (other processes may still need it): call unlink(), or let the launcher
// remove the namespace. Thread-safe; usable after fork in the child (the mapping is inherited).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm_segment.h"
#include "transport/store.h"

namespace shmccl::transport {

struct ShmStoreHeader;  // the segment's layout: shm_store_layout.h
struct ShmStoreEntry;

class ShmStore final : public Store {
 public:
  static constexpr uint32_t kCapacity = 1024;
  static constexpr uint32_t kMaxKeySize = 255;
  static constexpr uint32_t kMaxValueSize = 4096;
  static constexpr uint32_t kMaxMembers = 256;  // processes recorded as users

  // Opens the store of namespace `ns` (a sanitised name component), creating it if needed, within
  // `timeout` (also the store's default timeout). Throws TimeoutError, Error (incompatible or
  // corrupt segment), SystemError, OutOfMemoryError (/dev/shm full).
  static std::unique_ptr<ShmStore> open_or_create(
      const std::string& ns, std::chrono::milliseconds timeout = kDefaultTimeout);

  ~ShmStore() override = default;

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  // Removes the store's name: later open_or_create() calls make a new store; this and every other
  // mapping stay usable. Idempotent.
  void unlink();

  const std::string& name() const noexcept { return segment_.name(); }
  // True when this process created the segment (it won the creation race).
  bool created() const noexcept { return created_; }
  // The pids recorded as users of the store.
  std::vector<pid_t> members();

  // The total size of the segment and the offset of the entry table in it (for tests that
  // corrupt the segment on purpose).
  static size_t segment_size() noexcept;
  static size_t table_offset() noexcept;

  // Test hook: takes the lock, starts overwriting the existing `key` with `value`, and _exits
  // halfway, so tests can exercise the EOWNERDEAD recovery. Never returns.
  [[noreturn]] void TEST_crash_during_set(const std::string& key, const std::string& value);

 private:
  class Lock;
  enum class JoinResult { kJoined, kRetry };

  ShmStore(ShmSegment segment, std::chrono::milliseconds timeout, bool created);

  static void initialise(ShmSegment& segment);
  // Waits for the creator to publish the store, then either records this process as a member or
  // (when every member is dead) unlinks the stale store and returns kRetry.
  JoinResult join(std::chrono::steady_clock::time_point deadline);
  // With a stale store: removes the namespace's other segments (see shm_store.cc).
  void remove_orphans() const;
  // Runs `attempt` under the lock until it returns true (-> true) or the deadline passes
  // (-> false), sleeping on the generation futex between tries.
  template <typename Attempt>
  bool wait_until(std::chrono::steady_clock::time_point deadline, Attempt&& attempt);

  ShmStoreHeader& header() const noexcept;
  ShmStoreEntry& entry(uint32_t slot) const noexcept;
  void check_key(const std::string& key) const;
  // Slot of `key`, or -1. Requires the lock. Throws Error on a corrupt entry.
  int64_t find(const std::string& key) const;
  // Writes `key` = `value`. Requires the lock. Throws Error when the table is full.
  void put(const std::string& key, const std::string& value);
  std::string value_of(uint32_t slot) const;
  // Bumps the generation (under the lock); returns whether anyone sleeps on it.
  bool publish_change() noexcept;
  void wake_waiters() noexcept;
  void recover_after_owner_death() noexcept;
  [[noreturn]] void throw_corrupt(const std::string& what) const;

  ShmSegment segment_;
  bool created_ = false;
};

}  // namespace shmccl::transport
