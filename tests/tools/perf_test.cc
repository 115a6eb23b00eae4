// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: the real shmccl-perf under the real shmrun. A grid over every collective at 2, 3
// and 4 ranks (and 8), dtypes, host and NPU tensors, async depth, every -z pattern and reduce op:
// the run exits 0 and prints nccl-tests' table with the expected sizes, #wrong 0 everywhere and
// busbw = algbw * the op's factor. Then the command-line errors (exit 2, a message naming the
// option), and the proof that the check can fail (--debug-corrupt: #wrong > 0, exit 1).
#include <cmath>
#include <sstream>

#include "launcher/shmrun_harness.h"

namespace shmccl::perf::testing {
namespace {

using launcher::testing::expect_shm_clean;
using launcher::testing::namespaces;
using launcher::testing::run_shmrun;
using launcher::testing::RunResult;

const std::string kPerf = SHMCCL_BINARY_DIR "/src/tools/perf/shmccl-perf";

struct Result {
  double time_us = 0, algbw = 0, busbw = 0;
  std::string wrong;
};

struct Row {
  int64_t size = 0, count = 0;
  std::string type, redop;
  int root = 0;
  Result out_of_place, in_place;
};

struct Table {
  std::vector<std::string> comments;  // lines starting with '#'
  std::vector<Row> rows;
  std::vector<std::string> malformed;  // neither
};

Table parse_table(const std::string& text) {
  Table table;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      table.comments.push_back(line);
      continue;
    }
    std::istringstream fields(line);
    Row row;
    fields >> row.size >> row.count >> row.type >> row.redop >> row.root;
    for (Result* result : {&row.out_of_place, &row.in_place})
      fields >> result->time_us >> result->algbw >> result->busbw >> result->wrong;
    std::string rest;
    if (fields.fail() || (fields >> rest)) {
      table.malformed.push_back(line);
    } else {
      table.rows.push_back(row);
    }
  }
  return table;
}

int count_comments(const Table& table, const std::string& prefix) {
  int count = 0;
  for (const std::string& line : table.comments)
    count += line.rfind(prefix, 0) == 0;
  return count;
}

