// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// All-gather, uneven rows, into one tensor or into a list of per-rank tensors. Zero-copy: chunk
// (i, j, k) copies piece k of rank j's input straight into rank i's output, so each byte is
// copied once, by whichever rank claims the chunk.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "device/kernels.h"

namespace shmccl::collectives {
namespace {

uint64_t rank_bytes(const OpPlan& plan, int rank) {
  return static_cast<uint64_t>(plan.splits[static_cast<size_t>(rank)] * plan.row_bytes());
}

uint64_t inline_bytes(const OpPlan& plan, int size) {
  uint64_t largest = 0;
  for (int r = 0; r < size; ++r)
    largest = std::max(largest, rank_bytes(plan, r));
  return largest;
}

void stage_inline(const OpPlan& plan, int rank, unsigned char* payload) {
  const uint64_t bytes = rank_bytes(plan, rank);
  kernels::copy_small(payload, plan.input().data_ptr(), bytes);
}

PayloadRange inline_reads(const OpPlan& plan, int /*reader*/, int writer) {
  return {0, rank_bytes(plan, writer)};
}

// Where rank j's rows land in this rank's output.
char* local_destination(const ExecContext& context, int source) {
  const OpPlan& plan = context.plan;
  if (plan.kind == transport::OpKind::kAllGatherList) {
    return static_cast<char*>(plan.outputs()[static_cast<size_t>(source)].data_ptr());
  }
  return static_cast<char*>(plan.output().data_ptr()) + plan.rows_before(source) * plan.row_bytes();
}

void finish_inline(const ExecContext& context) {
  for (int j = 0; j < context.size; ++j) {
    const uint64_t bytes = rank_bytes(context.plan, j);
    if (bytes > 0) kernels::copy_small(local_destination(context, j), context.payloads[j], bytes);
  }
}

// Chunk (j, k): piece k of rank j's input, copied into every rank's output. Reading a piece once
// and writing it n times (it stays in cache between the writes) moves (n + 1) / 2n of the memory
// traffic of n separate copies, which is what bounds large all-gathers on this machine.
uint64_t count_chunks(const ExecContext& context) {
  uint64_t pieces = 0;
  for (int j = 0; j < context.size; ++j) {
    pieces += piece_count(rank_bytes(context.plan, j), context.chunk_bytes);
  }
  return pieces;
}

void run_chunk(const ExecContext& context, uint64_t chunk) {
  const OpPlan& plan = context.plan;
  uint64_t piece = chunk;
  int source = 0;
  for (; source < context.size; ++source) {
    const uint64_t pieces = piece_count(rank_bytes(plan, source), context.chunk_bytes);
    if (piece < pieces) break;
    piece -= pieces;
  }
  const uint64_t bytes = rank_bytes(plan, source);
  const uint64_t offset = piece * context.chunk_bytes;
  const uint64_t length = std::min(context.chunk_bytes, bytes - offset);
  const char* from = context.inputs[source] + offset;
  const int64_t row_offset = plan.rows_before(source) * plan.row_bytes();
  for (int step = 0; step < context.size; ++step) {
    // Start with a different destination per source, so concurrent chunks spread their writes.
    const int destination = (source + step) % context.size;
    char* to;
    if (plan.kind == transport::OpKind::kAllGatherList) {
      to = context.transport.resolve(context.descriptors[destination]->outputs[source], bytes,
                                     element_size(plan.dtype),
                                     transport::GroupTransport::Copier::kWorkPool) +
           offset;
    } else {
      to = context.outputs[destination] + row_offset + offset;
    }
    if (to != from) context.copy(to, from, length);  // in place: the rank's own rows are there
  }
}

}  // namespace

const Algorithm kAllGatherAlgorithm{inline_bytes,  stage_inline, inline_reads,
                                    finish_inline, count_chunks, run_chunk};

}  // namespace shmccl::collectives
