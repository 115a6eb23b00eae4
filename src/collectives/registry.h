// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The process-wide registry of process groups: the default group, the rendezvous it came from,
// and every group by communicator name. Thread-safe (one mutex).
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "shmccl/process_group.hpp"

namespace shmccl::collectives {

// The default group; InvalidArgument when init_process_group has not run.
ProcessGroupPtr require_default_group();
ProcessGroupPtr resolve_group(const ProcessGroupPtr& group);
// `group`, or the default group, without touching reference counts or locks (the collectives'
// hot path). Using a group while another thread destroys it is undefined, as in torch.
ProcessGroup& group_ref(const ProcessGroupPtr& group);
// ProcessGroup::shutdown(), handing back what leaving found wrong instead of only logging it: a
// call this rank finished early that a peer called differently, or a peer that never came to it
// (settle_early_finishes_before_leaving). destroy_process_group() throws it once every group is
// down. Null when there was nothing, or when the group was already shut down.
std::exception_ptr shut_down(ProcessGroup& group) noexcept;

}  // namespace shmccl::collectives
