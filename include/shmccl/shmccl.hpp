// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The one header users include.
#pragma once

#include "shmccl/device.hpp"
#include "shmccl/dtype.hpp"
#include "shmccl/elastic.hpp"
#include "shmccl/error.hpp"
#include "shmccl/half.hpp"
#include "shmccl/npu.hpp"
#include "shmccl/ops.hpp"
#include "shmccl/process_group.hpp"
#include "shmccl/reduce_op.hpp"
#include "shmccl/store.hpp"
#include "shmccl/tensor.hpp"
#include "shmccl/version.hpp"
#include "shmccl/work.hpp"
