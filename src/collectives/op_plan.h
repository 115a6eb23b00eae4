// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// OpPlan: one collective call after its arguments were checked: what to do, on which tensors,
// with which split of rows between ranks. Built on the caller's thread, executed on the group's
// communication stream (or inline). ExecContext: the plan during execution, with every rank's
// descriptor and buffer addresses resolved.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "shmccl/reduce_op.hpp"
#include "shmccl/tensor.hpp"
#include "transport/control_block.h"
#include "transport/group_transport.h"

namespace shmccl::collectives {

struct OpPlan {
  transport::OpKind kind = transport::OpKind::kNone;
  const char* name = "";  // the API's name of the call, for messages
  ScalarType dtype = kUInt8;
  ReduceOp reduce_op = ReduceOp::SUM;
  int root = 0;
  int64_t row_elements = 1;  // elements per dim-0 row
  int num_splits = 0;
  std::array<int64_t, transport::kMaxRanks> splits{};  // rows per rank
  Tensor input;
  Tensor output;
  std::vector<Tensor> outputs;  // kAllGatherList
  uint64_t sequence = 0;

  int64_t row_bytes() const { return row_elements * static_cast<int64_t>(element_size(dtype)); }
  int64_t rows_before(int rank) const {
    int64_t rows = 0;
    for (int r = 0; r < rank; ++r) rows += splits[static_cast<size_t>(r)];
    return rows;
  }
};

struct ExecContext {
  transport::GroupTransport& transport;
  const OpPlan& plan;
  int rank;
  int size;
  const transport::OpDescriptor* descriptors[transport::kMaxRanks];
  const unsigned char* payloads[transport::kMaxRanks];  // inline data of each rank for this call
  char* inputs[transport::kMaxRanks];   // resolved input buffer of each rank (zero-copy path)
  char* outputs[transport::kMaxRanks];  // resolved output buffer of each rank
  char* local_input;   // this rank's input as seen here (a staging copy for host tensors)
  char* local_output;  // this rank's output
  uint64_t chunk_bytes;
};

// One row of the algorithm table: how an op kind runs through slots (small) or through the
// work pool over peers' arenas (zero-copy).
struct Algorithm {
  // True when the call's data fits the slots' inline areas (same answer on every rank).
  bool (*fits_inline)(const OpPlan& plan, int size, uint64_t limit);
  // Copies this rank's contribution into its slot's inline area.
  void (*stage_inline)(const OpPlan& plan, int rank, unsigned char* payload);
  // Computes this rank's output from every rank's inline area.
  void (*finish_inline)(const ExecContext& context);
  // Number of chunks of the work pool (same on every rank).
  uint64_t (*count_chunks)(const ExecContext& context);
  // Executes chunk `chunk` (any rank may run any chunk).
  void (*run_chunk)(const ExecContext& context, uint64_t chunk);
};

const Algorithm& algorithm_for(transport::OpKind kind);

// The inline limit in force: SHMCCL_INLINE_BYTES, at most the slots' kInlineBytes.
uint64_t inline_limit();

// Splits `bytes` into pieces of at most `chunk` bytes: the piece count (0 for 0 bytes).
inline uint64_t piece_count(uint64_t bytes, uint64_t chunk) { return (bytes + chunk - 1) / chunk; }

}  // namespace shmccl::collectives
