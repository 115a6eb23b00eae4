// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "device/visible_devices.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"

namespace shmccl::device {
namespace {

std::string_view trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

}  // namespace

int host_device_count() {
  const int64_t configured = config::get_int("SHMCCL_NPU_DEVICE_COUNT");
  if (configured < 1 || configured > kMaxDevices) {
    SHMCCL_WARN(kDevice, "SHMCCL_NPU_DEVICE_COUNT=", configured, " is out of range [1, ",
                kMaxDevices, "]; using 8");
    return 8;
  }
  return static_cast<int>(configured);
}

std::vector<int> parse_visible_devices(std::string_view value, int host_device_count) {
  const auto where = [&] {
    return ::shmccl::detail::concat(kVisibleDevicesVariable, "='", value, "'");
  };
  SHMCCL_CHECK_ARG(!trim(value).empty(), where(),
                   " lists no device, so no NPU is visible (unset it to see all ",
                   host_device_count, ")");
  std::vector<int> devices;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string_view entry = trim(value.substr(start, comma - start));
    int index = -1;
    const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
    SHMCCL_CHECK_ARG(!entry.empty() && error == std::errc() && end == entry.data() + entry.size(),
                     where(), ": '", entry, "' is not a device index");
    SHMCCL_CHECK_ARG(index >= 0 && index < host_device_count, where(), ": device ", index,
                     " does not exist (", host_device_count, " simulated devices, 0 to ",
                     host_device_count - 1, ": SHMCCL_NPU_DEVICE_COUNT)");
    SHMCCL_CHECK_ARG(std::find(devices.begin(), devices.end(), index) == devices.end(), where(),
                     ": device ", index, " is listed twice");
    devices.push_back(index);
    start = comma + 1;
  }
  return devices;
}

std::vector<int> visible_devices_from_environment() {
  const int host_count = host_device_count();
  if (const char* visible = std::getenv(kVisibleDevicesVariable)) {
    return parse_visible_devices(visible, host_count);
  }
  std::vector<int> all(static_cast<size_t>(host_count));
  for (int index = 0; index < host_count; ++index)
    all[static_cast<size_t>(index)] = index;
  return all;
}

}  // namespace shmccl::device
