// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "options.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <string_view>

#include "collective.h"
#include "shmccl/error.hpp"

namespace shmccl::perf {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 40;

// One option: its letter, its long name, and what its value looks like (for messages).
struct Flag {
  char letter;
  const char* name;
  const char* expected;
};

constexpr std::array kFlags = {
    Flag{'o', "op", "a collective"},
    Flag{'b', "minbytes", "bytes such as 8, 64K, 256M, 1G"},
    Flag{'e', "maxbytes", "bytes such as 8, 64K, 256M, 1G"},
    Flag{'f', "stepfactor", "an integer >= 2"},
    Flag{'d', "datatype", "a dtype or 'all'"},
    Flag{'r', "redop", "sum, prod, min, max, avg or all"},
    Flag{'w', "warmup_iters", "an integer >= 0"},
    Flag{'n', "iters", "an integer >= 1"},
    Flag{'c', "check", "0 or 1"},
    Flag{'a', "async", "an integer in [0, 1024]"},
    Flag{'m', "memory", "npu or host"},
    Flag{'z', "split", "linear, random:SEED or zero"},
    Flag{'R', "root", "a rank >= 0"},
    Flag{'\0', "debug_corrupt", "a rank >= 0"},  // hidden test hook, not in the help
};

std::string flag_label(const Flag& flag) {
  std::string label = flag.letter != '\0' ? std::string("-") + flag.letter + "/" : std::string();
  return label + "--" + flag.name;
}

[[noreturn]] void invalid(const Flag& flag, std::string_view value) {
  throw UsageError("option " + flag_label(flag) + ": invalid value '" + std::string(value) +
                   "' (expected " + flag.expected + ")");
}

// A whole-string decimal integer in [min, max].
int64_t int_value(const Flag& flag, std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end || value < min || value > max) {
    invalid(flag, text);
  }
  return value;
}

std::vector<ScalarType> dtypes_value(const Flag& flag, const std::string& text) {
  if (text == "all") {
    std::vector<ScalarType> all;
    for (int i = 0; i < kNumScalarTypes; ++i)
      all.push_back(static_cast<ScalarType>(i));
    return all;
  }
  try {
    return {dtype_from_name(text)};
  } catch (const InvalidArgument&) {
    throw UsageError("option " + flag_label(flag) + ": unknown dtype '" + text +
                     "' (expected bool, int8, uint8, int16, int32, int64, float16, bfloat16, "
                     "float32, float64, a torch alias such as float or half, or all)");
  }
}

std::vector<ReduceOp> reduce_ops_value(const Flag& flag, const std::string& text) {
  constexpr std::array kOps = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
                               ReduceOp::AVG};
  if (text == "all") return {kOps.begin(), kOps.end()};
  for (ReduceOp op : kOps) {
    if (text == reduce_op_short_name(op) || text == reduce_op_name(op)) return {op};
  }
  invalid(flag, text);
}

SplitPattern split_value(const Flag& flag, const std::string& text) {
  SplitPattern split;
  if (text == "linear") {
    split.kind = SplitPattern::Kind::kLinear;
  } else if (text == "zero") {
    split.kind = SplitPattern::Kind::kZero;
  } else if (text == "random") {
    split.kind = SplitPattern::Kind::kRandom;
  } else if (text.rfind("random:", 0) == 0) {
    const std::string_view seed = std::string_view(text).substr(7);
    uint64_t value = 0;
    auto [ptr, error] = std::from_chars(seed.data(), seed.data() + seed.size(), value);
    if (seed.empty() || error != std::errc() || ptr != seed.data() + seed.size()) {
      invalid(flag, text);
    }
    split.kind = SplitPattern::Kind::kRandom;
    split.seed = value;
  } else {
    invalid(flag, text);
  }
  return split;
}

