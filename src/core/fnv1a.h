// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// FNV-1a, 64 bits: a hash that is the same in every process and every build (unlike std::hash),
// for names and keys that ranks compute apart and must agree on.
#pragma once

#include <cstdint>
#include <string_view>

namespace shmccl::detail {

inline uint64_t fnv1a(std::string_view bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace shmccl::detail
