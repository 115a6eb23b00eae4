// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Fuzz: while the ranks of a group run random collectives, a thread of rank 0 writes random bytes
// into the group's control block (the shared segment every rank trusts least): random bytes
// anywhere, and well-chosen values into the fields that matter most (sequence numbers,
// fingerprints, buffer descriptors: pids, tokens, offsets, sizes, the work-pool counters). A call
// may fail with a shmccl::Error (or even return wrong data: small payloads travel through the
// block); it must never read or write out of bounds, crash or hang. Each round's new group first
// runs verified calls, so a group after a fuzzed one must compute right. Run it under ASan (the
// CI's sanitizer build does). SHMCCL_FUZZ_ROUNDS (default 6) and SHMCCL_FUZZ_SEED (default 1).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <random>
#include <thread>

#include "collectives/group_state.h"
#include "core/config.h"
#include "core/logging.h"
#include "multiprocess.h"
#include "reliability/random_collective.h"
#include "transport/control_block.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;
using transport::BufferRef;
using transport::OpDescriptor;
using transport::RankSlot;

int64_t env_or(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoll(value) : fallback;
}

// Writes into one group's control block until stopped.
class Fuzzer {
 public:
  // `calls_begun`: how many collectives rank 0 has begun on the group, so that half of the writes
  // into ring entries go to the calls in flight (an entry no call uses is rewritten by the next
  // arrival there: writes into it disturb nothing, and with only those a run could pass untested).
  Fuzzer(ProcessGroup& group, uint64_t seed, const std::atomic<uint64_t>& calls_begun)
      : rng_(seed), calls_begun_(calls_begun) {
    transport::GroupTransport& transport = group.state().transport();
    base_ = reinterpret_cast<unsigned char*>(&transport.header());
    bytes_ = transport::control_block_bytes(transport.size());
    size_ = transport.size();
    for (int r = 0; r < size_; ++r)
      pids_.push_back(transport.peer_pid(r));
    thread_ = std::thread([this] { run(); });
  }
  ~Fuzzer() {
    stop_.store(true);
    thread_.join();
  }
  uint64_t writes() const { return writes_; }

