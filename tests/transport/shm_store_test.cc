// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ShmStore: the Store contract in one process, rendezvous of 2/4/8 forked processes, exact
// counters, timeouts naming keys, the creation race, stale and half-made stores, corrupt
// segments, limits, and recovery from a process that died holding the lock.
#include "transport/shm_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/file_descriptor.h"
#include "shmccl/error.hpp"
#include "transport/multiprocess.h"
#include "transport/segment_names.h"
#include "transport/shm_segment.h"
#include "transport/shm_store_layout.h"

namespace shmccl::transport {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::NamespaceTest;
using Clock = std::chrono::steady_clock;

// An anonymous shared mapping that forked children write their results into.
template <typename T>
class SharedArray {
 public:
  explicit SharedArray(size_t count) : count_(count) {
    void* memory =
        ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap failed");
    data_ = static_cast<T*>(memory);
  }
  ~SharedArray() { ::munmap(data_, bytes()); }
  T& operator[](size_t i) { return data_[i]; }

 private:
  size_t bytes() const { return count_ * sizeof(T); }
  size_t count_;
  T* data_;
};

class ShmStoreTest : public NamespaceTest {
 protected:
  std::unique_ptr<ShmStore> open(std::chrono::milliseconds timeout = 10s) {
    return ShmStore::open_or_create(ns_, timeout);
  }
  std::string name() const { return segment_name(ns_, "store"); }
};

TEST_F(ShmStoreTest, SingleProcessContract) {
  auto store = open();
  EXPECT_TRUE(store->created());
  EXPECT_EQ(store->name(), name());
  EXPECT_EQ(store->num_keys(), 0);
  store->set("a", "1");
  const std::string binary("\0\xff\x01 bytes\0", 10);
  store->set("binary", std::vector<uint8_t>(binary.begin(), binary.end()));
  EXPECT_EQ(store->get("a"), "1");
  EXPECT_EQ(store->get("binary"), binary);
  store->set("a", "replaced");
  EXPECT_EQ(store->get("a"), "replaced");
  store->set("empty", "");
  EXPECT_EQ(store->get("empty"), "");
  store->set("max", std::string(ShmStore::kMaxValueSize, 'v'));
  EXPECT_EQ(store->get("max").size(), ShmStore::kMaxValueSize);
  EXPECT_EQ(store->num_keys(), 4);

  EXPECT_TRUE(store->check({"a", "binary"}));
  EXPECT_FALSE(store->check({"a", "missing"}));
  EXPECT_TRUE(store->check({}));

  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -7), -2);
  EXPECT_EQ(store->get("counter"), "-2");
  EXPECT_THROW(store->add("a", 1), InvalidArgument);  // "replaced" is not an integer
  store->set("big", std::to_string(INT64_MAX));
  EXPECT_THROW(store->add("big", 1), InvalidArgument);

  EXPECT_TRUE(store->delete_key("a"));
  EXPECT_FALSE(store->delete_key("a"));
  EXPECT_FALSE(store->check({"a"}));
  EXPECT_EQ(store->num_keys(), 5);
  store->wait({"binary", "counter"}, 1s);
  EXPECT_EQ(store->members(), std::vector<pid_t>{::getpid()});
  store->unlink();
}

TEST_F(ShmStoreTest, LimitsAreInvalidArgumentsNamingKeyAndSize) {
  auto store = open();
  const std::string long_key(ShmStore::kMaxKeySize + 1, 'k');
  try {
    store->set(long_key, "x");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("256 bytes"));
    EXPECT_THAT(error.what(), HasSubstr("kkkkkkkk"));
  }
  try {
    store->set("the-key", std::string(ShmStore::kMaxValueSize + 1, 'v'));
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("the-key"));
    EXPECT_THAT(error.what(), HasSubstr("4097 bytes"));
  }
  EXPECT_THROW(store->set("", "x"), InvalidArgument);
  EXPECT_THROW(store->get(long_key), InvalidArgument);
  EXPECT_THROW(store->check({"ok", ""}), InvalidArgument);
  EXPECT_NO_THROW(store->set(std::string(ShmStore::kMaxKeySize, 'k'), "x"));
  store->unlink();
}

TEST_F(ShmStoreTest, FullTableIsAnErrorAndDeletedSlotsAreReused) {
  auto store = open();
  for (uint32_t i = 0; i < ShmStore::kCapacity; ++i)
    store->set("key" + std::to_string(i), "v");
  EXPECT_EQ(store->num_keys(), ShmStore::kCapacity);
  try {
    store->set("one-too-many", "v");
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("full"));
    EXPECT_THAT(error.what(), HasSubstr("one-too-many"));
  }
  store->set("key7", "replacing works when full");
  EXPECT_TRUE(store->delete_key("key3"));
  store->set("one-too-many", "now it fits");
  EXPECT_EQ(store->get("one-too-many"), "now it fits");
  for (uint32_t i = 0; i < ShmStore::kCapacity; ++i) {
    if (i == 3) continue;
    ASSERT_TRUE(store->check({"key" + std::to_string(i)})) << i;
  }
  store->unlink();
}

