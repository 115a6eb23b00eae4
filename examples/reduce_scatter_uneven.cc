// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// torch_npu.distributed.reduce_scatter_tensor_uneven's example, in C++, run synchronously and
// asynchronously (a Work handle):
//   shmrun --nproc-per-node 2 ./reduce_scatter_uneven
#include <shmccl/shmccl.hpp>

#include <cstdio>

int main() {
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  shmccl::npu::set_device(rank);
  if (shmccl::get_world_size() != 2) {
    std::fprintf(stderr, "this example runs on 2 ranks (--nproc-per-node 2)\n");
    return 2;
  }
  std::vector<int64_t> input_split_sizes{2, 3};
  shmccl::Tensor input_tensor = shmccl::ones({5}, shmccl::kInt32).npu();
  shmccl::Tensor output_tensor = shmccl::zeros({input_split_sizes[rank]}, shmccl::kInt32).npu();
  shmccl::reduce_scatter_tensor_uneven(output_tensor, input_tensor, input_split_sizes);

  shmccl::Tensor async_output = shmccl::zeros({input_split_sizes[rank]}, shmccl::kInt32).npu();
  std::shared_ptr<shmccl::Work> work = shmccl::reduce_scatter_tensor_uneven(
      async_output, input_tensor, input_split_sizes, shmccl::ReduceOp::SUM, /*group=*/nullptr,
      /*async_op=*/true);
  work->wait();

  const std::vector<int32_t> expected(static_cast<size_t>(input_split_sizes[rank]), 2);
  const bool ok = output_tensor.cpu().to_vector<int32_t>() == expected &&
                  async_output.cpu().to_vector<int32_t>() == expected;
  std::printf("reduce_scatter_tensor_uneven: %s %s\n", output_tensor.str().c_str(),
              ok ? "(as expected)" : "(WRONG)");
  shmccl::destroy_process_group();
  return ok ? 0 : 1;
}
