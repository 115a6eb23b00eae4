// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#pragma once

#include <ostream>
#include <string>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

// Where a tensor's storage lives: host memory ("cpu") or simulated NPU i ("npu:i").
struct Device {
  enum class Type : int8_t { kCPU, kNPU };

  Type type = Type::kCPU;
  int index = -1;  // NPU index; -1 for the CPU

  static constexpr Device cpu() { return Device{Type::kCPU, -1}; }
  static constexpr Device npu(int index) { return Device{Type::kNPU, index}; }
  // Parses "cpu", "npu", "npu:3" ("npu" alone means the current device).
  static Device parse(const std::string& text);

  constexpr bool is_cpu() const { return type == Type::kCPU; }
  constexpr bool is_npu() const { return type == Type::kNPU; }
  std::string str() const { return is_cpu() ? "cpu" : "npu:" + std::to_string(index); }

  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
};

inline std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.str();
}

}  // namespace shmccl

#pragma GCC visibility pop
