// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// oneflow.comm.all_gather_into_tensor's example: the output in concatenation form (N*d0, ...) or
// in the example's "stack form", (N, 3, 2) for (2, 3) inputs (any shape of N times the input's
// elements holds the same bytes):
//   shmrun --nproc-per-node 2 ./all_gather_concat_stack
#include <shmccl/shmccl.hpp>

#include <cstdio>

int main() {
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  const int world = shmccl::get_world_size();
  shmccl::npu::set_device(rank % shmccl::npu::device_count());
  // [[1, 2, 3], [4, 5, 6]] + rank * 6
  shmccl::Tensor tensor_in =
      (shmccl::arange(6, shmccl::kInt64) + shmccl::full({6}, 1 + rank * 6, shmccl::kInt64))
          .reshape({2, 3})
          .npu();

  shmccl::Tensor tensor_out = shmccl::zeros({2 * world, 3}, shmccl::kInt64).npu();
  shmccl::all_gather_into_tensor(tensor_out, tensor_in);
  shmccl::Tensor tensor_out2 = shmccl::zeros({world, 3, 2}, shmccl::kInt64).npu();
  shmccl::all_gather_into_tensor(tensor_out2, tensor_in);

  const shmccl::Tensor expected =
      shmccl::arange(6 * world, shmccl::kInt64) + shmccl::ones({6 * world}, shmccl::kInt64);
  const bool ok = shmccl::equal(tensor_out.cpu(), expected.reshape({2 * world, 3})) &&
                  shmccl::equal(tensor_out2.cpu(), expected.reshape({world, 3, 2}));
  if (rank == 0) {
    std::printf("concatenation form:\n%s\nstack form:\n%s\n", tensor_out.str().c_str(),
                tensor_out2.str().c_str());
  }
  std::printf("rank %d: all_gather_into_tensor %s\n", rank, ok ? "(as expected)" : "(WRONG)");
  shmccl::destroy_process_group();
  return ok ? 0 : 1;
}
