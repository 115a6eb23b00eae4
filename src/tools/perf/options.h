// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmccl-perf's command line, in nccl-tests' spelling where the meaning is the same (-b -e -f -w
// -n -c -d; sizes take K, M, G suffixes) and with shmccl's own letters where nccl-tests has no
// equivalent or one letter carries two meanings (-o is the collective, -r the reduce op, -R the
// root, -a the async depth, -m the tensor placement, -z the uneven split). Every option has a
// long form (--minbytes 8 or --minbytes=8; '-' and '_' alike). parse_options() is pure: it reads
// no environment, so it is unit-tested directly.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "shmccl/dtype.hpp"
#include "shmccl/reduce_op.hpp"

namespace shmccl::perf {

// A malformed command line; main() prints it with the usage line and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Placement { kNpu, kHost };

// How the _uneven collectives split the elements between ranks (-z).
struct SplitPattern {
  enum class Kind {
    kLinear,  // rank r gets r + 1 shares
    kRandom,  // n - 1 seeded random cut points, new ones for every size
    kZero,    // rank 0 gets nothing, the others equal shares
  };
  Kind kind = Kind::kLinear;
  uint64_t seed = 1;  // kRandom only
};

struct PerfOptions {
  bool help = false;
  Collective collective = Collective::kAllReduce;
  int64_t min_bytes = int64_t{32} << 20;
  int64_t max_bytes = int64_t{32} << 20;
  int64_t step_factor = 2;
  std::vector<ScalarType> dtypes = {kFloat32};         // -d all: every dtype
  std::vector<ReduceOp> reduce_ops = {ReduceOp::SUM};  // -r all: every op
  int warmup_iters = 5;
  int iters = 20;
  bool check = true;
  int async_depth = 0;  // 0: synchronous calls; k: async_op=true with k in flight
  Placement placement = Placement::kNpu;
  SplitPattern split;
  int root = 0;
  // Hidden test hook (--debug-corrupt RANK): that rank overwrites one element of its output
  // before every check, to prove the check counts wrong elements. -1: off.
  int corrupt_rank = -1;
};

// Throws UsageError naming the option on anything malformed; `args` excludes argv[0].
PerfOptions parse_options(const std::vector<std::string>& args);

// "8", "64K", "256M", "1G" (powers of 1024, either case) -> bytes; false when malformed, zero or
// above 1 TiB.
bool parse_bytes(const std::string& text, int64_t* bytes);

const char* placement_name(Placement placement) noexcept;   // "npu", "host"
std::string split_pattern_name(const SplitPattern& split);  // "linear", "random:7", "zero"
// As nccl-tests prints them: "sum", "prod", "min", "max", "avg".
const char* reduce_op_short_name(ReduceOp op) noexcept;

const char* usage_line();
std::string help_text();

}  // namespace shmccl::perf
