// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Runs one measurement of the sweep on the default process group, through the public API only:
// allocates the tensors of a size (out of place or in place), fills them, runs the warm-up
// iterations, times the iterations (synchronous calls, or async_op=true with up to
// `async_depth` ops in flight), then, with -c 1, refills the tensors, runs the op once more (with
// as many in flight, where a repeat leaves the same result) and counts the wrong elements against
// the host reference (reference.h). Every rank must call
// measure() with the same arguments in the same order (each call runs collectives). Not
// thread-safe.
#pragma once

#include "options.h"
#include "report.h"
#include "shmccl/dtype.hpp"
#include "shmccl/reduce_op.hpp"
#include "size_plan.h"

namespace shmccl::perf {

class Runner {
 public:
  Runner(const PerfOptions& options, int rank, int world)
      : options_(options), rank_(rank), world_(world) {}

  // Time: the slowest rank's average seconds per op; wrong: summed over ranks (-1 with -c 0).
  Measurement measure(const SizePlan& plan, ScalarType dtype, ReduceOp op, bool in_place);

 private:
  const PerfOptions& options_;
  int rank_;
  int world_;
};

}  // namespace shmccl::perf
