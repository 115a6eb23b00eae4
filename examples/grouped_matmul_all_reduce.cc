// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// MindSpeed's npu_grouped_mat_mul_all_reduce example, in C++: two groups ([32, 256] @ [256, 32]
// and [64, 128] @ [128, 64], float16) on every rank, summed over the ranks; then split_item 1
// with group_list {10, 30} and a bias. Each rank checks its result against float64 math over
// every rank's inputs (which it can rebuild: they come from seeds).
//   shmrun --nproc-per-node 2 ./grouped_matmul_all_reduce
#include <shmccl/shmccl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace {

// Rank r's tensor number `which`: torch.randn-like values from a seed both can compute.
shmccl::Tensor input(int rank, int which, std::vector<int64_t> shape, shmccl::ScalarType dtype) {
  return shmccl::randn(shape, 1000 * static_cast<uint64_t>(rank) + which, dtype);
}

// Max |y - sum over ranks x_r @ w_r (+ bias)| / max |reference|.
double relative_error(const shmccl::Tensor& y, int world, int x_id, int w_id,
                      const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                      shmccl::ScalarType dtype, int64_t row_begin,
                      const std::vector<double>& bias = {}) {
  const int64_t m = y.size(0), n = y.size(1), k = x_shape[1];
  std::vector<double> reference(static_cast<size_t>(m * n), 0.0);
  for (int r = 0; r < world; ++r) {
    const auto x = input(r, x_id, x_shape, dtype).to(shmccl::kFloat64).to_vector<double>();
    const auto w = input(r, w_id, w_shape, dtype).to(shmccl::kFloat64).to_vector<double>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
          reference[i * n + j] += x[(row_begin + i) * k + p] * w[p * n + j];
  }
  const auto got = y.cpu().to(shmccl::kFloat64).to_vector<double>();
  double error = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = reference[i] + (bias.empty() ? 0.0 : bias[i % n]);
    error = std::max(error, std::abs(got[i] - expected));
    scale = std::max(scale, std::abs(expected));
  }
  return error / scale;
}

std::string describe(const shmccl::Tensor& y) {
  std::string text = "[";
  for (size_t d = 0; d < y.sizes().size(); ++d) {
    text += (d ? ", " : "") + std::to_string(y.sizes()[d]);
  }
  return text + "] " + shmccl::dtype_name(y.dtype()) + ", first element " +
         std::to_string(y.cpu().to(shmccl::kFloat64).to_vector<double>()[0]);
}

}  // namespace

int main() {
  shmccl::init_process_group();
  const int rank = shmccl::get_rank();
  const int world = shmccl::get_world_size();
  shmccl::npu::set_device(rank % shmccl::npu::device_count());
  const std::string hcomm = shmccl::default_group()->comm_name();
  bool ok = true;

  // split_item 0, as MindSpeed's example: lists in, list out, no bias.
  {
    const auto f16 = shmccl::kFloat16;
    std::vector<shmccl::Tensor> x{input(rank, 1, {32, 256}, f16).npu(),
                                  input(rank, 3, {64, 128}, f16).npu()};
    std::vector<shmccl::Tensor> w{input(rank, 2, {256, 32}, f16).npu(),
                                  input(rank, 4, {128, 64}, f16).npu()};
    std::vector<shmccl::Tensor> y = shmccl::npu_grouped_mat_mul_all_reduce(
        x, w, hcomm, {.bias = {}, .group_list = {}, .split_item = 0, .reduce_op = "sum"});
    const double e0 = relative_error(y[0], world, 1, 2, {32, 256}, {256, 32}, f16, 0);
    const double e1 = relative_error(y[1], world, 3, 4, {64, 128}, {128, 64}, f16, 0);
    ok = ok && e0 < 1e-2 && e1 < 1e-2;
    if (rank == 0) {
      std::printf("split_item 0 (float16):\n  y[0] %s\n  y[1] %s\n  relative error %.1e, %.1e\n",
                  describe(y[0]).c_str(), describe(y[1]).c_str(), e0, e1);
    }
  }

  // split_item 1: x is one [30, 64] tensor, group_list {10, 30} cuts its rows into 10 and 20;
  // bfloat16 with a float32 bias (added once, not once per rank).
  {
    const auto bf16 = shmccl::kBFloat16;
    shmccl::Tensor x = input(rank, 5, {30, 64}, bf16).npu();
    std::vector<shmccl::Tensor> w{input(rank, 6, {64, 16}, bf16).npu(),
                                  input(rank, 7, {64, 24}, bf16).npu()};
    const std::vector<double> b0(16, 0.5), b1(24, -0.25);
    std::vector<shmccl::Tensor> bias{shmccl::from_vector<double>(b0).to(shmccl::kFloat32).npu(),
                                     shmccl::from_vector<double>(b1).to(shmccl::kFloat32).npu()};
    std::vector<shmccl::Tensor> y = shmccl::npu_grouped_mat_mul_all_reduce(
        {x}, w, hcomm, {.bias = bias, .group_list = {10, 30}, .split_item = 1});
    const double e0 = relative_error(y[0], world, 5, 6, {30, 64}, {64, 16}, bf16, 0, b0);
    const double e1 = relative_error(y[1], world, 5, 7, {30, 64}, {64, 24}, bf16, 10, b1);
    ok = ok && e0 < 1e-2 && e1 < 1e-2;
    if (rank == 0) {
      std::printf(
          "split_item 1 (bfloat16, group_list {10, 30}, bias):\n  y[0] %s\n  y[1] %s\n"
          "  relative error %.1e, %.1e\n",
          describe(y[0]).c_str(), describe(y[1]).c_str(), e0, e1);
    }
  }
  if (rank == 0) {
    std::printf("npu_grouped_mat_mul_all_reduce on %d ranks: %s\n", world,
                ok ? "as expected" : "WRONG");
  }
  shmccl::destroy_process_group();
  return ok ? 0 : 1;
}
