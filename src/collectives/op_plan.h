// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// OpPlan: one collective call after its arguments were checked: what to do, on which tensors,
// with which split of rows between ranks. Built on the caller's thread, executed on the group's
// communication stream (or inline). ExecContext: the plan during execution, with every rank's
// descriptor and buffer addresses resolved.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/storage.h"
#include "shmccl/reduce_op.hpp"
#include "shmccl/tensor.hpp"
#include "transport/control_block.h"
#include "transport/group_transport.h"

namespace shmccl::collectives {

// What the call cache compares to tell a repeated call (CallCache::same, with the split sizes):
// one block of plain data without padding, so that comparing two calls is one 40-byte memcmp
// instead of a compare per field.
struct CallFields {
  const char* name = "";       // the API's name of the call (a string literal; implies the kind)
  int64_t input_elements = 0;  // the input tensor's element count, 0 without one (OpPlan sets it)
  int64_t row_elements = 1;    // elements per dim-0 row
  ReduceOp reduce_op = ReduceOp::SUM;
  int root = 0;
  int num_splits = 0;
  ScalarType dtype = kUInt8;
  bool uneven_name = false;  // called by its _uneven name (messages name the peer's call so)
  uint8_t unused[2] = {};    // explicit padding: every byte of the block is compared
};
static_assert(sizeof(CallFields) == 40 && std::has_unique_object_representations_v<CallFields>);

// References of an asynchronous call to the caller's tensors, kept until it has run
// (AsyncWork): a synchronous call only borrows them, so its OpPlan owns nothing and its
// destruction costs nothing.
struct OwnedTensors {
  Tensor input;
  Tensor output;
  std::vector<Tensor> outputs;
};

// The tensors are borrowed from the caller for a synchronous call (no copies, hence no
// allocation on the hot path) and held by an OwnedTensors for work that outlives the call.
struct OpPlan : CallFields {
  OpPlan() = default;
  OpPlan(const OpPlan&) = delete;
  OpPlan& operator=(const OpPlan&) = delete;

  const Tensor& input() const { return input_ != nullptr ? *input_ : undefined(); }
  const Tensor& output() const { return output_ != nullptr ? *output_ : undefined(); }
  const std::vector<Tensor>& outputs() const {
    return outputs_ != nullptr ? *outputs_ : no_outputs();
  }
  // Element counts, 0 for an absent tensor (no static guard: the call cache's hot path).
  int64_t input_numel() const { return input_elements; }
  int64_t output_numel() const { return output_ != nullptr ? output_->numel() : 0; }
  // The input's size in bytes, 0 without one (kept: the small algorithms' hot path).
  uint64_t input_bytes() const { return input_bytes_; }
  void borrow_input(const Tensor& tensor) {
    input_ = &tensor;
    input_elements = tensor.numel();
    input_bytes_ = tensor.nbytes();
  }
  void borrow_output(const Tensor& tensor) { output_ = &tensor; }
  void borrow_outputs(const std::vector<Tensor>& tensors) { outputs_ = &tensors; }
  // Counts a write to the outputs (Storage::bump_version): as the call is made, and again once
  // its data has moved, so that a reader of the old bytes in between (a GEMM caching a reordered
  // weight) has not filed them under the new version.
  void bump_output_versions() const {
    if (output_ != nullptr && output_->defined()) output_->storage()->bump_version();
    for (const Tensor& tensor : outputs())
      if (tensor.defined()) tensor.storage()->bump_version();
  }
  // Makes this (fresh) plan equal to `other`, its tensors referenced by `owned` (which must
  // outlive the plan's use).
  void copy_owning(const OpPlan& other, OwnedTensors& owned) {
    static_cast<CallFields&>(*this) = other;
    kind = other.kind;
    // Only [0, num_splits) is ever read: the whole array is 8 bytes per possible rank.
    std::copy_n(other.splits.begin(), num_splits, splits.begin());
    sequence = other.sequence;
    async_op = other.async_op;
    input_bytes_ = other.input_bytes_;
    if (other.input_ != nullptr) {
      owned.input = *other.input_;
      input_ = &owned.input;
    }
    if (other.output_ != nullptr && other.output_ == other.input_) {
      output_ = &owned.input;  // one tensor in place (all_reduce, broadcast): one copy
    } else if (other.output_ != nullptr) {
      owned.output = *other.output_;
      output_ = &owned.output;
    }
    if (other.outputs_ != nullptr) {
      owned.outputs = *other.outputs_;
      outputs_ = &owned.outputs;
    }
  }
  // Forgets the tensors (their owner is about to let go of them).
  void release_tensors() {
    input_ = output_ = nullptr;
    outputs_ = nullptr;
  }

  transport::OpKind kind = transport::OpKind::kNone;
  std::array<int64_t, transport::kMaxRanks> splits;  // rows per rank, [0, num_splits) set
  uint64_t sequence = 0;
  bool async_op = false;  // runs on the group's stream, reported through a Work

  int64_t row_bytes() const { return row_elements * static_cast<int64_t>(element_size(dtype)); }
  int64_t rows_before(int rank) const {
    int64_t rows = 0;
    for (int r = 0; r < rank && r < num_splits; ++r)
      rows += splits[static_cast<size_t>(r)];
    return rows;
  }

 private:
  static const Tensor& undefined() {
    static const Tensor none;
    return none;
  }
  static const std::vector<Tensor>& no_outputs() {
    static const std::vector<Tensor> none;
    return none;
  }
  const Tensor* input_ = nullptr;
  const Tensor* output_ = nullptr;
  const std::vector<Tensor>* outputs_ = nullptr;  // kAllGatherList
  uint64_t input_bytes_ = 0;
};
static_assert(std::is_trivially_destructible_v<OpPlan>);

struct ExecContext {
  ExecContext(transport::GroupTransport& transport_in, const OpPlan& plan_in, int rank_in,
              int size_in, uint64_t chunk_bytes_in)
      : transport(transport_in),
        plan(plan_in),
        rank(rank_in),
        size(size_in),
        chunk_bytes(chunk_bytes_in) {}
  // The per-rank arrays are filled for [0, size) only (no zeroing of 64 entries on a hot path).
  transport::GroupTransport& transport;
  const OpPlan& plan;
  int rank;
  int size;
  const transport::OpDescriptor* descriptors[transport::kMaxRanks];
  const unsigned char* payloads[transport::kMaxRanks];  // inline data of each rank for this call
  char* inputs[transport::kMaxRanks];   // resolved input buffer of each rank (zero-copy path)
  char* outputs[transport::kMaxRanks];  // resolved output buffer of each rank
  uint64_t chunk_bytes;
  // The collective writes more than the last-level cache holds: copy with streaming stores.
  bool streaming = false;

  void copy(void* to, const void* from, uint64_t bytes) const;
};

// Bytes [offset, offset + bytes) of a rank's inline payload.
struct PayloadRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// One row of the algorithm table: how an op kind runs through slots (small) or through the
// work pool over peers' arenas (zero-copy).
struct Algorithm {
  // The largest payload any rank stages for an inline run of this call (same on every rank).
  uint64_t (*inline_bytes)(const OpPlan& plan, int size);
  // Copies this rank's contribution into its slot's inline area.
  void (*stage_inline)(const OpPlan& plan, int rank, unsigned char* payload);
  // The part of rank `writer`'s inline payload that rank `reader` reads.
  PayloadRange (*inline_reads)(const OpPlan& plan, int reader, int writer);
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
inline uint64_t piece_count(uint64_t bytes, uint64_t chunk) {
  return (bytes + chunk - 1) / chunk;
}

}  // namespace shmccl::collectives