TEST_F(ShmStoreTest, GetTimesOutNamingTheKey) {
  auto store = open();
  store->set_timeout(100ms);
  const auto start = Clock::now();
  try {
    store->get("never-set");
    FAIL();
  } catch (const TimeoutError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'never-set'"));
    EXPECT_THAT(error.what(), HasSubstr("100 ms"));
  }
  EXPECT_GE(Clock::now() - start, 100ms);
  store->set("here", "1");
  try {
    store->wait({"here", "missing-1", "missing-2"}, 50ms);
    FAIL();
  } catch (const TimeoutError& error) {
    EXPECT_THAT(error.what(), HasSubstr("[missing-1, missing-2]"));
  }
  store->unlink();
}

// The parent sleeps in get() with a 60 s timeout; the child's set() must wake it at once. Without
// the wake, get() would find the key only when its futex wait timed out, after 60 s.
TEST_F(ShmStoreTest, BlockedGetIsWokenByAnotherProcess) {
  auto store = open(60s);
  SharedArray<int64_t> set_at(1);  // steady_clock (CLOCK_MONOTONIC: one clock for both processes)
  set_at[0] = 0;
  const pid_t self = ::getpid();
  const pid_t child = testing::fork_child([&] {
    auto mine = open();
    CHILD_CHECK(!mine->created());
    // Make sure the parent really sleeps in get(), so the futex wake path is what ends it.
    CHILD_CHECK(testing::wait_until_sleeping(self, "futex"));
    set_at[0] = Clock::now().time_since_epoch().count();
    mine->set("late", "finally");
  });
  EXPECT_EQ(store->get("late"), "finally");
  const auto returned = Clock::now();
  EXPECT_EQ(testing::wait_for_exit(child, 5s), 0);
  ASSERT_NE(set_at[0], 0);
  EXPECT_LT(returned - Clock::time_point(Clock::duration(set_at[0])), 5s)
      << "get() was not woken by the set()";
  store->unlink();
}

class ShmStoreRendezvousTest : public ShmStoreTest, public ::testing::WithParamInterface<int> {};

TEST_P(ShmStoreRendezvousTest, EveryRankSeesEveryRank) {
  const int world = GetParam();
  auto parent = open();  // a live member throughout, so the store is never taken for stale
  const std::string failures = testing::run_processes(world, [&](int rank) {
    auto store = open();
    store->set("rank/" + std::to_string(rank),
               "rank " + std::to_string(rank) + " pid " + std::to_string(::getpid()));
    for (int peer = 0; peer < world; ++peer) {
      const std::string value = store->get("rank/" + std::to_string(peer));
      const std::string expected = "rank " + std::to_string(peer) + " pid ";
      CHILD_CHECK(value.rfind(expected, 0) == 0 && value.size() > expected.size(), "rank ", rank,
                  " got '", value, "' for rank ", peer);
    }
    store->add("done", 1);
  });
  EXPECT_EQ(failures, "");
  EXPECT_EQ(parent->get("done"), std::to_string(world));
  EXPECT_EQ(parent->num_keys(), world + 1);
  EXPECT_EQ(parent->members().size(), static_cast<size_t>(world + 1));
  parent->unlink();
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmStoreRendezvousTest, ::testing::Values(1, 2, 3, 4, 8));

TEST_F(ShmStoreTest, AddIsExactAcrossEightProcesses) {
  constexpr int kProcesses = 8;
  constexpr int kAddsEach = 500;
  constexpr int kTotal = kProcesses * kAddsEach;
  auto parent = open();
  SharedArray<uint8_t> seen(kTotal + 1);  // seen[v]: how many adds returned v
  const std::string failures = testing::run_processes(kProcesses, [&](int rank) {
    auto store = open();
    int64_t previous = 0;
    for (int i = 0; i < kAddsEach; ++i) {
      const int64_t value = store->add("counter", 1);
      CHILD_CHECK(value > previous && value <= kTotal, "rank ", rank, " got ", value);
      __atomic_fetch_add(&seen[static_cast<size_t>(value)], 1, __ATOMIC_RELAXED);
      previous = value;
    }
  });
  EXPECT_EQ(failures, "");
  EXPECT_EQ(parent->get("counter"), std::to_string(kTotal));
  for (int value = 1; value <= kTotal; ++value) {
    ASSERT_EQ(seen[static_cast<size_t>(value)], 1) << "value " << value;
  }
  parent->unlink();
}

