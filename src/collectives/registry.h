// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The process-wide registry of process groups: the default group, the rendezvous it came from,
// and every group by communicator name. Thread-safe (one mutex).
#pragma once

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

}  // namespace shmccl::collectives
