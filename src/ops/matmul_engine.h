// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// MatmulEngine: C[m, n] (float32) = A[m, k] @ B[k, n] on oneDNN, for A and B in float32 or
// bfloat16 (native vdpbf16ps with float32 accumulation). float16 has no matmul on this ISA in
// oneDNN 2.6, nor has bfloat16 before AVX-512: such operands are widened to float32 first (the
// caller does so for A, the engine for the weights it caches). See operand_dtype().
//
// Two caches make repeated calls cheap, as a framework's are:
// - primitives per (m, k, n, dtype, threads): creating one costs 0.2-0.4 ms;
// - weights reordered into the layout the primitive prefers (86-95% of peak instead of ~84%),
//   per weight tensor: its storage, offset, shape, dtype and write counter (Tensor::version()),
//   so a weight written since is reordered again. Bounded by SHMCCL_OPS_WEIGHT_CACHE_BYTES.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "shmccl/tensor.hpp"

namespace shmccl::ops {

struct MatmulShape {
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  ScalarType dtype = kFloat32;  // of A and B: kFloat32, kBFloat16 or kFloat16
};

class MatmulEngine {
 public:
  static MatmulEngine& instance();

  // c = a @ weight, with a's rows `lda` elements apart and c's rows `n` apart. `weight` is a
  // contiguous [k, n] tensor of shape.dtype; a points at m rows of operand_dtype(shape.dtype).
  // `threads` is the number of threads oneDNN may use (1 for small problems). oneDNN's failures
  // come out as shmccl::Error (OutOfMemoryError when it ran out of memory).
  void matmul(const MatmulShape& shape, const void* a, int64_t lda, const Tensor& weight, float* c,
              int threads);

  // Whether oneDNN has a bfloat16 matmul on this CPU (AVX-512; probed once per process).
  static bool native_bfloat16();
  // The dtype oneDNN's GEMM runs on for operands of `dtype`: `dtype` itself, or float32 for
  // float16, and for bfloat16 without native_bfloat16().
  static ScalarType operand_dtype(ScalarType dtype);

  // Statistics for tests and benchmarks.
  struct Stats {
    uint64_t primitives_created = 0;
    uint64_t weight_reorders = 0;
    uint64_t weight_cache_hits = 0;
    uint64_t weight_cache_bytes = 0;
  };
  Stats stats() const;
  void clear_caches();
  // Tests only: called on the reordering thread after each weight reorder, before the reordered
  // weight enters the cache (empty: none).
  void set_reorder_hook_for_testing(std::function<void()> hook);

  ~MatmulEngine();

 private:
  MatmulEngine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// This rank's share of the host's CPUs: the CPUs it may run on, divided among the job's ranks
// that may run on any of them (from the CPU sets every rank leaves in the default group's
// control block), and at most its share of a cgroup's CPU limit; at least 1. Before
// init_process_group, with only the launcher's LOCAL_WORLD_SIZE or WORLD_SIZE, a guess: a rank
// bound to fewer CPUs than the host has owns them, else the ranks share them. Kept once the
// ranks' CPU sets are known. SHMCCL_OPS_CPU_SHARE sets it instead. Ranks may differ (bindings of
// unequal size): what all of a group's ranks must agree on takes the group's least.
int cpu_share();

// cpu_share's arithmetic: `cpus` this rank may run on, `sharing` ranks (itself included) that
// may run on some of them (0: not known), `online` CPUs of the host, `ranks` of the job, a
// cgroup limit of `quota` CPUs (0: none).
int cpu_share_of(int cpus, int sharing, int online, int ranks, int quota);

// Threads one rank's GEMMs use: SHMCCL_OPS_THREADS if set, else `cpus`.
int gemm_threads(int cpus = cpu_share());

}  // namespace shmccl::ops
