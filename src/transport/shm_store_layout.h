// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The layout of a ShmStore segment, shared by every process that maps it. Internal to
// ShmStore (shm_store.cc); kept apart so the cross-process contract is in one short file.
// Changing anything here requires bumping kStoreLayoutVersion.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace shmccl::transport {

constexpr uint32_t kStoreReadyMagic = 0x53544F52;      // "STOR": initialised and usable
constexpr uint32_t kStoreAbandonedMagic = 0x5354414C;  // "STAL": stale, being unlinked: retry
constexpr uint32_t kStoreLayoutVersion = 1;

constexpr uint32_t kStoreCapacity = 1024;
constexpr uint32_t kStoreMaxKeySize = 255;
constexpr uint32_t kStoreMaxValueSize = 4096;
constexpr uint32_t kStoreMaxMembers = 256;

// Entry states.
constexpr uint32_t kEntryEmpty = 0;    // never used: ends a probe sequence
constexpr uint32_t kEntryUsed = 1;     // holds a key
constexpr uint32_t kEntryDeleted = 2;  // tombstone: probing continues past it

constexpr size_t kStoreTableOffset = 4096;  // the table starts on the second page

// Segment layout (x86-64 / aarch64, little-endian, offsets in bytes):
//   [0, 1152)              Header (below); the rest of the first page is zero
//   [4096, 4096 + kStoreCapacity * 4368)  Entry table: open addressing, linear probing on FNV-1a
//
// Synchronisation: `magic` and `creator_pid` are written once by the creator; `magic` is
// published with a release store that openers read with acquire, which makes the initialised
// header, mutex and (zero) table visible. Everything else is guarded by `mutex`. `generation`
// and `waiters` are atomics only because the futex syscall and the waiters' decrement touch them
// outside the mutex; the mutex orders all their other accesses, so relaxed order suffices.
struct ShmStoreHeader {
  std::atomic<uint32_t>
      magic;                //   0: 0 while initialising, then kStoreReadyMagic/kStoreAbandonedMagic
  uint32_t version;         //   4: kStoreLayoutVersion
  uint32_t capacity;        //   8: kCapacity
  uint32_t max_key_size;    //  12: kStoreMaxKeySize
  uint32_t max_value_size;  //  16: kStoreMaxValueSize
  uint32_t max_members;     //  20: kStoreMaxMembers
  std::atomic<int32_t> creator_pid;   //  24: the creator's first write
  std::atomic<uint32_t> generation;   //  28: futex word, bumped by every set/add
  std::atomic<uint32_t> waiters;      //  32: processes sleeping (or about to) on `generation`
  uint32_t num_keys;                  //  36: entries in state kEntryUsed
  uint32_t dirty_slot;                //  40: 1 + the slot being written, 0 when none
  uint32_t num_members;               //  44: valid entries of `members`
  uint8_t reserved0[16];              //  48
  pthread_mutex_t mutex;              //  64: process-shared, robust
  uint8_t reserved1[24];              // 104
  int32_t members[kStoreMaxMembers];  // 128: pids that opened the store
};
static_assert(sizeof(pthread_mutex_t) == 40, "the Header layout assumes a 40-byte mutex");
static_assert(std::atomic<int32_t>::is_always_lock_free && sizeof(std::atomic<int32_t>) == 4);
static_assert(offsetof(ShmStoreHeader, generation) == 28);
static_assert(offsetof(ShmStoreHeader, mutex) == 64);
static_assert(offsetof(ShmStoreHeader, members) == 128);
static_assert(sizeof(ShmStoreHeader) == 128 + 4 * kStoreMaxMembers);
static_assert(alignof(ShmStoreHeader) == 8);
static_assert(sizeof(ShmStoreHeader) <= kStoreTableOffset);

// One key-value pair. Guarded by the header's mutex.
struct ShmStoreEntry {
  uint32_t state;                  // 0: kEntryEmpty, kEntryUsed or kEntryDeleted
  uint32_t hash;                   // 4: low 32 bits of FNV-1a hash of the key
  uint32_t key_size;               // 8: 1..kStoreMaxKeySize when used
  uint32_t value_size;             // 12: 0..kStoreMaxValueSize
  char key[kStoreMaxKeySize + 1];  // 16
  char value[kStoreMaxValueSize];  // 272
};
static_assert(sizeof(ShmStoreEntry) == 4368);
static_assert(alignof(ShmStoreEntry) == 4);

}  // namespace shmccl::transport
