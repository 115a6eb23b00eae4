// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// current_pid() is getpid() without the system call: in this process, and in a child made by
// fork() after the id was cached (which must not keep the parent's).
#include "core/process_id.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace shmccl::detail {
namespace {

TEST(ProcessIdTest, IsThisProcesssId) {
  EXPECT_EQ(current_pid(), ::getpid());
  EXPECT_EQ(current_pid(), ::getpid());  // cached now
}

TEST(ProcessIdTest, AForkedChildGetsItsOwnId) {
  const pid_t parent = current_pid();  // cached before the fork
  ASSERT_EQ(parent, ::getpid());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 0 right, 1 the parent's id kept, 2 another wrong id.
    const pid_t seen = current_pid();
    _exit(seen == ::getpid() ? 0 : seen == parent ? 1 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child saw its parent's id";
  EXPECT_EQ(current_pid(), parent);
}

}  // namespace
}  // namespace shmccl::detail
