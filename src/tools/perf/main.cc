// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmccl-perf: nccl-tests for shmccl. Run under shmrun (or alone, as one rank):
//   shmrun --nproc-per-node 4 shmccl-perf -o all_gather_uneven -b 8 -e 256M -f 4 -d float32
// Every rank parses the same command line and runs the same sweep; rank 0 prints the table.
// Exit status: 0, 1 (wrong results or a failed collective), 2 (malformed command line).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "options.h"
#include "report.h"
#include "runner.h"
#include "shmccl/shmccl.hpp"
#include "size_plan.h"

namespace shmccl::perf {
namespace {

constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

// Under shmrun (or torchrun, mpirun) the environment names the rank; alone, the tool is a job of
// one rank.
void init() {
  InitOptions init_options;
  if (std::getenv("RANK") == nullptr && std::getenv("WORLD_SIZE") == nullptr &&
      std::getenv("OMPI_COMM_WORLD_RANK") == nullptr && std::getenv("PMI_RANK") == nullptr) {
    init_options.rank = 0;
    init_options.world_size = 1;
    init_options.job_id = "shmccl-perf-" + std::to_string(getpid());
  }
  init_process_group(init_options);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Every rank's pid and device, gathered so that rank 0 can print them.
std::vector<RankInfo> gather_rank_info(int world) {
  constexpr int kFields = 3;
  Tensor mine = from_vector<int64_t>(
      {static_cast<int64_t>(getpid()), npu::current_device(), npu::physical_device()});
  Tensor all = zeros({kFields * static_cast<int64_t>(world)}, kInt64);
  all_gather_into_tensor(all, mine);
  std::vector<RankInfo> ranks(static_cast<size_t>(world));
  const int64_t* values = all.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    const int64_t* rank_values = values + kFields * r;
    ranks[static_cast<size_t>(r)] =
        RankInfo{r, static_cast<pid_t>(rank_values[0]), static_cast<int>(rank_values[1]),
                 static_cast<int>(rank_values[2])};
  }
  return ranks;
}

int run(const PerfOptions& options) {
  const int local_rank = env_int("LOCAL_RANK", env_int("RANK", 0));
  npu::set_device(local_rank % npu::device_count());
  init();
  const int rank = get_rank();
  const int world = get_world_size();
  if (has_root(options.collective) && options.root >= world) {
    std::fprintf(stderr,
                 "shmccl-perf: error: option -R/--root: root %d is out of range for %d ranks\n%s\n",
                 options.root, world, usage_line());
    destroy_process_group();
    return kExitUsage;
  }
  Report report(rank == 0 ? stdout : nullptr);
  report.header(options, world, host_name(), gather_rank_info(world));
  Runner runner(options, rank, world);
  const std::vector<int64_t> sizes =
      sweep_sizes(options.min_bytes, options.max_bytes, options.step_factor);
  const bool reducing = is_reducing(options.collective);
  const std::vector<ReduceOp> no_op = {ReduceOp::SUM};  // not used by the op; one pass
  for (ScalarType dtype : options.dtypes) {
    for (ReduceOp op : reducing ? options.reduce_ops : no_op) {
      // As torch, the library refuses the average of booleans: -r all skips it here (and -r avg
      // with only -d bool is a usage error).
      if (reducing && op == ReduceOp::AVG && dtype == ScalarType::Bool) continue;
      for (int64_t bytes : sizes) {
        const SizePlan plan = plan_size(options.collective, dtype, bytes, world, options.split);
        report.begin_row(plan, dtype, reducing ? reduce_op_short_name(op) : "none",
                         has_root(options.collective) ? options.root : -1);
        for (bool in_place : {false, true}) {
          report.add_result(runner.measure(plan, dtype, op, in_place), plan.bytes,
                            bus_factor(options.collective, world));
        }
        report.end_row();
      }
    }
  }
  report.footer();
  barrier();
  destroy_process_group();
  return report.failed_results() > 0 ? kExitWrong : 0;
}

}  // namespace
}  // namespace shmccl::perf

int main(int argc, char** argv) {
  using namespace shmccl::perf;
  setlinebuf(stdout);
  PerfOptions options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& error) {
    // Every rank prints: under shmrun the first rank to exit stops the others.
    std::fprintf(stderr, "shmccl-perf: error: %s\n%s\n", error.what(), usage_line());
    return kExitUsage;
  }
  if (options.help) {
    if (env_int("RANK", 0) == 0) std::fputs(help_text().c_str(), stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "shmccl-perf: rank %s: error: %s\n",
                 std::getenv("RANK") != nullptr ? std::getenv("RANK") : "0", error.what());
    return kExitWrong;
  }
}
