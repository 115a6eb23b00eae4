// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#pragma once

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

#define SHMCCL_VERSION_MAJOR 0
#define SHMCCL_VERSION_MINOR 1
#define SHMCCL_VERSION_PATCH 0

namespace shmccl {
// The library's version as "major.minor.patch" (of the library linked, not of this header).
const char* version() noexcept;
}  // namespace shmccl

#pragma GCC visibility pop