 private:
  uint64_t pick(uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng_);
  }

  // A ring entry: any, or that of a call in flight (the one rank 0 is in, or one of the next two,
  // which faster ranks may be in already).
  uint64_t ring_entry_to_hit() {
    if (pick(0, 1) == 0) return pick(0, transport::kCallRing - 1);
    const uint64_t sequence = calls_begun_.load(std::memory_order_relaxed) + pick(0, 2);
    return static_cast<uint64_t>(transport::ring_entry(sequence));
  }

  // Values that break naive checks: zero, all ones, huge, near the arena's size, real pids.
  uint64_t interesting() {
    switch (pick(0, 9)) {
      case 0:
        return 0;
      case 1:
        return ~uint64_t{0};
      case 2:
        return uint64_t{1} << pick(0, 63);
      case 3:
        return (uint64_t{16} << 30) - pick(0, 4096);  // SHMCCL_NPU_MEMORY's default, minus a bit
      case 4:
        return static_cast<uint64_t>(pids_[pick(0, pids_.size() - 1)]);
      case 5:
        return static_cast<uint64_t>(getpid());
      case 6:
        return pick(0, 64);
      default:
        return rng_();
    }
  }

  void write_bytes(size_t offset, const void* data, size_t length) {
    if (offset >= bytes_) return;
    length = std::min(length, bytes_ - offset);
    // The block is shared memory that other processes write concurrently, as a hostile peer
    // would: byte-wise volatile stores, so the compiler keeps every one of them.
    auto* destination = reinterpret_cast<volatile unsigned char*>(base_ + offset);
    const auto* source = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < length; ++i)
      destination[i] = source[i];
  }

  void one_write() {
    const uint64_t kind = pick(0, 9);
    const size_t slot_base = sizeof(transport::ControlHeader) +
                             sizeof(RankSlot) * static_cast<size_t>(pick(0, size_ - 1));
    if (kind < 3) {  // random bytes anywhere
      unsigned char data[16];
      for (unsigned char& byte : data)
        byte = static_cast<unsigned char>(rng_());
      write_bytes(pick(0, bytes_ - 1), data, pick(1, sizeof(data)));
    } else if (kind < 5) {  // an arrival line: sequence, fingerprint, payload
      const uint64_t value = interesting();
      write_bytes(slot_base + offsetof(RankSlot, arrivals) +
                      ring_entry_to_hit() * sizeof(transport::ArrivalLine) +
                      pick(0, sizeof(transport::ArrivalLine) / 8 - 1) * 8,
                  &value, 8);
    } else if (kind < 8) {  // a field of a buffer descriptor
      const size_t descriptor =
          slot_base + offsetof(RankSlot, descriptors) + ring_entry_to_hit() * sizeof(OpDescriptor);
      const size_t ref_offsets[] = {
          offsetof(OpDescriptor, input), offsetof(OpDescriptor, output),
          offsetof(OpDescriptor, outputs) + pick(0, size_ - 1) * sizeof(BufferRef)};
      const size_t ref = descriptor + ref_offsets[pick(0, 2)];
      const uint64_t value = interesting();
      const size_t fields[] = {offsetof(BufferRef, arena) + 0,  offsetof(BufferRef, arena) + 4,
                               offsetof(BufferRef, arena) + 8,  offsetof(BufferRef, arena) + 16,
                               offsetof(BufferRef, arena) + 24, offsetof(BufferRef, offset),
                               offsetof(BufferRef, bytes)};
      const size_t field = fields[pick(0, 6)];
      write_bytes(ref + field, &value, field < offsetof(BufferRef, arena) + 16 ? 4 : 8);
    } else if (kind < 9) {  // descriptor scalars (counts, splits, kind, dtype)
      const size_t descriptor =
          slot_base + offsetof(RankSlot, descriptors) + ring_entry_to_hit() * sizeof(OpDescriptor);
      const uint64_t value = interesting();
      write_bytes(descriptor + pick(0, offsetof(OpDescriptor, input) / 8 - 1) * 8, &value, 8);
    } else {  // the work-pool counters (the header's and a slot's stripe), wake word, abort flag
      const size_t fields[] = {slot_base + offsetof(RankSlot, stripe_claimed),
                               offsetof(transport::ControlHeader, done),
                               offsetof(transport::ControlHeader, wake_word),
                               offsetof(transport::ControlHeader, sleepers),
                               offsetof(transport::ControlHeader, abort_flag),
                               offsetof(transport::ControlHeader, abort_rank)};
      // Any non-zero abort flag ends the group: rarely, so the other cases get their turn.
      const size_t choice = pick(0, 199) == 0 ? pick(4, 5) : pick(0, 3);
      const size_t field = fields[choice];
      const bool counter = choice <= 1;
      // Moving the pool counters a little (not only wildly) reaches the subtle cases.
      uint64_t value = interesting();
      if (counter && pick(0, 1) == 0) {
        value = *reinterpret_cast<volatile uint64_t*>(base_ + field) + pick(0, 3) - 1;
      }
      write_bytes(field, &value, counter ? 8 : 4);
    }
    ++writes_;
  }

  void run() {
    while (!stop_.load(std::memory_order_relaxed)) {
      one_write();
      // Pacing, so that some collectives get through between writes.
      std::this_thread::sleep_for(std::chrono::microseconds(pick(0, 300)));
    }
  }

  std::mt19937_64 rng_;
  const std::atomic<uint64_t>& calls_begun_;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  int size_ = 0;
  std::vector<pid_t> pids_;
  std::atomic<bool> stop_{false};
  uint64_t writes_ = 0;  // read after join
  std::thread thread_;
};

struct Tally {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> timeouts{0};  // of the errors: TimeoutError
  std::atomic<int64_t> remote{0};    // RemoteError (mismatch, corrupt descriptor, abort...)
  std::atomic<int64_t> writes{0};
  std::atomic<int64_t> clean_verified{0};  // calls before the fuzzer started, all verified
  std::atomic<int64_t> wrong{0};           // calls that returned wrong data under fuzzing
};

