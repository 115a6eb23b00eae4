// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The collectives shmccl-perf measures, their command-line names and the traits the other parts
// of the tool ask about: does it reduce, does it split rows between ranks (and unevenly), does it
// have a root, and the bus-bandwidth factor nccl-tests defines for it. Pure functions.
#pragma once

#include <optional>
#include <string>

namespace shmccl::perf {

enum class Collective {
  kAllGather,            // all_gather_into_tensor
  kAllGatherUneven,      // all_gather_into_tensor_uneven
  kReduceScatter,        // reduce_scatter_tensor
  kReduceScatterUneven,  // reduce_scatter_tensor_uneven
  kAllReduce,            // all_reduce
  kBroadcast,            // broadcast
};

// "all_gather", "all_gather_uneven", ... (the -o spelling).
const char* collective_name(Collective collective) noexcept;
// The inverse of collective_name ('-' and '_' alike); nullopt for an unknown name.
std::optional<Collective> collective_from_name(const std::string& name);
// "all_gather, all_gather_uneven, ...": for messages and the help text.
std::string collective_names();

// Takes a reduce op (reduce-scatter, all-reduce).
bool is_reducing(Collective collective) noexcept;
// Splits dim 0 between the ranks (all-gather and reduce-scatter, even or uneven).
bool is_split(Collective collective) noexcept;
// The split follows -z (the _uneven forms).
bool is_uneven(Collective collective) noexcept;
bool has_root(Collective collective) noexcept;

// busbw = algbw * bus_factor, as nccl-tests defines it: (n-1)/n for all-gather and
// reduce-scatter, 2(n-1)/n for all-reduce, 1 for broadcast.
double bus_factor(Collective collective, int world_size) noexcept;

}  // namespace shmccl::perf