void apply(PerfOptions& options, const Flag& flag, const std::string& value) {
  switch (flag.letter) {
    case 'o': {
      const auto collective = collective_from_name(value);
      if (!collective) {
        throw UsageError("option " + flag_label(flag) + ": unknown collective '" + value +
                         "' (expected one of " + collective_names() + ")");
      }
      options.collective = *collective;
      return;
    }
    case 'b':
      if (!parse_bytes(value, &options.min_bytes)) invalid(flag, value);
      return;
    case 'e':
      if (!parse_bytes(value, &options.max_bytes)) invalid(flag, value);
      return;
    case 'f':
      options.step_factor = int_value(flag, value, 2, 1 << 20);
      return;
    case 'd':
      options.dtypes = dtypes_value(flag, value);
      return;
    case 'r':
      options.reduce_ops = reduce_ops_value(flag, value);
      return;
    case 'w':
      options.warmup_iters = static_cast<int>(int_value(flag, value, 0, 1 << 30));
      return;
    case 'n':
      options.iters = static_cast<int>(int_value(flag, value, 1, 1 << 30));
      return;
    case 'c':
      options.check = int_value(flag, value, 0, 1) == 1;
      return;
    case 'a':
      options.async_depth = static_cast<int>(int_value(flag, value, 0, 1024));
      return;
    case 'm':
      if (value == "npu") {
        options.placement = Placement::kNpu;
      } else if (value == "host" || value == "cpu") {
        options.placement = Placement::kHost;
      } else {
        invalid(flag, value);
      }
      return;
    case 'z':
      options.split = split_value(flag, value);
      return;
    case 'R':
      options.root = static_cast<int>(int_value(flag, value, 0, 1 << 20));
      return;
    case '\0':
      options.corrupt_rank = static_cast<int>(int_value(flag, value, 0, 1 << 20));
      return;
  }
}

const Flag* find_letter(char letter) {
  for (const Flag& flag : kFlags) {
    if (flag.letter == letter && letter != '\0') return &flag;
  }
  return nullptr;
}

const Flag* find_name(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  for (const Flag& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

}  // namespace

bool parse_bytes(const std::string& text, int64_t* bytes) {
  if (text.empty()) return false;
  int64_t unit = 1;
  std::string_view digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      unit = int64_t{1} << 10;
      break;
    case 'M':
    case 'm':
      unit = int64_t{1} << 20;
      break;
    case 'G':
    case 'g':
      unit = int64_t{1} << 30;
      break;
    default:
      break;
  }
  if (unit != 1) digits.remove_suffix(1);
  int64_t value = 0;
  auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || ptr != digits.data() + digits.size()) return false;
  if (value <= 0 || value > kMaxBytes / unit) return false;
  *bytes = value * unit;
  return true;
}

PerfOptions parse_options(const std::vector<std::string>& args) {
  PerfOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      continue;
    }
    const Flag* flag = nullptr;
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const size_t equals = arg.find('=');
      flag = find_name(arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2));
      if (flag == nullptr) throw UsageError("unknown option '" + arg + "'");
      if (equals != std::string::npos) {
        value = arg.substr(equals + 1);
        has_value = true;
      }
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      flag = find_letter(arg[1]);
      if (flag == nullptr) throw UsageError("unknown option '" + arg.substr(0, 2) + "'");
      if (arg.size() > 2) {
        value = arg.substr(2);
        has_value = true;
      }
    } else {
      throw UsageError("unexpected argument '" + arg + "' (shmccl-perf takes options only)");
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        throw UsageError("option " + flag_label(*flag) + " needs a value (" + flag->expected + ")");
      }
      value = args[++i];
    }
    apply(options, *flag, value);
  }
  if (options.min_bytes > options.max_bytes) {
    throw UsageError("option -b/--minbytes (" + std::to_string(options.min_bytes) +
                     ") is larger than -e/--maxbytes (" + std::to_string(options.max_bytes) + ")");
  }
  // The average of booleans is refused (as torch's): `-d all -r all` skips it, but when it is
  // all that was asked for, an empty table that says OK would hide that.
  const bool only_bool_average =
      is_reducing(options.collective) &&
      std::all_of(options.dtypes.begin(), options.dtypes.end(),
                  [](ScalarType dtype) { return dtype == ScalarType::Bool; }) &&
      std::all_of(options.reduce_ops.begin(), options.reduce_ops.end(),
                  [](ReduceOp op) { return op == ReduceOp::AVG; });
  if (only_bool_average) {
    throw UsageError(
        "options -d bool and -r avg: the average of booleans is not defined (as in "
        "torch), so there is nothing to measure");
  }
  return options;
}

