// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Which simulated devices a process sees. The host has SHMCCL_NPU_DEVICE_COUNT of them;
// ASCEND_RT_VISIBLE_DEVICES (torch_npu's variable, CUDA_VISIBLE_DEVICES for CUDA) lists the
// physical indices a process may use, and device i of the process is the i-th listed. Launchers
// set it to give each rank one device (`shmrun --virtual-local-rank`).
#pragma once

#include <string_view>
#include <vector>

namespace shmccl::device {

inline constexpr const char* kVisibleDevicesVariable = "ASCEND_RT_VISIBLE_DEVICES";
inline constexpr int kMaxDevices = 64;

// The host's simulated devices: SHMCCL_NPU_DEVICE_COUNT, or 8 (with a warning) when it is out of
// [1, kMaxDevices].
int host_device_count();

// The physical indices `value` lists: comma-separated integers in [0, host_device_count), each
// at most once, blanks around them ignored. Anything else is an InvalidArgument naming the
// variable and the offending entry (an empty list too: a process that sees no device could
// only fail later, at its first tensor).
std::vector<int> parse_visible_devices(std::string_view value, int host_device_count);

// The physical indices this process may use: ASCEND_RT_VISIBLE_DEVICES parsed, or every host
// device when it is unset. Reads the environment on each call (npu::device_count caches it).
std::vector<int> visible_devices_from_environment();

}  // namespace shmccl::device
