// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The peer benchmark: shmccl_collectives_bench's ops, sizes, uneven splits, counters and method
// (bench_method.h: median over ranks and repetitions, every result checked once per size), through
// MPI, on host buffers: MPI_Allgatherv, MPI_Reduce_scatter (uneven recvcounts, SUM), MPI_Allreduce,
// MPI_Bcast. Built once per MPI found (shmccl_peer_openmpi_bench, shmccl_peer_mpich_bench; the
// library's name comes from SHMCCL_PEER_LIBRARY). Names match shmccl's host/sync variants:
//   BM_AllGatherUneven/host/sync/out/1048576, BM_ReduceScatterUneven/bfloat16/host/sync/in/...
//   mpirun -np 4 shmccl_peer_openmpi_bench --benchmark_out=openmpi-4.json --bench_max_bytes=1M
// In place: MPI_IN_PLACE. MPI_Reduce_scatter in place leaves rank r's block at the start of its
// buffer (shmccl's leaves it at the rank's slice); MPI_Bcast has one buffer (so only "in").
// bfloat16: MPI has no bfloat16 type, so the data travels as MPI_UINT16_T and a user MPI_Op
// (commutative) sums in float32 and rounds to nearest even, as an application would do it.
// The MPI C API only (no C++ bindings, which Open MPI's mpi.h pulls in otherwise).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../bench_method.h"
#include "mpi_comm.h"

#ifndef SHMCCL_PEER_LIBRARY
#define SHMCCL_PEER_LIBRARY "mpi"
#endif