TEST(ControlBlockFuzz, RandomWritesCauseErrorsNeverCrashesOrHangs) {
#if defined(__SANITIZE_THREAD__)
  // The fuzzer's plain writes into memory the library reads concurrently are the races this test
  // is about: TSan reports them as such. The plain and ASan builds (CI) run it.
  GTEST_SKIP() << "races on purpose: not under ThreadSanitizer";
#endif
  const int64_t rounds = env_or("SHMCCL_FUZZ_ROUNDS", 6);
  const uint64_t seed = static_cast<uint64_t>(env_or("SHMCCL_FUZZ_SEED", 1));
  constexpr int kWorld = 4;
  constexpr int kCallsPerRound = 40;
  constexpr int kCleanCallsPerRound = 4;
  auto* tally = static_cast<Tally*>(
      mmap(nullptr, sizeof(Tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(tally, MAP_FAILED);
  new (tally) Tally();
  const std::string job = testing::unique_job_id();
  auto results = testing::run_ranks(
      kWorld,
      [&](const testing::RankContext& ctx) {
        setenv("SHMCCL_DEBUG", "NONE", 1);
        setenv("SHMCCL_CHUNK_BYTES", "8K", 1);
        config::reload();
        log::reload();
        npu::set_device(ctx.rank);
        auto count_error = [&](const Error& error) {
          tally->errors.fetch_add(1);
          if (dynamic_cast<const TimeoutError*>(&error) != nullptr) tally->timeouts.fetch_add(1);
          if (dynamic_cast<const RemoteError*>(&error) != nullptr) tally->remote.fetch_add(1);
          if (std::getenv("SHMCCL_FUZZ_VERBOSE") != nullptr) {
            std::fprintf(stderr, "[fuzz] rank %d: %s\n", ctx.rank, error.what());
          }
        };
        for (int64_t round = 0; round < rounds; ++round) {
          testing::RankContext round_ctx{ctx.rank, ctx.world, str(ctx.job_id, "-", round)};
          round_ctx.init(/*timeout_ms=*/20000);
          default_group()->set_timeout(std::chrono::milliseconds(300));
          std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(round));  // same on every rank
          std::atomic<uint64_t> calls_begun{0};  // rank 0's collectives on this group
          std::unique_ptr<Fuzzer> fuzzer;
          try {
            // Every rank is past init before the fuzzer starts (its writes may still reach this
            // barrier on a rank that has not left it: an error like any other).
            calls_begun.fetch_add(1);
            barrier();
            // A fresh group (after the last round's was fuzzed to failure) gets every result
            // right before the fuzzer starts.
            for (int call = 0; call < kCleanCallsPerRound; ++call) {
              testing::OpSpec spec = testing::random_op_spec(rng, ctx.world, 24 * 1024);
              testing::PreparedOp op(spec, ctx.rank, ctx.world);
              calls_begun.fetch_add(1);
              op.launch(nullptr)->wait();
              op.verify();
              tally->clean_verified.fetch_add(1);
            }
            calls_begun.fetch_add(1);
            barrier();
            if (ctx.rank == 0) {
              fuzzer = std::make_unique<Fuzzer>(*default_group(), seed + round, calls_begun);
            }
            for (int call = 0; call < kCallsPerRound; ++call) {
              testing::OpSpec spec = testing::random_op_spec(rng, ctx.world, 24 * 1024);
              testing::PreparedOp op(spec, ctx.rank, ctx.world);
              tally->calls.fetch_add(1);
              calls_begun.fetch_add(1);
              op.launch(nullptr)->wait();
              // A call that returned under fuzzing may have wrong data (counted, not an error).
              try {
                op.verify();
              } catch (const testing::RequirementFailed&) {
                tally->wrong.fetch_add(1);
              }
            }
          } catch (const Error& error) {
            count_error(error);  // the group is failed for good; start a new one
          }
          if (fuzzer) tally->writes.fetch_add(static_cast<int64_t>(fuzzer->writes()));
          fuzzer.reset();
          destroy_process_group();
        }
      },
      std::chrono::seconds(120), job);
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
  for (int64_t round = 0; round < rounds; ++round) {
    EXPECT_TRUE(testing::no_segments_left(str(job, "-", round)));
  }
  std::printf(
      "[fuzz] %lld rounds at %d ranks: %lld calls, %lld failed with an error (%lld "
      "RemoteError, %lld TimeoutError), %lld returned wrong data, %lld writes into control "
      "blocks; %lld calls before fuzzing verified\n",
      static_cast<long long>(rounds), kWorld, static_cast<long long>(tally->calls.load()),
      static_cast<long long>(tally->errors.load()), static_cast<long long>(tally->remote.load()),
      static_cast<long long>(tally->timeouts.load()), static_cast<long long>(tally->wrong.load()),
      static_cast<long long>(tally->writes.load()),
      static_cast<long long>(tally->clean_verified.load()));
  // The fuzzer reached the calls: some failed, or returned wrong data (which proves as well that
  // the writes landed where the library reads; most runs fail 3 to 6 of the 6 rounds).
  EXPECT_GT(tally->errors.load() + tally->wrong.load(), 0)
      << "the fuzzer never disturbed a collective";
  // Every round's group started clean and computed right (a fuzzed group's failure did not leak
  // into the next one); a clean call failing is a rank failure above.
  EXPECT_EQ(tally->clean_verified.load(), rounds * kWorld * kCleanCallsPerRound);
  munmap(tally, sizeof(Tally));
}

}  // namespace
}  // namespace shmccl
