// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collective.h"

#include <algorithm>
#include <array>

namespace shmccl::perf {
namespace {

constexpr std::array kAll = {Collective::kAllGather,     Collective::kAllGatherUneven,
                             Collective::kReduceScatter, Collective::kReduceScatterUneven,
                             Collective::kAllReduce,     Collective::kBroadcast};

}  // namespace

const char* collective_name(Collective collective) noexcept {
  switch (collective) {
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kAllGatherUneven:
      return "all_gather_uneven";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kReduceScatterUneven:
      return "reduce_scatter_uneven";
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kBroadcast:
      return "broadcast";
  }
  return "?";
}

std::optional<Collective> collective_from_name(const std::string& name) {
  std::string normalized = name;
  std::replace(normalized.begin(), normalized.end(), '-', '_');
  for (Collective collective : kAll) {
    if (normalized == collective_name(collective)) return collective;
  }
  return std::nullopt;
}

std::string collective_names() {
  std::string names;
  for (Collective collective : kAll) {
    if (!names.empty()) names += ", ";
    names += collective_name(collective);
  }
  return names;
}

bool is_reducing(Collective collective) noexcept {
  return collective == Collective::kReduceScatter ||
         collective == Collective::kReduceScatterUneven || collective == Collective::kAllReduce;
}

bool is_split(Collective collective) noexcept {
  return collective == Collective::kAllGather || collective == Collective::kAllGatherUneven ||
         collective == Collective::kReduceScatter || collective == Collective::kReduceScatterUneven;
}

bool is_uneven(Collective collective) noexcept {
  return collective == Collective::kAllGatherUneven ||
         collective == Collective::kReduceScatterUneven;
}

bool has_root(Collective collective) noexcept {
  return collective == Collective::kBroadcast;
}

double bus_factor(Collective collective, int world_size) noexcept {
  const double n = world_size;
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kAllGatherUneven:
    case Collective::kReduceScatter:
    case Collective::kReduceScatterUneven:
      return (n - 1) / n;
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
    case Collective::kBroadcast:
      return 1;
  }
  return 1;
}

}  // namespace shmccl::perf
