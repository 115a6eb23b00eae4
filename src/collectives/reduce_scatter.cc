// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Reduce-scatter, uneven rows. Zero-copy: chunk (i, k) reduces piece k of rank i's rows straight
// from every rank's input into rank i's output: each input byte is read once and each output
// byte written once.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "device/kernels.h"

namespace shmccl::collectives {
namespace {

uint64_t rank_bytes(const OpPlan& plan, int rank) {
  return static_cast<uint64_t>(plan.splits[static_cast<size_t>(rank)] * plan.row_bytes());
}

uint64_t inline_bytes(const OpPlan& plan, int /*size*/) {
  return plan.input_bytes();
}

void stage_inline(const OpPlan& plan, int /*rank*/, unsigned char* payload) {
  if (plan.input_bytes() > 0)
    kernels::copy_small(payload, plan.input().data_ptr(), plan.input_bytes());
}

// Every rank's input rows for the reader.
PayloadRange inline_reads(const OpPlan& plan, int reader, int /*writer*/) {
  const int64_t row_bytes = plan.row_bytes();
  return {static_cast<uint64_t>(plan.rows_before(reader) * row_bytes),
          static_cast<uint64_t>(plan.splits[static_cast<size_t>(reader)] * row_bytes)};
}

void finish_inline(const ExecContext& context) {
  const OpPlan& plan = context.plan;
  const size_t count =
      static_cast<size_t>(plan.splits[static_cast<size_t>(context.rank)] * plan.row_elements);
  if (count == 0) return;
  const int64_t offset = plan.rows_before(context.rank) * plan.row_bytes();
  const void* sources[transport::kMaxRanks];
  for (int j = 0; j < context.size; ++j)
    sources[j] = context.payloads[j] + offset;
  kernels::reduce(plan.reduce_op, plan.dtype, plan.output().data_ptr(), sources, context.size,
                  count);
}

uint64_t count_chunks(const ExecContext& context) {
  uint64_t chunks = 0;
  for (int i = 0; i < context.size; ++i) {
    chunks += piece_count(rank_bytes(context.plan, i), context.chunk_bytes);
  }
  return chunks;
}

void run_chunk(const ExecContext& context, uint64_t chunk) {
  const OpPlan& plan = context.plan;
  int destination = 0;
  for (; destination < context.size; ++destination) {
    const uint64_t pieces = piece_count(rank_bytes(plan, destination), context.chunk_bytes);
    if (chunk < pieces) break;
    chunk -= pieces;
  }
  const uint64_t offset = chunk * context.chunk_bytes;
  const uint64_t length = std::min(context.chunk_bytes, rank_bytes(plan, destination) - offset);
  const uint64_t input_offset =
      static_cast<uint64_t>(plan.rows_before(destination) * plan.row_bytes()) + offset;
  const void* sources[transport::kMaxRanks];
  for (int j = 0; j < context.size; ++j)
    sources[j] = context.inputs[j] + input_offset;
  kernels::reduce(plan.reduce_op, plan.dtype, context.outputs[destination] + offset, sources,
                  context.size, length / element_size(plan.dtype));
}

}  // namespace

const Algorithm kReduceScatterAlgorithm{inline_bytes,  stage_inline, inline_reads,
                                        finish_inline, count_chunks, run_chunk};

}  // namespace shmccl::collectives