TEST_F(ShmStoreTest, ConcurrentCreationHasExactlyOneWinner) {
  constexpr int kProcesses = 8;
  SharedArray<int> created(kProcesses);
  const std::string failures = testing::run_processes(kProcesses, [&](int rank) {
    auto store = open();
    created[rank] = store->created() ? 1 : 0;
    // Stay until all have joined (so no one's store is ever seen as stale), then check that all
    // joined the same store.
    if (store->add("joined", 1) == kProcesses) store->set("all-joined", "");
    store->get("all-joined");
    CHILD_CHECK(store->members().size() == kProcesses, "members ", store->members().size());
    if (store->add("left", 1) == kProcesses) store->unlink();
  });
  EXPECT_EQ(failures, "");
  int winners = 0;
  for (int rank = 0; rank < kProcesses; ++rank)
    winners += created[rank];
  EXPECT_EQ(winners, 1);
}

TEST_F(ShmStoreTest, StoreOfDeadProcessesIsReplaced) {
  const pid_t child = testing::fork_child([&] {
    auto store = open();
    store->set("from-the-dead", "x");
    // Exits without unlinking: the leftover of a crashed job.
  });
  ASSERT_EQ(testing::wait_for_exit(child, 5s), 0);
  ASSERT_TRUE(ShmSegment::size_of(name()).has_value());
  auto store = open();
  EXPECT_TRUE(store->created()) << "the stale store was reused";
  EXPECT_FALSE(store->check({"from-the-dead"}));
  EXPECT_EQ(store->members(), std::vector<pid_t>{::getpid()});
  store->unlink();
}

TEST_F(ShmStoreTest, StoreOfALiveProcessIsShared) {
  auto store = open();
  store->set("from-the-living", "y");
  const std::string failures = testing::run_processes(1, [&](int) {
    auto mine = open();
    CHILD_CHECK(!mine->created());
    CHILD_CHECK(mine->get("from-the-living") == "y");
  });
  EXPECT_EQ(failures, "");
  store->unlink();
}

TEST_F(ShmStoreTest, HalfMadeStoreOfADeadCreatorIsReplaced) {
  const pid_t dead = testing::fork_child([] {});
  ASSERT_EQ(testing::wait_for_exit(dead, 5s), 0);
  {
    // What a creator that died before publishing leaves: right size, magic 0, its pid.
    ShmSegment half = ShmSegment::create(name(), ShmStore::segment_size(), UnlinkPolicy::kManual);
    static_cast<ShmStoreHeader*>(half.data())->creator_pid.store(dead);
  }
  auto store = open(2s);
  EXPECT_TRUE(store->created());
  store->unlink();
}

// A creator killed between its shm_open and the end of its fallocate (which the kernel then
// undoes) leaves the name at 0 bytes, with no pid to tell it is dead: once the name stays empty
// for the grace period (2 s), an opener removes it and makes the store, instead of every later
// job with this job id timing out there.
TEST_F(ShmStoreTest, AStoreNameLeftEmptyByAKilledCreatorIsReplaced) {
  const FileDescriptor empty(::shm_open(name().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
  ASSERT_TRUE(empty.valid());
  const auto start = Clock::now();
  auto store = open(10s);
  EXPECT_TRUE(store->created());
  EXPECT_GE(Clock::now() - start, 2s) << "an empty name is a creator at work for a while";
  EXPECT_LT(Clock::now() - start, 8s);
  store->set("key", "value");
  EXPECT_EQ(open(1s)->get("key"), "value");  // the name is the new store's
  store->unlink();
}

TEST_F(ShmStoreTest, HalfMadeStoreOfALiveCreatorTimesOut) {
  ShmSegment half = ShmSegment::create(name(), ShmStore::segment_size());
  static_cast<ShmStoreHeader*>(half.data())->creator_pid.store(::getpid());
  try {
    open(100ms);
    FAIL();
  } catch (const TimeoutError& error) {
    EXPECT_THAT(error.what(), HasSubstr(name()));
  }
}

// How many times this process maps /dev/shm/<segment>.
int mappings_of(const std::string& segment) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.ends_with("/dev/shm" + segment)) ++count;
  }
  return count;
}

