// A program outside the shmccl tree, built against the installed package.
#include <shmccl/shmccl.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  shmccl::npu::set_device(0);
  shmccl::Tensor t = shmccl::arange(4, shmccl::kInt32).npu();
  const std::vector<int32_t> values = (t + t).cpu().to_vector<int32_t>();
  if (values != std::vector<int32_t>{0, 2, 4, 6}) {
    std::fprintf(stderr, "unexpected values\n");
    return 1;
  }
  // A collective and an argument error through the library's exported interface (a group of
  // one rank): the error is caught by its type, which the library must export.
  shmccl::InitOptions options;
  options.rank = 0;
  options.world_size = 1;
  options.job_id = "install-consumer-" + std::to_string(getpid());
  shmccl::init_process_group(options);
  shmccl::Tensor sum = shmccl::ones({3}, shmccl::kFloat32).npu();
  shmccl::all_reduce(sum);
  bool caught = false;
  try {
    shmccl::Tensor output = shmccl::zeros({3}, shmccl::kFloat32).npu();
    shmccl::all_gather_into_tensor_uneven(output, sum, {2});
  } catch (const shmccl::InvalidArgument& error) {
    caught = std::string(error.what()).find("Split sizes doesn't match total dim 0 size") !=
             std::string::npos;
  }
  shmccl::destroy_process_group();
  if (sum.cpu().to_vector<float>() != std::vector<float>{1, 1, 1} || !caught) {
    std::fprintf(stderr, "unexpected all_reduce result or error\n");
    return 1;
  }
  std::printf("consumer ok: shmccl %s\n", shmccl::version());
  return 0;
}
