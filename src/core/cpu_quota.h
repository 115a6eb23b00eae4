// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The CPU time this process may use, from its cgroup's CPU bandwidth limit: what `docker run
// --cpus`, Kubernetes' CPU limits and systemd's CPUQuota set. The affinity mask does not show it:
// a container limited to 2 CPUs on a 64-core host sees 64 CPUs, and 8 ranks that spin there as if
// each had a core use up the quota in a fraction of the period, then all stop until the next one
// (CFS throttling: tens of milliseconds). Read as the JVM and Go's automaxprocs read it: cgroup v2
// `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, the tightest limit on the path from
// the process's cgroup up to the hierarchy's root (a limit on a parent binds its children).
#pragma once

#include <string>

namespace shmccl::detail {

// The limit in CPUs (quota / period, 1.5 for "150000 100000"), 0 when there is none or it cannot
// be read. `root` prefixes every path read (/proc/self/cgroup, /proc/self/mountinfo and the
// cgroup files): "" for this machine, a directory that mimics them for tests.
double cpu_quota(const std::string& root = "");

// This process's limit in whole CPUs it can keep busy (at least 1), 0 when there is none. Read
// once.
int cpu_quota_cores();

}  // namespace shmccl::detail
