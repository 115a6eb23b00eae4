// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include <cstring>

#include "core/check.h"

namespace shmccl::detail {

void throw_system_error(const std::string& context, int error_code) {
  throw SystemError(concat(context, ": ", std::strerror(error_code)), error_code);
}

}  // namespace shmccl::detail