std::string comment_with(const Table& table, const std::string& prefix) {
  for (const std::string& line : table.comments) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

int64_t element_size_of(const std::string& dtype) {
  if (dtype == "bool" || dtype == "int8" || dtype == "uint8") return 1;
  if (dtype == "int16" || dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int32" || dtype == "float32") return 4;
  return 8;
}

bool is_reducing(const std::string& op) {
  return op.rfind("reduce_scatter", 0) == 0 || op == "all_reduce";
}

double factor_of(const std::string& op, int ranks) {
  const double n = ranks;
  if (op == "all_reduce") return 2 * (n - 1) / n;
  if (op == "broadcast") return 1;
  return (n - 1) / n;
}

// The elements of one row: whole elements, and for the even forms a multiple of the ranks.
int64_t expected_count(const std::string& op, int64_t bytes, const std::string& dtype, int ranks) {
  const int64_t count = bytes / element_size_of(dtype);
  return op == "all_gather" || op == "reduce_scatter" ? count - count % ranks : count;
}

struct Case {
  int ranks;
  std::string op;
  std::vector<std::string> dtypes;  // the -d value is dtypes[0], or "all" when several
  std::vector<std::string> redops;  // likewise for -r
  std::string memory;               // npu or host
  int async_depth;
  std::string split;
};

std::string name_of(const Case& c) {
  std::string name = c.op + "_" + std::to_string(c.ranks) + "ranks_" +
                     (c.dtypes.size() > 1 ? "alldtypes" : c.dtypes[0]) + "_" + c.memory + "_async" +
                     std::to_string(c.async_depth);
  if (c.op.find("uneven") != std::string::npos) name += "_" + c.split;
  if (is_reducing(c.op)) name += "_" + (c.redops.size() > 1 ? "allops" : c.redops[0]);
  for (char& ch : name) {
    if (ch == ':') ch = '_';
  }
  return name;
}

void PrintTo(const Case& c, std::ostream* out) {
  *out << name_of(c);
}

const std::vector<std::string> kAllDtypes = {"bool",  "int8",    "uint8",    "int16",   "int32",
                                             "int64", "float16", "bfloat16", "float32", "float64"};
const std::vector<std::string> kAllRedops = {"sum", "prod", "min", "max", "avg"};

// Every op at 2, 3 and 4 ranks; the other dimensions rotate so that each value appears several
// times across the grid. Plus runs over every dtype and reduce op, and two at 8 ranks.
std::vector<Case> grid() {
  const std::vector<std::string> ops = {"all_gather",     "all_gather_uneven",
                                        "reduce_scatter", "reduce_scatter_uneven",
                                        "all_reduce",     "broadcast"};
  const std::vector<std::string> dtypes = {"float32", "bfloat16", "int32", "float16", "int8",
                                           "float64", "uint8",    "bool",  "int64",   "int16"};
  const std::vector<std::string> splits = {"linear", "random:7", "zero"};
  std::vector<Case> cases;
  int i = 0;
  for (int ranks : {2, 3, 4}) {
    for (const std::string& op : ops) {
      cases.push_back(Case{ranks,
                           op,
                           {dtypes[i % dtypes.size()]},
                           {kAllRedops[i % 5]},
                           i % 2 == 0 ? "npu" : "host",
                           (i / 2) % 2 == 0 ? 0 : 2,
                           splits[(i / 2) % 3]});
      ++i;
    }
  }
  cases.push_back(Case{3, "all_reduce", kAllDtypes, kAllRedops, "npu", 0, "linear"});
  cases.push_back(Case{4, "reduce_scatter_uneven", kAllDtypes, kAllRedops, "host", 2, "random:3"});
  cases.push_back(Case{2, "all_gather_uneven", kAllDtypes, {"sum"}, "npu", 1, "zero"});
  cases.push_back(Case{8, "all_gather_uneven", {"bfloat16"}, {"sum"}, "npu", 2, "zero"});
  cases.push_back(Case{8, "reduce_scatter_uneven", {"float16"}, {"avg"}, "host", 0, "linear"});
  return cases;
}

class PerfGrid : public ::testing::TestWithParam<Case> {};

TEST_P(PerfGrid, PrintsACorrectTable) {
  const Case& c = GetParam();
  // Few sizes and iterations (the grid is about correctness and the table); the sweep still
  // crosses the inline limit (16 KiB) into the zero-copy work pool. Runs over every dtype and
  // reduce op have 50 rows per size: two sizes, one iteration.
  const bool wide = c.dtypes.size() > 1 || c.redops.size() > 1;
  const int64_t min_bytes = wide ? 64 : 8, max_bytes = wide ? 32 * 1024 : 256 * 1024;
  const int64_t factor = wide ? 512 : 8;
  const std::string iterations = wide ? "1" : "2", warmups = wide ? "0" : "1";
  std::vector<std::string> args = {"-v", "--no-prefix", "--nproc-per-node", std::to_string(c.ranks),
                                   kPerf};
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"-o", c.op},
      {"-b", std::to_string(min_bytes)},
      {"-e", std::to_string(max_bytes)},
      {"-f", std::to_string(factor)},
      {"-d", c.dtypes.size() > 1 ? "all" : c.dtypes[0]},
      {"-r", c.redops.size() > 1 ? "all" : c.redops[0]},
      {"-w", warmups},
      {"-n", iterations},
      {"-c", "1"},
      {"-a", std::to_string(c.async_depth)},
      {"-m", c.memory},
      {"-z", c.split}};
  for (const auto& [flag, value] : flags) {
    args.push_back(flag);
    args.push_back(value);
  }
  if (c.op == "broadcast") {
    args.push_back("-R");
    args.push_back(std::to_string(c.ranks - 1));
  }
  const RunResult result = run_shmrun(args);
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  expect_shm_clean(namespaces(result.err));
  const Table table = parse_table(result.out);
  EXPECT_TRUE(table.malformed.empty()) << "not a table line: " << table.malformed.front();

  // Header: the run and one line per rank, with distinct pids.
  EXPECT_EQ(comment_with(table, "# shmccl-perf: ").find("# shmccl-perf: " + c.op + " "), 0u)
      << result.out;
  EXPECT_NE(comment_with(table, "# nRanks ").find("# nRanks " + std::to_string(c.ranks) + " "),
            std::string::npos)
      << result.out;
  EXPECT_EQ(count_comments(table, "#  Rank "), c.ranks) << result.out;
  std::set<std::string> pids;
  for (const std::string& line : table.comments) {
    if (line.rfind("#  Rank ", 0) == 0) pids.insert(line.substr(line.find(" Pid ") + 5, 7));
  }
  EXPECT_EQ(static_cast<int>(pids.size()), c.ranks) << result.out;
  EXPECT_NE(comment_with(table, "#       size         count      type   redop    root     time"),
            "")
      << result.out;

  // Rows: dtype-major, then reduce op, then size, as nccl-tests.
  std::vector<int64_t> sizes;
  for (int64_t size = min_bytes; size <= max_bytes; size *= factor)
    sizes.push_back(size);
  const std::vector<std::string> redops =
      is_reducing(c.op) ? c.redops : std::vector<std::string>{"none"};
  // The average of booleans is refused (as torch does): no rows for it.
  auto skipped = [](const std::string& dtype, const std::string& redop) {
    return dtype == "bool" && redop == "avg";
  };
  size_t combinations = 0;
  for (const std::string& dtype : c.dtypes) {
    for (const std::string& redop : redops)
      combinations += skipped(dtype, redop) ? 0 : 1;
  }
  ASSERT_EQ(table.rows.size(), combinations * sizes.size()) << result.out;
  size_t index = 0;
  double busbw_sum = 0;
  for (const std::string& dtype : c.dtypes) {
    for (const std::string& redop : redops) {
      if (skipped(dtype, redop)) continue;
      for (int64_t size : sizes) {
        const Row& row = table.rows[index++];
        const int64_t count = expected_count(c.op, size, dtype, c.ranks);
        EXPECT_EQ(row.count, count) << dtype << " " << size;
        EXPECT_EQ(row.size, count * element_size_of(dtype)) << dtype << " " << size;
        EXPECT_EQ(row.type, dtype);
        EXPECT_EQ(row.redop, redop);
        EXPECT_EQ(row.root, c.op == "broadcast" ? c.ranks - 1 : -1);
        for (const Result* r : {&row.out_of_place, &row.in_place}) {
          EXPECT_EQ(r->wrong, "0") << dtype << " " << redop << " " << size << "\n" << result.out;
          EXPECT_GT(r->time_us, 0);
          // Printed with two decimals: allow each rounding.
          EXPECT_NEAR(r->busbw, r->algbw * factor_of(c.op, c.ranks), 0.011) << dtype << " " << size;
          busbw_sum += r->busbw;
        }
      }
    }
  }
  EXPECT_EQ(comment_with(table, "# Out of bounds values : "), "# Out of bounds values : 0 OK")
      << result.out;
  const std::string average = comment_with(table, "# Avg bus bandwidth    : ");
  ASSERT_NE(average, "") << result.out;
  EXPECT_NEAR(std::stod(average.substr(25)), busbw_sum / (2.0 * table.rows.size()),
              0.006 + 1e-3 * busbw_sum);
}

