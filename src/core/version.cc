// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "shmccl/version.hpp"

namespace shmccl {

const char* version() noexcept {
  return "0.1.0";
}

}  // namespace shmccl