namespace shmccl::bench {
namespace {

// bfloat16 as 16-bit words: float32's top half, rounded to nearest even (NaN stays NaN).
float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *length; ++i)
    b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

MPI_Op g_bf16_sum = MPI_OP_NULL;

// Element types: the C++ type, its MPI datatype and SUM, and conversions from/to double.
struct Float32 {
  using T = float;
  static constexpr const char* kName = "float32";
  static MPI_Datatype type() { return MPI_FLOAT; }
  static MPI_Op sum() { return MPI_SUM; }
  static T from(double value) { return static_cast<T>(value); }
  static double to(T value) { return value; }
};

struct BFloat16 {
  using T = uint16_t;
  static constexpr const char* kName = "bfloat16";
  static MPI_Datatype type() { return MPI_UINT16_T; }
  static MPI_Op sum() { return g_bf16_sum; }
  static T from(double value) { return float_to_bf16(static_cast<float>(value)); }
  static double to(T value) { return bf16_to_float(value); }
};

struct Context {
  MpiComm comm;
  Options options;
  Cutoffs cutoffs;
  std::map<int64_t, double> memcpy_gbps;
  int world = 1;
  int rank = 0;
};

Context& context() {
  static Context instance;
  return instance;
}

struct Variant {
  std::string family;
  Collective op;
  bool in_place;
};

// Whether values[first + i] holds expected(i) for i < length, in E's precision.
template <typename E, typename Expected>
bool holds_each(const std::vector<typename E::T>& values, size_t first, size_t length,
                Expected expected) {
  for (size_t i = 0; i < length; ++i) {
    if (E::to(values[first + i]) != E::to(E::from(expected(static_cast<int64_t>(i))))) return false;
  }
  return true;
}

// Element i of `values` from `first` on holds value(i).
template <typename E, typename Value>
void fill_pattern(std::vector<typename E::T>& values, size_t first, size_t length, Value value) {
  for (size_t i = 0; i < length; ++i)
    values[first + i] = E::from(value(static_cast<int64_t>(i)));
}

template <typename E>
Benchmark describe(const Variant& variant, int64_t bytes, int64_t count) {
  const Context& ctx = context();
  Benchmark bench;
  bench.family = variant.family;
  bench.op = variant.op;
  bench.world = ctx.world;
  bench.rank = ctx.rank;
  bench.bytes = bytes;
  bench.real_bytes = count * static_cast<int64_t>(sizeof(typename E::T));
  bench.memcpy_gbps = ctx.memcpy_gbps.at(bytes);
  return bench;
}

// MPI's counts are ints (MPI-4's large-count calls are not in Debian's MPIs): a size of more
// elements is skipped on every rank alike, before any call, instead of wrapping negative.
bool fits_mpi_counts(benchmark::State& state, int64_t count) {
  if (count <= std::numeric_limits<int>::max()) return true;
  state.SkipWithError("not run: more than 2^31 - 1 elements, beyond MPI's int counts");
  return false;
}

// MPI's counts and displacements (int) of the linear uneven split.
struct Split {
  std::vector<int> counts, displacements;
  int mine = 0;
};

Split split_of(int64_t count) {
  const Context& ctx = context();
  Split split;
  int displacement = 0;
  for (int64_t rows : linear_splits(count, ctx.world)) {
    split.counts.push_back(static_cast<int>(rows));
    split.displacements.push_back(displacement);
    displacement += static_cast<int>(rows);
  }
  split.mine = split.counts[static_cast<size_t>(ctx.rank)];
  return split;
}

// Cases a peer cannot run (it would abort the whole job): the reason, or nullptr.
const char* known_defect(const Variant& variant, int64_t bytes) {
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000 && MPICH_NUMVERSION < 40100000
  // Seen with Debian's MPICH 4.0.2 at 2, 3, 4 and 8 ranks from 512 KiB up (not at 480 KiB), for
  // float32 and the bfloat16 user op alike: "Assertion failed in typerep_yaksa_pack.c: memcpy
  // argument memory ranges overlap" (the rank's block is moved to the buffer's start with memcpy).
  if (variant.op == Collective::kReduceScatterUneven && variant.in_place &&
      bytes >= (int64_t{512} << 10)) {
    return "not run: MPICH 4.0.x aborts in MPI_Reduce_scatter with MPI_IN_PLACE and uneven "
           "counts from 512 KiB (overlapping memcpy)";
  }
#else
  (void)variant;
  (void)bytes;
#endif
  return nullptr;
}

// ---- one function per op ----

template <typename E>
void all_gatherv(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count = element_count(bytes, sizeof(typename E::T), ctx.world);
  if (!fits_mpi_counts(state, count)) return;
  const Split split = split_of(count);
  const auto me = static_cast<size_t>(ctx.rank);
  std::vector<typename E::T> output(static_cast<size_t>(count), E::from(-1));
  std::vector<typename E::T> input(static_cast<size_t>(split.mine) + 1, E::from(-1));
  auto mine = [&](int64_t i) { return pattern_value(ctx.rank, i); };
  fill_pattern<E>(input, 0, static_cast<size_t>(split.mine), mine);
  if (variant.in_place) {
    fill_pattern<E>(output, static_cast<size_t>(split.displacements[me]),
                    static_cast<size_t>(split.mine), mine);
  }
  auto call = [&] {
    MPI_Allgatherv(variant.in_place ? MPI_IN_PLACE : input.data(), split.mine, E::type(),
                   output.data(), split.counts.data(), split.displacements.data(), E::type(),
                   MPI_COMM_WORLD);
  };
  auto check = [&] {
    for (int r = 0; r < ctx.world; ++r) {
      const auto index = static_cast<size_t>(r);
      if (!holds_each<E>(output, static_cast<size_t>(split.displacements[index]),
                         static_cast<size_t>(split.counts[index]),
                         [r](int64_t i) { return pattern_value(r, i); })) {
        return false;
      }
    }
    return true;
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe<E>(variant, bytes, count), call,
                check, [] {});
}

template <typename E>
void reduce_scatter(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count = element_count(bytes, sizeof(typename E::T), ctx.world);
  if (!fits_mpi_counts(state, count)) return;
  const Split split = split_of(count);
  std::vector<typename E::T> input(static_cast<size_t>(count));
  fill_pattern<E>(input, 0, input.size(), [&](int64_t i) { return pattern_value(ctx.rank, i); });
  std::vector<typename E::T> output(static_cast<size_t>(split.mine) + 1, E::from(-1));
  auto call = [&] {
    if (variant.in_place) {
      MPI_Reduce_scatter(MPI_IN_PLACE, input.data(), split.counts.data(), E::type(), E::sum(),
                         MPI_COMM_WORLD);
    } else {
      MPI_Reduce_scatter(input.data(), output.data(), split.counts.data(), E::type(), E::sum(),
                         MPI_COMM_WORLD);
    }
  };
  auto check = [&] {
    const int64_t first = split.displacements[static_cast<size_t>(ctx.rank)];
    return holds_each<E>(variant.in_place ? input : output, 0, static_cast<size_t>(split.mine),
                         [&](int64_t i) { return pattern_sum(ctx.world, first + i); });
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe<E>(variant, bytes, count), call,
                check, [&] { std::fill(input.begin(), input.end(), E::from(0)); });
}

template <typename E>
void all_reduce(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count = element_count(bytes, sizeof(typename E::T), ctx.world);
  if (!fits_mpi_counts(state, count)) return;
  std::vector<typename E::T> input(static_cast<size_t>(count));
  fill_pattern<E>(input, 0, input.size(), [&](int64_t i) { return pattern_value(ctx.rank, i); });
  std::vector<typename E::T> output(variant.in_place ? 0 : static_cast<size_t>(count));
  auto call = [&] {
    MPI_Allreduce(variant.in_place ? MPI_IN_PLACE : input.data(),
                  variant.in_place ? input.data() : output.data(), static_cast<int>(count),
                  E::type(), E::sum(), MPI_COMM_WORLD);
  };
  auto check = [&] {
    return holds_each<E>(variant.in_place ? input : output, 0, static_cast<size_t>(count),
                         [&](int64_t i) { return pattern_sum(ctx.world, i); });
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe<E>(variant, bytes, count), call,
                check, [&] { std::fill(input.begin(), input.end(), E::from(0)); });
}

template <typename E>
void bcast(benchmark::State& state, const Variant& variant, int64_t bytes) {
  Context& ctx = context();
  const int64_t count = element_count(bytes, sizeof(typename E::T), ctx.world);
  if (!fits_mpi_counts(state, count)) return;
  std::vector<typename E::T> buffer(static_cast<size_t>(count), E::from(-1));
  if (ctx.rank == 0) {
    fill_pattern<E>(buffer, 0, buffer.size(), [](int64_t i) { return pattern_value(0, i); });
  }
  auto call = [&] {
    MPI_Bcast(buffer.data(), static_cast<int>(count), E::type(), 0, MPI_COMM_WORLD);
  };
  auto check = [&] {
    return holds_each<E>(buffer, 0, static_cast<size_t>(count),
                         [](int64_t i) { return pattern_value(0, i); });
  };
  run_benchmark(state, ctx.comm, ctx.options, ctx.cutoffs, describe<E>(variant, bytes, count), call,
                check, [] {});
}

// The ops, as in shmccl_collectives_bench's table (host buffers, blocking calls).
struct OpRow {
  const char* name;  // with the dtype when the op has several
  Collective op;
  std::vector<bool> in_place;
  void (*run)(benchmark::State&, const Variant&, int64_t);
};

const std::vector<OpRow>& op_table() {
  static const std::vector<OpRow> rows = {
      {"AllGatherUneven", Collective::kAllGatherUneven, {false, true}, all_gatherv<Float32>},
      {"ReduceScatterUneven/float32",
       Collective::kReduceScatterUneven,
       {false, true},
       reduce_scatter<Float32>},
      {"ReduceScatterUneven/bfloat16",
       Collective::kReduceScatterUneven,
       {false, true},
       reduce_scatter<BFloat16>},
      {"AllReduce", Collective::kAllReduce, {false, true}, all_reduce<Float32>},
      {"Broadcast", Collective::kBroadcast, {true}, bcast<Float32>},
  };
  return rows;
}

void register_all(const Options& options, int world, int rank) {
  Context& ctx = context();
  ctx.options = options;
  ctx.world = world;
  ctx.rank = rank;
  ctx.memcpy_gbps = measure_memcpy(ctx.comm, rank, options);
  warm_up(ctx.comm);
  const std::vector<int64_t> all_sizes = sizes(options);
  for (const OpRow& row : op_table()) {
    for (bool in_place : row.in_place) {
      Variant variant{std::string("BM_") + row.name + "/host/sync" + (in_place ? "/in" : "/out"),
                      row.op, in_place};
      auto* bench = benchmark::RegisterBenchmark(
          variant.family.c_str(), [run = row.run, variant](benchmark::State& state) {
            if (const char* reason = known_defect(variant, state.range(0))) {
              state.SkipWithError(reason);
              return;
            }
            run(state, variant, state.range(0));
          });
      bench->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
      for (int64_t size : all_sizes)
        bench->Arg(size);
    }
  }
}

// How this MPI was run: its version and the settings it reads from the environment (mpirun's
// --mca flags arrive as OMPI_MCA_* variables; the launchers' own bookkeeping is left out).
void add_library_context() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string first_line(version, static_cast<size_t>(length));
  first_line = first_line.substr(0, first_line.find_first_of("\n,"));
  std::replace(first_line.begin(), first_line.end(), '\t', ' ');
  benchmark::AddCustomContext("library", SHMCCL_PEER_LIBRARY);
  benchmark::AddCustomContext("library_version", first_line);
  std::string settings;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    const std::string text = *variable;
    bool wanted = false;
    for (const char* prefix : {"OMPI_MCA_", "MPIR_CVAR_", "UCX_"})
      wanted = wanted || text.rfind(prefix, 0) == 0;
    for (const char* launcher :
         {"OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir",
          "OMPI_MCA_shmem_RUNTIME", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME"}) {
      wanted = wanted && text.rfind(launcher, 0) != 0;
    }
    if (wanted) settings += (settings.empty() ? "" : " ") + text;
  }
  benchmark::AddCustomContext("settings", settings.empty() ? "defaults" : settings);
}

}  // namespace
}  // namespace shmccl::bench

int main(int argc, char** argv) {
  using namespace shmccl::bench;
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Options options = parse_options(&argc, argv);
  keep_output_on_rank0(rank, &argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    MPI_Finalize();
    return 2;
  }
  MPI_Op_create(bf16_sum, /*commute=*/1, &g_bf16_sum);
  add_library_context();
  add_method_context(options, world);
  add_affinity_context();
  register_all(options, world, rank);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Op_free(&g_bf16_sum);
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
