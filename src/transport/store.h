// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The rendezvous store interface is public (shmccl/store.hpp: users may plug in their own); the
// transport layer names it as its own.
#pragma once

#include "shmccl/store.hpp"

namespace shmccl::transport {

using Store = ::shmccl::Store;

}  // namespace shmccl::transport
