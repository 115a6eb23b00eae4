// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Waiting, in a test's rank, until other ranks sleep inside a collective of a group: how a test
// makes one rank call last without sleeping for a guessed time.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "collectives/group_state.h"
#include "multiprocess.h"
#include "shmccl/shmccl.hpp"
#include "transport/group_transport.h"

namespace shmccl::testing {

// Until at least `count` ranks sleep in a wait of `group` (default: the default group); fails the
// rank with `what` after 20 s.
inline void await_sleepers(uint32_t count, const std::string& what,
                           const ProcessGroupPtr& group = nullptr) {
  const transport::GroupTransport& transport =
      (group ? group : default_group())->state().transport();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (transport.header().sleepers.load() < count) {
    require(std::chrono::steady_clock::now() < deadline, what);
    sched_yield();
  }
}

}  // namespace shmccl::testing
