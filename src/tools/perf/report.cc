// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "report.h"

#include <cstdarg>

#include "shmccl/version.hpp"

namespace shmccl::perf {

std::string format_time_us(double microseconds) {
  char text[32];
  const char* format = microseconds >= 10000 ? "%7.0f" : microseconds >= 100 ? "%7.1f" : "%7.2f";
  std::snprintf(text, sizeof(text), format, microseconds);
  return text;
}

void Report::print(const char* format, ...) {
  if (out_ == nullptr) return;
  va_list arguments;
  va_start(arguments, format);
  std::vfprintf(out_, format, arguments);
  va_end(arguments);
}

void Report::header(const PerfOptions& options, int world, const std::string& host,
                    const std::vector<RankInfo>& ranks) {
  print("# shmccl-perf: %s (shmccl %s)\n", collective_name(options.collective), shmccl::version());
  print(
      "# nRanks %d minBytes %lld maxBytes %lld step: %lld(factor) warmup iters: %d iters: %d "
      "async depth: %d validation: %d memory: %s",
      world, static_cast<long long>(options.min_bytes), static_cast<long long>(options.max_bytes),
      static_cast<long long>(options.step_factor), options.warmup_iters, options.iters,
      options.async_depth, options.check ? 1 : 0, placement_name(options.placement));
  if (is_uneven(options.collective)) {
    print(" split: %s", split_pattern_name(options.split).c_str());
  }
  if (has_root(options.collective)) print(" root: %d", options.root);
  print("\n#\n# Using devices\n");
  for (const RankInfo& info : ranks) {
    print("#  Rank %2d Group %2d Pid %6d on %10s device %2d [npu:%d] shmccl simulated NPU%s\n",
          info.rank, 0, static_cast<int>(info.pid), host.c_str(), info.device, info.physical_device,
          options.placement == Placement::kHost ? " (tensors in host memory)" : "");
  }
  print("#\n");
  print("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place\n", "",
        "", "", "", "");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
        "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

void Report::begin_row(const SizePlan& plan, ScalarType dtype, const char* redop, int root) {
  print("%12lld  %12lld  %8s  %6s  %6d", static_cast<long long>(plan.bytes),
        static_cast<long long>(plan.count), dtype_name(dtype), redop, root);
}

void Report::add_result(const Measurement& measurement, int64_t bytes, double bus_factor) {
  const double algbw =
      measurement.seconds > 0 ? static_cast<double>(bytes) / measurement.seconds / 1e9 : 0;
  const double busbw = algbw * bus_factor;
  busbw_sum_ += busbw;
  ++results_;
  if (measurement.wrong > 0) ++failed_results_;
  const std::string time = format_time_us(measurement.seconds * 1e6);
  if (measurement.wrong < 0) {
    print("  %7s  %6.2f  %6.2f  %5s", time.c_str(), algbw, busbw, "N/A");
  } else {
    print("  %7s  %6.2f  %6.2f  %5lld", time.c_str(), algbw, busbw,
          static_cast<long long>(measurement.wrong));
  }
}

void Report::end_row() {
  print("\n");
  if (out_ != nullptr) std::fflush(out_);
}

void Report::footer() {
  print("# Out of bounds values : %lld %s\n", static_cast<long long>(failed_results_),
        failed_results_ != 0 ? "FAILED" : "OK");
  print("# Avg bus bandwidth    : %g \n",
        results_ > 0 ? busbw_sum_ / static_cast<double>(results_) : 0.0);
  print("#\n");
  if (out_ != nullptr) std::fflush(out_);
}

}  // namespace shmccl::perf
