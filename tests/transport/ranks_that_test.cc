// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ranks_that: the ranks a wait names in its error, as the subject of the sentence (one rank in the
// singular, several in the plural, none when they came between the timeout and the message).
#include <gtest/gtest.h>

#include "transport/group_transport.h"

namespace shmccl::transport {
namespace {

TEST(RanksThat, OneRankIsSingular) {
  EXPECT_EQ(ranks_that("1", " has not called it", " have not called it"),
            "rank 1 has not called it");
  EXPECT_EQ(ranks_that("12", " to join", " to join"), "rank 12 to join");
}

TEST(RanksThat, SeveralRanksArePlural) {
  EXPECT_EQ(ranks_that("1, 3", " has not called it", " have not called it"),
            "ranks 1, 3 have not called it");
}

TEST(RanksThat, NoRankLeftSaysSo) {
  EXPECT_EQ(ranks_that("", " has not called it", " have not called it"),
            "ranks (none by now) have not called it");
}

TEST(RanksHaveNot, TakesTheVerbOfItsSubject) {
  EXPECT_EQ(ranks_have_not("2", "called it"), "rank 2 has not called it");
  EXPECT_EQ(ranks_have_not("0, 2", "called it"), "ranks 0, 2 have not called it");
  EXPECT_EQ(ranks_have_not("", "called it"), "ranks (none by now) have not called it");
}

}  // namespace
}  // namespace shmccl::transport
