// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Broadcast from one root, and the barrier (an arrival of every rank, no data).
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "device/kernels.h"

namespace shmccl::collectives {
namespace {

uint64_t inline_bytes(const OpPlan& plan, int /*size*/) {
  return plan.input_bytes();
}

void stage_inline(const OpPlan& plan, int rank, unsigned char* payload) {
  if (rank == plan.root && plan.input_bytes() > 0)
    kernels::copy_small(payload, plan.input().data_ptr(), plan.input_bytes());
}

// Receivers read the root's payload; nobody reads the others'.
PayloadRange inline_reads(const OpPlan& plan, int reader, int writer) {
  if (reader == plan.root || writer != plan.root) return {};
  return {0, plan.input_bytes()};
}

void finish_inline(const ExecContext& context) {
  const OpPlan& plan = context.plan;
  if (context.rank != plan.root && plan.input_bytes() > 0) {
    kernels::copy_small(plan.output().data_ptr(), context.payloads[plan.root], plan.input_bytes());
  }
}

// Chunk k: piece k of the root's tensor, read once and written into every other rank's tensor.
uint64_t count_chunks(const ExecContext& context) {
  return context.size > 1 ? piece_count(context.plan.input_bytes(), context.chunk_bytes) : 0;
}

void run_chunk(const ExecContext& context, uint64_t chunk) {
  const OpPlan& plan = context.plan;
  const uint64_t offset = chunk * context.chunk_bytes;
  const uint64_t length = std::min<uint64_t>(context.chunk_bytes, plan.input_bytes() - offset);
  for (int destination = 0; destination < context.size; ++destination) {
    if (destination == plan.root) continue;
    context.copy(context.outputs[destination] + offset, context.inputs[plan.root] + offset, length);
  }
}

uint64_t barrier_inline_bytes(const OpPlan&, int) {
  return 0;
}
void barrier_stage_inline(const OpPlan&, int, unsigned char*) {}
PayloadRange barrier_inline_reads(const OpPlan&, int, int) {
  return {};
}
void barrier_finish_inline(const ExecContext&) {}
uint64_t barrier_count_chunks(const ExecContext&) {
  return 0;
}
void barrier_run_chunk(const ExecContext&, uint64_t) {}

}  // namespace

const Algorithm kBroadcastAlgorithm{inline_bytes,  stage_inline, inline_reads,
                                    finish_inline, count_chunks, run_chunk};
const Algorithm kBarrierAlgorithm{barrier_inline_bytes,  barrier_stage_inline, barrier_inline_reads,
                                  barrier_finish_inline, barrier_count_chunks, barrier_run_chunk};

}  // namespace shmccl::collectives
