// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// GroupTransport's attach: a process that opens a rank another process of the group already
// holds is refused, and the refusal leaves the holder's slot as it was.
#include "transport/group_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shmccl/error.hpp"
#include "transport/control_block.h"
#include "transport/multiprocess.h"
#include "transport/segment_names.h"

namespace shmccl::transport {
namespace {

using ::testing::HasSubstr;

class GroupTransportTest : public testing::NamespaceTest {
 protected:
  std::string name() const { return segment_name(ns_, "group"); }
};

// The refused attach used to build the transport first and check after: its destructor then
// departed and detached the slot of the rank's real holder, whose peers failed with "destroyed
// its side of the group".
TEST_F(GroupTransportTest, ASecondAttachToATakenRankLeavesTheHoldersSlotAlone) {
  std::unique_ptr<GroupTransport> first = GroupTransport::create(name(), 0, 2);
  std::unique_ptr<GroupTransport> holder = GroupTransport::open(name(), 1, 2);
  try {
    GroupTransport::open(name(), 1, 2);
    ADD_FAILURE() << "a second attach to rank 1 was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("rank 1 of control block"));
    EXPECT_THAT(error.what(), HasSubstr("is already taken by pid"));
  }
  const RankSlot& slot = first->slot(1);
  EXPECT_EQ(slot.attached.load(), kAttached);
  EXPECT_EQ(slot.departed_at.load(), 0u);
  EXPECT_EQ(first->header().departures.load(), 0u);
  EXPECT_TRUE(first->healthy());
}

// Two threads of one rank failing two calls: the call that ran and failed (5) gives up after a
// later one that failed before it arrived (6). The earlier give-up must stand, with its reason:
// the peers of call 5 look for 5 there (a pull's receivers, the pool's and the host pipeline's
// waits), and would miss it under 6.
TEST_F(GroupTransportTest, TheEarliestCallGivenUpStays) {
  std::unique_ptr<GroupTransport> first = GroupTransport::create(name(), 0, 2);
  std::unique_ptr<GroupTransport> peer = GroupTransport::open(name(), 1, 2);
  peer->give_up(6, "call 6 could not be queued", FailureKind::kRemote);
  EXPECT_TRUE(gave_up_on(first->slot(1), 6));
  peer->give_up(5, "call 5 timed out", FailureKind::kTimeout);
  EXPECT_TRUE(gave_up_on(first->slot(1), 5));
  EXPECT_EQ(failure_text(first->slot(1)), "call 5 timed out");
  EXPECT_TRUE(timed_out(first->slot(1)));
  peer->give_up(7, "call 7", FailureKind::kRemote);
  EXPECT_TRUE(gave_up_on(first->slot(1), 5));
  EXPECT_EQ(failure_text(first->slot(1)), "call 5 timed out");
}

}  // namespace
}  // namespace shmccl::transport
