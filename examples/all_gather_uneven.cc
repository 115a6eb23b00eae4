// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// torch_npu.distributed.all_gather_into_tensor_uneven's example, in C++:
//   shmrun --nproc-per-node 2 ./all_gather_uneven
#include <shmccl/shmccl.hpp>

#include <cstdio>

int main() {
  shmccl::init_process_group();  // rank, size, job from shmrun's environment
  const int rank = shmccl::get_rank();
  shmccl::npu::set_device(rank);
  if (shmccl::get_world_size() != 2) {
    std::fprintf(stderr, "this example runs on 2 ranks (--nproc-per-node 2)\n");
    return 2;
  }
  std::vector<int64_t> output_split_sizes{2, 3};
  std::vector<shmccl::Tensor> input_tensors{shmccl::from_vector<int32_t>({1, 2}).npu(),
                                            shmccl::from_vector<int32_t>({4, 5, 6}).npu()};
  shmccl::Tensor output_tensor = shmccl::zeros({5}, shmccl::kInt32).npu();
  shmccl::all_gather_into_tensor_uneven(output_tensor, input_tensors[rank], output_split_sizes);

  const std::vector<int32_t> result = output_tensor.cpu().to_vector<int32_t>();
  const bool ok = result == std::vector<int32_t>{1, 2, 4, 5, 6};
  std::printf("all_gather_into_tensor_uneven: %s %s\n", output_tensor.str().c_str(),
              ok ? "(as expected)" : "(WRONG: expected [1, 2, 4, 5, 6])");
  shmccl::destroy_process_group();
  return ok ? 0 : 1;
}