const char* placement_name(Placement placement) noexcept {
  return placement == Placement::kNpu ? "npu" : "host";
}

std::string split_pattern_name(const SplitPattern& split) {
  switch (split.kind) {
    case SplitPattern::Kind::kLinear:
      return "linear";
    case SplitPattern::Kind::kRandom:
      return "random:" + std::to_string(split.seed);
    case SplitPattern::Kind::kZero:
      return "zero";
  }
  return "?";
}

const char* reduce_op_short_name(ReduceOp op) noexcept {
  return op == ReduceOp::PRODUCT ? "prod" : reduce_op_name(op);
}

const char* usage_line() {
  return "usage: shmrun --nproc-per-node N shmccl-perf [-o OP] [-b MIN] [-e MAX] [-f FACTOR] "
         "[-d DTYPE] [-r REDOP] [-w N] [-n N] [-c 0|1] [-a DEPTH] [-m npu|host] [-z SPLIT] "
         "[-R ROOT] (-h for help)";
}

std::string help_text() {
  return std::string(usage_line()) + R"(

Measures one shmccl collective over a range of sizes, in the style of nccl-tests, and prints
one row per size: out-of-place, then in-place time, algbw, busbw and #wrong. Rank 0 prints.

  -o, --op OP            all_gather, all_gather_uneven, reduce_scatter, reduce_scatter_uneven,
                         all_reduce, broadcast                               [all_reduce]
  -b, --minbytes BYTES   smallest size (K, M, G suffixes: powers of 1024)    [32M]
  -e, --maxbytes BYTES   largest size                                        [32M]
  -f, --stepfactor F     multiply the size by F between rows (>= 2)          [2]
  -d, --datatype DTYPE   bool, int8, uint8, int16, int32, int64, float16, bfloat16, float32,
                         float64 (or torch's aliases: float, half, double...), or all  [float32]
  -r, --redop OP         sum, prod, min, max, avg, or all (reduce-scatter, all-reduce)  [sum]
  -w, --warmup_iters N   untimed iterations before each measurement          [5]
  -n, --iters N          timed iterations per measurement                    [20]
  -c, --check 0|1        check every result against a host reference         [1]
  -a, --async DEPTH      0: synchronous calls; k: async_op=true, k ops in flight (wait the
                         oldest before issuing another)                      [0]
  -m, --memory npu|host  tensors on the rank's simulated NPU, or in host memory  [npu]
  -z, --split PATTERN    rows per rank of the _uneven ops: linear (rank r gets r+1 shares),
                         random:SEED (seeded random cut points, new per size), zero (rank 0
                         gets none, the others equal shares)                 [linear]
  -R, --root RANK        broadcast root                                      [0]
  -h, --help             this text

Size means what nccl-tests means: the output bytes per rank for all-gather, the input bytes per
rank for reduce-scatter, the buffer bytes for all-reduce and broadcast. Element counts round
down to whole elements, and for the even all-gather and reduce-scatter to a multiple of the rank
count; the size column shows the rounded size, the count column its elements. time is the
slowest rank's average per iteration (us); algbw = size / time; busbw = algbw * (n-1)/n for
all-gather and reduce-scatter, 2(n-1)/n for all-reduce, 1 for broadcast. In place: an
all-gather's input is the rank's slice of its output, a reduce-scatter's output the rank's slice
of its input; all-reduce and broadcast always work on one buffer, so both column groups time the
same call. #wrong is the number of wrong elements over all ranks (N/A with -c 0).

Exit status: 0 when every check passed, 1 when an element was wrong or a collective failed,
2 for a malformed command line.
)";
}

}  // namespace shmccl::perf
