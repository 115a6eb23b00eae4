// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The call cache recognises a repeated call, and any change of a field the ranks must agree on
// makes a new call with a new hash (else a mismatch between ranks could go unnoticed).
#include "collectives/call_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "shmccl/shmccl.hpp"

namespace shmccl::collectives {
namespace {

using transport::OpKind;
using transport::Transfer;

struct Call {
  const char* name = "all_gather_into_tensor_uneven";
  OpKind kind = OpKind::kAllGather;
  ScalarType dtype = kFloat32;
  ReduceOp reduce_op = ReduceOp::SUM;
  int root = 0;
  int64_t input_rows = 2;
  int64_t row_elements = 4;
  std::vector<int64_t> splits{2, 3};
  Transfer transfer = Transfer::kArrivalLine;
};

// Remembers `call` in `cache`: whether it repeated the last one, and the hash after it.
std::pair<bool, uint64_t> remember(CallCache& cache, const Call& call) {
  Tensor input = zeros({call.input_rows, call.row_elements}, call.dtype);
  OpPlan plan;
  plan.name = call.name;
  plan.kind = call.kind;
  plan.dtype = call.dtype;
  plan.reduce_op = call.reduce_op;
  plan.root = call.root;
  plan.row_elements = call.row_elements;
  plan.num_splits = static_cast<int>(call.splits.size());
  for (size_t r = 0; r < call.splits.size(); ++r)
    plan.splits[r] = call.splits[r];
  plan.borrow_input(input);
  const bool repeated = cache.remember(plan, call.transfer);
  return {repeated, cache.hash()};
}

// A call of an op without split sizes (its element count is the input's).
Call unsplit_call(const char* name, OpKind kind) {
  Call call;
  call.name = name;
  call.kind = kind;
  call.splits.clear();
  return call;
}

Call all_reduce_call(ReduceOp op) {
  Call call = unsplit_call("all_reduce", OpKind::kAllReduce);
  call.reduce_op = op;
  return call;
}

Call broadcast_call(int root) {
  Call call = unsplit_call("broadcast", OpKind::kBroadcast);
  call.root = root;
  return call;
}

TEST(CallCacheTest, ARepeatIsRecognisedAndEveryAgreedFieldMakesANewCall) {
  auto with = [](std::function<void(Call&)> change) {
    Call call;
    change(call);
    return call;
  };
  // (what differs, a call, the same call but for that, whether the ranks must agree on it: the
  // hash covers only that; the even and uneven forms of a collective are compatible, and an
  // all-gather rank's own row count is checked against its split size locally)
  const std::vector<std::tuple<std::string, Call, Call, bool>> pairs = {
      {"name", Call{}, with([](Call& c) { c.name = "all_gather_into_tensor"; }), false},
      {"dtype", Call{}, with([](Call& c) { c.dtype = kInt32; }), true},
      {"reduce op", all_reduce_call(ReduceOp::SUM), all_reduce_call(ReduceOp::MAX), true},
      {"root", broadcast_call(0), broadcast_call(1), true},
      {"all_reduce's element count", all_reduce_call(ReduceOp::SUM), with([](Call& c) {
         c = all_reduce_call(ReduceOp::SUM);
         c.input_rows = 3;
       }),
       true},
      {"all-gather's own rows", Call{}, with([](Call& c) { c.input_rows = 3; }), false},
      {"row size", Call{}, with([](Call& c) { c.row_elements = 8; }), true},
      {"split count", Call{}, with([](Call& c) {
         c.splits = {2, 3, 0};
       }),
       true},
      {"a split size", Call{}, with([](Call& c) {
         c.splits = {2, 4};
       }),
       true},
      // The same broadcast, pulled after a config::reload() changed SHMCCL_PULL_BROADCAST_RANKS.
      {"transfer", broadcast_call(0), with([](Call& c) {
         c = broadcast_call(0);
         c.transfer = Transfer::kPull;
       }),
       true},
  };
  for (const auto& [what, base, changed, agreed] : pairs) {
    SCOPED_TRACE(what);
    CallCache cache;
    const auto [first_repeated, first_hash] = remember(cache, base);
    EXPECT_FALSE(first_repeated);
    const uint64_t first_id = cache.id();
    const auto [again_repeated, again_hash] = remember(cache, base);
    EXPECT_TRUE(again_repeated);
    EXPECT_EQ(again_hash, first_hash);
    EXPECT_EQ(cache.id(), first_id);

    const auto [changed_repeated, changed_hash] = remember(cache, changed);
    EXPECT_FALSE(changed_repeated);
    if (agreed) {
      EXPECT_NE(changed_hash, first_hash);
    }
    EXPECT_NE(cache.id(), first_id);
    // And back: the first call is new again, with its old hash.
    const auto [back_repeated, back_hash] = remember(cache, base);
    EXPECT_FALSE(back_repeated);
    EXPECT_EQ(back_hash, first_hash);
  }
}

// A loop that alternates calls keeps each one's hash and id (so its descriptor in the slot
// entries that held it), none of them a repeat; the fifth distinct call makes the least recently
// used one make way, which then comes back with a new id.
TEST(CallCacheTest, AlternatingCallsKeepTheirIdsUntilTheLeastRecentMakesWay) {
  std::vector<Call> calls;
  for (int root = 0; root <= CallCache::kCalls; ++root)
    calls.push_back(broadcast_call(root));
  CallCache cache;
  std::vector<uint64_t> ids, hashes;
  for (int i = 0; i < CallCache::kCalls; ++i) {
    EXPECT_FALSE(remember(cache, calls[static_cast<size_t>(i)]).first);
    ids.push_back(cache.id());
    hashes.push_back(cache.hash());
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < CallCache::kCalls; ++i) {
      const auto [repeated, hash] = remember(cache, calls[static_cast<size_t>(i)]);
      EXPECT_FALSE(repeated) << "call " << i << " follows another call";
      EXPECT_EQ(hash, hashes[static_cast<size_t>(i)]);
      EXPECT_EQ(cache.id(), ids[static_cast<size_t>(i)]) << "call " << i;
    }
  }
  // Calls 0..3 were used in that order: a fifth call replaces call 0.
  EXPECT_FALSE(remember(cache, calls.back()).first);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), cache.id()), 0);
  remember(cache, calls[1]);
  EXPECT_EQ(cache.id(), ids[1]);
  remember(cache, calls[0]);
  EXPECT_NE(cache.id(), ids[0]);
  EXPECT_EQ(cache.hash(), hashes[0]);
}