// A creator that failed before recording its pid (ENOSPC, say) unlinks the half-made store. An
// opener that mapped it meanwhile must notice at once and make its own, not wait for the timeout.
TEST_F(ShmStoreTest, HalfMadeStoreWhoseCreatorGaveUpIsReplacedPromptly) {
  ShmSegment half = ShmSegment::create(name(), ShmStore::segment_size(), UnlinkPolicy::kManual);
  std::unique_ptr<ShmStore> store;
  std::exception_ptr failure;
  const auto start = Clock::now();
  std::thread opener([&] {
    try {
      store = open(5s);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  // The opener maps the half-made store (ours is the first mapping), then waits in join.
  while (mappings_of(name()) < 2 && Clock::now() - start < 4s)
    std::this_thread::yield();
  half.unlink();
  opener.join();
  if (failure) std::rethrow_exception(failure);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->created());
  EXPECT_LT(Clock::now() - start, 4s);  // not the 5 s timeout
  store->unlink();
}

TEST_F(ShmStoreTest, ForeignSegmentsAreErrors) {
  {
    ShmSegment wrong_size = ShmSegment::create(name(), 4096);
    EXPECT_THROW(open(1s), Error);
  }
  {
    ShmSegment bad_magic = ShmSegment::create(name(), ShmStore::segment_size());
    static_cast<ShmStoreHeader*>(bad_magic.data())->magic.store(0x12345678);
    try {
      open(1s);
      FAIL();
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("not a shmccl store"));
    }
  }
}

TEST_F(ShmStoreTest, CorruptTableIsAnErrorNotACrash) {
  auto store = open();
  store->set("k", "v");
  ShmSegment raw = ShmSegment::open(name(), ShmStore::segment_size());
  auto* bytes = static_cast<unsigned char*>(raw.data());
  // A corrupt entry is named at once: not a key that is never found (a timeout).
  store->set_timeout(100ms);
  const auto corrupt_error = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const TimeoutError& error) {
      return std::string("a timeout: ") + error.what();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  // A huge key size, then a huge value size, then both, in every entry: any use without its
  // bounds check would read far out of bounds.
  for (const auto& [huge_key, huge_value] : {std::pair{true, false}, {false, true}, {true, true}}) {
    std::vector<std::pair<uint32_t, uint32_t>> saved;
    for (size_t offset = ShmStore::table_offset(); offset < raw.size();
         offset += sizeof(ShmStoreEntry)) {
      auto* entry = reinterpret_cast<ShmStoreEntry*>(bytes + offset);
      if (entry->state != kEntryUsed) continue;
      saved.emplace_back(entry->key_size, entry->value_size);
      if (huge_key) entry->key_size = 0xFFFFFFF0u;
      if (huge_value) entry->value_size = 0xFFFFFFF0u;
    }
    ASSERT_EQ(saved.size(), 1u);
    EXPECT_THAT(corrupt_error([&] { store->get("k"); }),
                HasSubstr(huge_key ? "is corrupt: entry" : "and value size 4294967280"))
        << "key size huge: " << huge_key << ", value size huge: " << huge_value;
    if (huge_key && huge_value) break;  // left corrupt for what follows
    for (size_t offset = ShmStore::table_offset(), i = 0; offset < raw.size();
         offset += sizeof(ShmStoreEntry)) {
      auto* entry = reinterpret_cast<ShmStoreEntry*>(bytes + offset);
      if (entry->state != kEntryUsed) continue;
      entry->key_size = saved[i].first;
      entry->value_size = saved[i++].second;
    }
    EXPECT_EQ(store->get("k"), "v");
  }
  std::memset(bytes + ShmStore::table_offset(), 0xFF, raw.size() - ShmStore::table_offset());
  EXPECT_THROW(store->get("k"), Error);
  EXPECT_THROW(store->set("other", "v"), Error);
  EXPECT_THROW(store->check({"k"}), Error);
  auto* header = static_cast<ShmStoreHeader*>(raw.data());
  header->num_members = 0xFFFFFFFFu;
  header->num_keys = 0xFFFFFFFFu;
  EXPECT_THROW(store->members(), Error);
  EXPECT_THROW(store->num_keys(), Error);
  store->unlink();
}

TEST_F(ShmStoreTest, RecoversFromAProcessThatDiedHoldingTheLock) {
  auto store = open();
  store->set("k", "old");
  store->set("other", "1");
  const pid_t child = testing::fork_child([&] {
    store->TEST_crash_during_set("k", std::string(1000, 'n'));  // dies holding the lock
  });
  ASSERT_EQ(testing::wait_for_exit(child, 5s), 0);
  EXPECT_EQ(store->get("other"), "1");  // EOWNERDEAD: repaired, not stuck
  EXPECT_FALSE(store->check({"k"})) << "the half-written entry must be dropped";
  EXPECT_EQ(store->num_keys(), 1);
  store->set("k", "new");
  EXPECT_EQ(store->get("k"), "new");
  EXPECT_EQ(store->add("counter", 2), 2);
  store->unlink();
}

}  // namespace
}  // namespace shmccl::transport