INSTANTIATE_TEST_SUITE_P(Runs, PerfGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return name_of(info.param);
                         });

TEST(Perf, UncheckedRunsPrintNotApplicable) {
  const RunResult result =
      run_shmrun({"--no-prefix", "--nproc-per-node", "2", kPerf, "-o", "all_reduce", "-b", "1K",
                  "-e", "4K", "-f", "4", "-c", "0", "-n", "2", "-w", "0"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const Table table = parse_table(result.out);
  ASSERT_EQ(table.rows.size(), 2u) << result.out;
  for (const Row& row : table.rows) {
    EXPECT_EQ(row.out_of_place.wrong, "N/A");
    EXPECT_EQ(row.in_place.wrong, "N/A");
  }
}

// The hidden hook makes rank 1 overwrite one element of its output before every check: every
// result must count it, the footer must say FAILED, and the tool must exit 1.
TEST(Perf, ACorruptedElementIsCountedAndFailsTheRun) {
  for (const std::string op : {"all_reduce", "all_gather_uneven"}) {
    const RunResult result =
        run_shmrun({"--no-prefix", "--nproc-per-node", "2", kPerf, "-o", op, "-b", "64", "-e",
                    "64K", "-f", "32", "-n", "1", "-w", "0", "--debug-corrupt", "1"});
    EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
    const Table table = parse_table(result.out);
    ASSERT_EQ(table.rows.size(), 3u) << result.out;
    for (const Row& row : table.rows) {
      EXPECT_EQ(row.out_of_place.wrong, "1") << result.out;
      EXPECT_EQ(row.in_place.wrong, "1") << result.out;
    }
    EXPECT_EQ(comment_with(table, "# Out of bounds values : "), "# Out of bounds values : 6 FAILED")
        << result.out;
  }
}

TEST(Perf, HelpExitsZero) {
  const RunResult result = run_shmrun({"--no-prefix", "--nproc-per-node", "2", kPerf, "-h"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.rfind("usage: shmrun --nproc-per-node N shmccl-perf", 0), 0u) << result.out;
  EXPECT_NE(result.out.find("-z, --split PATTERN"), std::string::npos);
  // Rank 0 only prints it.
  EXPECT_EQ(result.out.find("usage:", 1), std::string::npos) << result.out;
}

struct BadArguments {
  std::vector<std::string> args;
  std::string message;
};

class PerfUsage : public ::testing::TestWithParam<BadArguments> {};

TEST_P(PerfUsage, ExitsTwoNamingTheOption) {
  std::vector<std::string> args = {"--nproc-per-node", "2", kPerf};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const RunResult result = run_shmrun(args);
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find("shmccl-perf: error: " + GetParam().message), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("usage: shmrun --nproc-per-node N shmccl-perf"), std::string::npos)
      << result.err;
  EXPECT_EQ(result.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PerfUsage,
    ::testing::Values(
        BadArguments{{"-o", "all_scatter"},
                     "option -o/--op: unknown collective 'all_scatter' (expected one of "
                     "all_gather, all_gather_uneven, reduce_scatter, reduce_scatter_uneven, "
                     "all_reduce, broadcast)"},
        BadArguments{{"-b", "12Q"}, "option -b/--minbytes: invalid value '12Q'"},
        BadArguments{{"--maxbytes=0"}, "option -e/--maxbytes: invalid value '0'"},
        BadArguments{{"-b", "1M", "-e", "1K"},
                     "option -b/--minbytes (1048576) is larger than -e/--maxbytes (1024)"},
        BadArguments{{"-f", "1"}, "option -f/--stepfactor: invalid value '1'"},
        BadArguments{{"-d", "complex64"}, "option -d/--datatype: unknown dtype 'complex64'"},
        BadArguments{{"-r", "xor"}, "option -r/--redop: invalid value 'xor'"},
        BadArguments{{"-c", "2"}, "option -c/--check: invalid value '2' (expected 0 or 1)"},
        BadArguments{{"-n", "0"}, "option -n/--iters: invalid value '0'"},
        BadArguments{{"-a", "-1"}, "option -a/--async: invalid value '-1'"},
        BadArguments{{"-m", "gpu"},
                     "option -m/--memory: invalid value 'gpu' (expected npu or host)"},
        BadArguments{{"-z", "random:x"}, "option -z/--split: invalid value 'random:x'"},
        BadArguments{{"-n"}, "option -n/--iters needs a value"},
        BadArguments{{"--bogus", "1"}, "unknown option '--bogus'"},
        BadArguments{{"-x"}, "unknown option '-x'"},
        BadArguments{{"stray"}, "unexpected argument 'stray'"},
        BadArguments{{"-o", "broadcast", "-R", "2", "-b", "8", "-e", "8"},
                     "option -R/--root: root 2 is out of range for 2 ranks"}));

}  // namespace
}  // namespace shmccl::perf::testing
