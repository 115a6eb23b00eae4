// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Every collective once, at any number of ranks, each checked against the value it must give:
//   shmrun --nproc-per-node 4 ./collectives_tour
#include <shmccl/shmccl.hpp>

#include <cstdio>

namespace {

int g_failures = 0;

void check(bool ok, const char* what, int rank) {
  if (!ok) ++g_failures;
  if (rank == 0 || !ok) std::printf("rank %d: %-40s %s\n", rank, what, ok ? "ok" : "WRONG");
}

}  // namespace

int main() {
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  const int world = shmccl::get_world_size();
  shmccl::npu::set_device(rank % shmccl::npu::device_count());

  // Uneven all-gather: rank r contributes r + 1 rows of value r.
  std::vector<int64_t> splits;
  for (int r = 0; r < world; ++r)
    splits.push_back(r + 1);
  const int64_t rows = world * (world + 1) / 2;
  shmccl::Tensor mine = shmccl::full({rank + 1, 4}, rank, shmccl::kBFloat16).npu();
  shmccl::Tensor gathered = shmccl::zeros({rows, 4}, shmccl::kBFloat16).npu();
  shmccl::all_gather_into_tensor_uneven(gathered, mine, splits);
  std::vector<float> expected_gather;
  for (int r = 0; r < world; ++r)
    expected_gather.insert(expected_gather.end(), (r + 1) * 4, r);
  check(shmccl::allclose(gathered, shmccl::from_vector<float>(expected_gather, {rows, 4})),
        "all_gather_into_tensor_uneven (bfloat16)", rank);

  // Uneven reduce-scatter of ones: each rank gets its rows, summed over `world` ranks.
  shmccl::Tensor input = shmccl::ones({rows, 4}, shmccl::kFloat32).npu();
  shmccl::Tensor output = shmccl::zeros({rank + 1, 4}, shmccl::kFloat32).npu();
  auto work = shmccl::reduce_scatter_tensor_uneven(output, input, splits, shmccl::ReduceOp::SUM,
                                                   nullptr, /*async_op=*/true);
  work->wait();
  check(shmccl::allclose(output, shmccl::full({rank + 1, 4}, world)),
        "reduce_scatter_tensor_uneven (async)", rank);

  shmccl::Tensor big = shmccl::full({1 << 20}, rank + 1, shmccl::kFloat32).npu();
  shmccl::all_reduce(big, shmccl::ReduceOp::MAX);
  check(shmccl::allclose(big, shmccl::full({1 << 20}, world)), "all_reduce MAX (4 MiB)", rank);

  shmccl::Tensor root_value = shmccl::full({3}, rank == world - 1 ? 42 : 0, shmccl::kInt64);
  shmccl::broadcast(root_value, world - 1);  // host tensors work too
  check(shmccl::equal(root_value, shmccl::full({3}, 42, shmccl::kInt64)), "broadcast (host)", rank);

  shmccl::barrier();
  shmccl::destroy_process_group();
  return g_failures == 0 ? 0 : 1;
}
