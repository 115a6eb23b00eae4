// A program outside the shmccl tree, built against the installed package.
#include <shmccl/shmccl.hpp>

#include <cstdio>

int main() {
  shmccl::npu::set_device(0);
  shmccl::Tensor t = shmccl::arange(4, shmccl::kInt32).npu();
  const std::vector<int32_t> values = (t + t).cpu().to_vector<int32_t>();
  if (values != std::vector<int32_t>{0, 2, 4, 6}) {
    std::fprintf(stderr, "unexpected values\n");
    return 1;
  }
  std::printf("consumer ok: shmccl %s\n", shmccl::version());
  return 0;
}
