// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// StreamTask: callables stored in place or on the heap, moved, run and destroyed exactly once;
// the ones a stream queues most (a lambda holding a shared_ptr, a std::function) allocate
// nothing. Allocations are counted by this binary's operator new, on the test's own thread.
#include "device/stream_task.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <utility>

namespace {

thread_local int t_allocations = 0;

}  // namespace

void* operator new(std::size_t bytes) {
  ++t_allocations;
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept {
  std::free(memory);
}
void operator delete(void* memory, std::size_t) noexcept {
  std::free(memory);
}

namespace shmccl::npu::detail {
namespace {

// Counts the allocations made on this thread while it lives.
class AllocationCount {
 public:
  AllocationCount() : start_(t_allocations) {}
  int operator()() const { return t_allocations - start_; }

 private:
  const int start_;
};

TEST(StreamTaskTest, ALambdaHoldingASharedPtrIsQueuedWithoutAllocating) {
  auto counter = std::make_shared<int>(0);
  const AllocationCount allocations;
  StreamTask task([counter] { ++*counter; });
  StreamTask moved(std::move(task));
  StreamTask assigned;
  assigned = std::move(moved);
  assigned();
  assigned();
  EXPECT_EQ(allocations(), 0);
  EXPECT_EQ(*counter, 2);
  EXPECT_FALSE(task);
  EXPECT_FALSE(moved);
  EXPECT_TRUE(assigned);
}

TEST(StreamTaskTest, AStdFunctionIsKeptInPlace) {
  int runs = 0;
  std::function<void()> function = [&runs] { ++runs; };
  const AllocationCount allocations;
  StreamTask task(std::move(function));
  task();
  EXPECT_EQ(allocations(), 0);
  EXPECT_EQ(runs, 1);
}

TEST(StreamTaskTest, ALargeCallableGoesToTheHeapAndStillRunsOnce) {
  auto counter = std::make_shared<int>(0);
  std::array<char, 256> payload{};
  payload[255] = 7;
  const AllocationCount allocations;
  StreamTask task([counter, payload] { *counter += payload[255]; });
  EXPECT_EQ(allocations(), 1);
  StreamTask moved(std::move(task));  // the pointer moves, not the callable
  EXPECT_EQ(allocations(), 1);
  moved();
  EXPECT_EQ(*counter, 7);
  EXPECT_EQ(counter.use_count(), 2);
  moved = nullptr;
  EXPECT_EQ(counter.use_count(), 1);
}

TEST(StreamTaskTest, CapturesAreReleasedOnceByWhicheverTaskHoldsThem) {
  auto held = std::make_shared<int>(0);
  {
    StreamTask first([held] {});
    EXPECT_EQ(held.use_count(), 2);
    StreamTask second([held] {});
    EXPECT_EQ(held.use_count(), 3);
    second = std::move(first);  // drops second's capture, takes first's
    EXPECT_EQ(held.use_count(), 2);
    StreamTask third(std::move(second));
    EXPECT_EQ(held.use_count(), 2);
    StreamTask& same = third;
    third = std::move(same);  // self-assignment keeps it
    EXPECT_EQ(held.use_count(), 2);
    EXPECT_TRUE(third);
  }
  EXPECT_EQ(held.use_count(), 1);
}

TEST(StreamTaskTest, AMoveOnlyCallableIsAccepted) {
  auto value = std::make_unique<int>(41);
  int seen = 0;
  StreamTask task([value = std::move(value), &seen] { seen = *value + 1; });
  task();
  EXPECT_EQ(seen, 42);
}

TEST(StreamTaskTest, ExceptionsReachTheCaller) {
  StreamTask task([] { throw std::runtime_error("task failed"); });
  EXPECT_THROW(task(), std::runtime_error);
}

}  // namespace
}  // namespace shmccl::npu::detail