// After forget() the same call is not a repeat (the flight recorder starts a run) but keeps its
// id and hash.
TEST(CallCacheTest, ForgetEndsTheRepeatButKeepsTheCall) {
  CallCache cache;
  remember(cache, Call{});
  const uint64_t id = cache.id();
  const uint64_t hash = cache.hash();
  EXPECT_TRUE(remember(cache, Call{}).first);
  cache.forget();
  EXPECT_FALSE(remember(cache, Call{}).first);
  EXPECT_EQ(cache.id(), id);
  EXPECT_EQ(cache.hash(), hash);
  EXPECT_TRUE(remember(cache, Call{}).first);
}

// The hash of a call does not depend on what was remembered before it.
TEST(CallCacheTest, HashIsAFunctionOfTheCallAlone) {
  Call pull = broadcast_call(0);
  pull.transfer = Transfer::kPull;
  CallCache fresh;
  const uint64_t alone = remember(fresh, pull).second;
  CallCache used;
  remember(used, Call{});
  EXPECT_EQ(remember(used, pull).second, alone);
  // The path is part of the hash (ranks configured differently must not agree).
  Call through_pool = pull;
  through_pool.transfer = Transfer::kArenas;
  CallCache other_path;
  EXPECT_NE(remember(other_path, through_pool).second, alone);
}

}  // namespace
}  // namespace shmccl::collectives
