// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "shmccl/version.hpp"

namespace shmccl {

#define SHMCCL_STRINGIFY_(x) #x
#define SHMCCL_STRINGIFY(x) SHMCCL_STRINGIFY_(x)

const char* version() noexcept {
  return SHMCCL_STRINGIFY(SHMCCL_VERSION_MAJOR) "." SHMCCL_STRINGIFY(
      SHMCCL_VERSION_MINOR) "." SHMCCL_STRINGIFY(SHMCCL_VERSION_PATCH);
}

}  // namespace shmccl
