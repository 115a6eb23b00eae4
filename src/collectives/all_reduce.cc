// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// All-reduce, in place. Chunk k reduces piece k of every rank's tensor into rank 0's tensor
// (while it is hot in cache) and copies the result into every other rank's tensor.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "device/kernels.h"

namespace shmccl::collectives {
namespace {

uint64_t inline_bytes(const OpPlan& plan, int /*size*/) {
  return plan.input_bytes();
}

void stage_inline(const OpPlan& plan, int /*rank*/, unsigned char* payload) {
  if (plan.input_bytes() > 0)
    kernels::copy_small(payload, plan.input().data_ptr(), plan.input_bytes());
}

PayloadRange inline_reads(const OpPlan& plan, int /*reader*/, int /*writer*/) {
  return {0, plan.input_bytes()};
}

void finish_inline(const ExecContext& context) {
  const OpPlan& plan = context.plan;
  if (plan.input().numel() == 0) return;
  const void* sources[transport::kMaxRanks];
  for (int j = 0; j < context.size; ++j)
    sources[j] = context.payloads[j];
  kernels::reduce(plan.reduce_op, plan.dtype, plan.output().data_ptr(), sources, context.size,
                  static_cast<size_t>(plan.input().numel()));
}

uint64_t count_chunks(const ExecContext& context) {
  return piece_count(context.plan.input_bytes(), context.chunk_bytes);
}

void run_chunk(const ExecContext& context, uint64_t chunk) {
  const OpPlan& plan = context.plan;
  const uint64_t offset = chunk * context.chunk_bytes;
  const uint64_t length = std::min<uint64_t>(context.chunk_bytes, plan.input_bytes() - offset);
  const void* sources[transport::kMaxRanks];
  for (int j = 0; j < context.size; ++j)
    sources[j] = context.inputs[j] + offset;
  char* result = context.inputs[0] + offset;
  kernels::reduce(plan.reduce_op, plan.dtype, result, sources, context.size,
                  length / element_size(plan.dtype));
  for (int j = 1; j < context.size; ++j)
    context.copy(context.inputs[j] + offset, result, length);
}

}  // namespace

const Algorithm kAllReduceAlgorithm{inline_bytes,  stage_inline, inline_reads,
                                    finish_inline, count_chunks, run_chunk};

}  // namespace shmccl::collectives
