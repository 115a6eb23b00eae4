// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Correctness of every collective over real processes and shared memory, at 1, 2, 3, 4 and 8
// ranks: random uneven splits (zeros included), every dtype and reduce op, host and NPU tensors,
// sync and async, in place, both the inline (small) and the work-pool (large) paths.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "collectives/reference.h"
#include "core/config.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::kAllOps;
using testing::kAllTypes;
using testing::make_input;
using testing::random_splits;
using testing::require;
using testing::require_close;
using testing::str;

int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (int64_t v : values)
    total += v;
  return total;
}

// Small chunks make the work pool split even modest tensors into many pieces; a small inline
// limit sends all but the smallest collectives through the pool.
void use_small_chunks() {
  setenv("SHMCCL_CHUNK_BYTES", "4096", 1);
  setenv("SHMCCL_INLINE_BYTES", "1024", 1);
  config::reload();
}

Device place(bool on_npu) {
  return on_npu ? Device::npu(npu::current_device()) : Device::cpu();
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, AllGatherUneven) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    int salt = 0;
    for (int64_t max_rows : {3, 1500}) {  // inline path and work-pool path
      for (ScalarType dtype : kAllTypes) {
        for (int mode = 0; mode < 4; ++mode) {  // bit 0: NPU tensors, bit 1: async
          ++salt;
          const bool on_npu = mode & 1;
          const bool async = mode & 2;
          const auto splits = random_splits(ctx.world, salt * 31 + max_rows, max_rows);
          const int64_t cols = 12;
          Tensor input = make_input(ReduceOp::SUM, dtype, ctx.rank, {splits[ctx.rank], cols}, salt)
                             .to(place(on_npu));
          Tensor output = zeros({sum(splits), cols}, dtype, place(on_npu));
          auto work = all_gather_into_tensor_uneven(output, input, splits, nullptr, async);
          require(work->wait(), "wait");
          std::vector<Tensor> pieces;
          int64_t row = 0;
          for (int r = 0; r < ctx.world; ++r) {
            Tensor expected = make_input(ReduceOp::SUM, dtype, r, {splits[r], cols}, salt);
            require_close(
                output.narrow(0, row, splits[r]), expected,
                str("all_gather uneven dtype ", dtype, " mode ", mode, " rows of rank ", r));
            row += splits[r];
          }
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, ReduceScatterUnevenEveryOpAndDtype) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    int salt = 0;
    for (int64_t max_rows : {2, 1000}) {
      for (ScalarType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (dtype == kBool && op == ReduceOp::AVG) continue;
          ++salt;
          const bool on_npu = salt % 2 == 0;
          const bool async = salt % 3 == 0;
          const auto splits = random_splits(ctx.world, salt * 17 + max_rows, max_rows);
          const int64_t cols = 5;
          const int64_t total = sum(splits);
          Tensor input = make_input(op, dtype, ctx.rank, {total, cols}, salt).to(place(on_npu));
          Tensor output = zeros({splits[ctx.rank], cols}, dtype, place(on_npu));
          auto work = reduce_scatter_tensor_uneven(output, input, splits, op, nullptr, async);
          work->wait();
          // Expected: element-wise reduction of every rank's rows for this rank.
          int64_t first_row = 0;
          for (int r = 0; r < ctx.rank; ++r)
            first_row += splits[r];
          std::vector<double> expected(static_cast<size_t>(splits[ctx.rank] * cols));
          for (size_t e = 0; e < expected.size(); ++e) {
            std::vector<double> values;
            for (int r = 0; r < ctx.world; ++r) {
              values.push_back(testing::input_value(op, dtype, r, first_row * cols + e, salt));
            }
            expected[e] = testing::reduce_values(op, dtype, values);
          }
          require_close(output, from_vector<double>(expected, {splits[ctx.rank], cols}).to(dtype),
                        str("reduce_scatter dtype ", dtype, " op ", op, " splits ", splits.size()));
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, AllReduceBroadcastBarrier) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    int salt = 0;
    for (int64_t numel : {1, 37, 20000}) {
      for (ScalarType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (dtype == kBool && op == ReduceOp::AVG) continue;  // refused, as torch refuses it
          ++salt;
          const bool on_npu = salt % 2 == 1;
          Tensor tensor = make_input(op, dtype, ctx.rank, {numel}, salt).to(place(on_npu));
          all_reduce(tensor, op, nullptr, salt % 3 == 0)->wait();
          std::vector<double> expected(static_cast<size_t>(numel));
          for (int64_t e = 0; e < numel; ++e) {
            std::vector<double> values;
            for (int r = 0; r < ctx.world; ++r) {
              values.push_back(testing::input_value(op, dtype, r, e, salt));
            }
            expected[static_cast<size_t>(e)] = testing::reduce_values(op, dtype, values);
          }
          require_close(tensor, from_vector<double>(expected).to(dtype),
                        str("all_reduce dtype ", dtype, " op ", op, " numel ", numel));
        }
        const int root = salt % ctx.world;
        Tensor data =
            make_input(ReduceOp::SUM, dtype, ctx.rank, {numel}, salt).to(place(salt % 2 == 0));
        broadcast(data, root);
        require_close(data, make_input(ReduceOp::SUM, dtype, root, {numel}, salt),
                      str("broadcast from ", root));
      }
    }
    for (int i = 0; i < 20; ++i)
      barrier();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// No rank leaves a barrier before every rank entered it, synchronous or asynchronous (waited),
// and on the default group or a sub-group. Each round one rank holds back: it looks, for 20 ms,
// whether anyone already passed the barrier it has not entered (a barrier that does not
// synchronise lets them through at once), and every rank checks the arrival count when it leaves.
TEST_P(CollectivesTest, BarrierHoldsEveryRankUntilAllArrive) {
  const int world = GetParam();
  constexpr int kRounds = 8;
  struct Counters {
    std::atomic<int> arrived[kRounds];
    std::atomic<int> passed[kRounds];
  };
  void* memory =
      mmap(nullptr, sizeof(Counters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* counters = new (memory) Counters{};
  auto results = testing::run_ranks(world, [counters](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    // Even ranks form a sub-group (every rank creates it; odd ranks get a non-member).
    std::vector<int> evens;
    for (int r = 0; r < ctx.world; r += 2)
      evens.push_back(r);
    ProcessGroupPtr even_group = new_group(evens);
    for (int round = 0; round < kRounds; ++round) {
      const bool on_sub_group = round % 4 == 3;
      if (on_sub_group && !even_group->is_member()) continue;
      const int members = on_sub_group ? static_cast<int>(evens.size()) : ctx.world;
      const int holder =
          on_sub_group ? evens[static_cast<size_t>(round) % evens.size()] : round % ctx.world;
      if (ctx.rank == holder) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
        while (std::chrono::steady_clock::now() < until) {
          require(counters->passed[round].load() == 0,
                  str("round ", round, ": a rank left the barrier before rank ", holder,
                      " entered it"));
          std::this_thread::yield();
        }
      }
      counters->arrived[round].fetch_add(1);
      const ProcessGroupPtr group = on_sub_group ? even_group : nullptr;
      if (round % 2 == 1) {
        barrier(group, /*async_op=*/true)->wait();
      } else {
        barrier(group);
      }
      counters->passed[round].fetch_add(1);
      require(counters->arrived[round].load() == members,
              str("round ", round, ": rank ", ctx.rank, " left the barrier when ",
                  counters->arrived[round].load(), " of ", members, " ranks had entered it"));
    }
  });
  munmap(memory, sizeof(Counters));
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, EvenFormsConcatStackAndList) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    const int n = ctx.world;
    for (int64_t rows : {2, 900}) {
      Tensor input = (arange(rows * 3, kInt64).reshape({rows, 3}) +
                      full({rows, 3}, static_cast<double>(ctx.rank * rows * 3), kInt64))
                         .npu();
      Tensor expected = arange(n * rows * 3, kInt64);
      Tensor concat = zeros({n * rows, 3}, kInt64).npu();
      all_gather_into_tensor(concat, input);
      require_close(concat, expected.reshape({n * rows, 3}), "concat form");
      Tensor stack = zeros({n, rows, 3}, kInt64).npu();
      all_gather_into_tensor(stack, input);
      require_close(stack, expected.reshape({n, rows, 3}), "stack form");
      // Any shape of N times the input's elements, as torch and oneflow take it: oneflow's own
      // "stack" example gathers (2, 3) inputs into (2, 3, 2); a flat output too.
      Tensor other_shape = zeros({n, 3, rows}, kInt64).npu();
      all_gather_into_tensor(other_shape, input);
      require_close(other_shape, expected.reshape({n, 3, rows}), "an output of another shape");
      Tensor flat = zeros({n * rows * 3}, kInt64).npu();
      all_gather_into_tensor(flat, input);
      require_close(flat, expected, "a flat output");

      // The list form with per-rank sizes that differ: rank r contributes r + 1 rows.
      Tensor mine = full({ctx.rank + 1, 2}, ctx.rank, kFloat32);
      std::vector<Tensor> outputs;
      for (int r = 0; r < n; ++r)
        outputs.push_back(zeros({r + 1, 2}, kFloat32));
      all_gather(outputs, mine);
      for (int r = 0; r < n; ++r)
        require_close(outputs[r], full({r + 1, 2}, r, kFloat32), "list");
      // Shapes that differ beyond dim 0 (token rows [1, L_r]): each rank's block is its
      // elements, in order.
      Tensor tokens = (arange(ctx.rank + 3, kInt32) + full({ctx.rank + 3}, 100 * ctx.rank, kInt32))
                          .reshape({1, ctx.rank + 3})
                          .npu();
      std::vector<Tensor> token_rows;
      for (int r = 0; r < n; ++r)
        token_rows.push_back(zeros({1, r + 3}, kInt32).npu());
      all_gather(token_rows, tokens);
      for (int r = 0; r < n; ++r) {
        require_close(token_rows[r],
                      (arange(r + 3, kInt32) + full({r + 3}, 100 * r, kInt32)).reshape({1, r + 3}),
                      str("list of [1, L_r] rows, rank ", r));
      }

      // Every element of every rank's input differs, so rows taken from the wrong rank's chunk
      // or in the wrong order differ from the reference.
      for (bool in_place : {false, true}) {
        const int salt = static_cast<int>(rows) + in_place;
        Tensor reduce_input =
            make_input(ReduceOp::SUM, kFloat32, ctx.rank, {n * rows, 3}, salt).to(place(rows == 2));
        Tensor reduce_output = in_place ? reduce_input.narrow(0, ctx.rank * rows, rows)
                                        : zeros({rows, 3}, kFloat32, place(rows != 2));
        reduce_scatter_tensor(reduce_output, reduce_input);
        std::vector<double> expected;
        for (int64_t e = ctx.rank * rows * 3; e < (ctx.rank + 1) * rows * 3; ++e) {
          std::vector<double> values;
          for (int r = 0; r < n; ++r)
            values.push_back(testing::input_value(ReduceOp::SUM, kFloat32, r, e, salt));
          expected.push_back(testing::reduce_values(ReduceOp::SUM, kFloat32, values));
        }
        require_close(reduce_output, from_vector<double>(expected, {rows, 3}).to(kFloat32),
                      str("reduce_scatter_tensor", in_place ? " in place" : ""));
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// float16 and bfloat16 reduce in float32 and round once. Rank 0 holds a value whose spacing in the
// type is 2 (2048 in float16, 256 in bfloat16) and every other rank 1: a sum rounded rank by rank
// stays at rank 0's value (each +1 is a tie that rounds to even), the float32 sum is exact and
// rounds once. From 3 ranks up the two differ. Inline and work pool, NPU and host tensors.
TEST_P(CollectivesTest, HalfPrecisionReducesInFloat32AndRoundsOnce) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    for (ScalarType dtype : {kFloat16, kBFloat16}) {
      const double big = dtype == kFloat16 ? 2048 : 256;
      const double mine = ctx.rank == 0 ? big : 1;
      const double sum = big + (ctx.world - 1);
      for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG}) {
        // The exact float32 result, rounded to the type once (its conversion is tested against
        // an independent reference in core/half_test).
        const double exact = op == ReduceOp::SUM ? sum : sum / ctx.world;
        const double rounded = full({1}, exact, kFloat64).to(dtype).to(kFloat64).item<double>();
        // Exactly: the two roundings differ by one or two units, inside require_close's 1e-2.
        auto require_rounded_once = [&](const Tensor& result, const std::string& what) {
          for (double value : result.cpu().to(kFloat64).to_vector<double>()) {
            require(value == rounded,
                    str(what, ": ", value, ", expected ", rounded, " (", exact, " rounded once)"));
          }
        };
        for (int64_t numel : {int64_t{8}, int64_t{20000}}) {
          for (bool on_npu : {true, false}) {
            const std::string what =
                str(dtype, " ", op, " numel ", numel, on_npu ? " npu" : " host");
            Tensor tensor = full({numel}, mine, dtype, place(on_npu));
            all_reduce(tensor, op);
            require_rounded_once(tensor, "all_reduce " + what);
            Tensor input = full({ctx.world * numel}, mine, dtype, place(on_npu));
            Tensor output = zeros({numel}, dtype, place(on_npu));
            reduce_scatter_tensor(output, input, op);
            require_rounded_once(output, "reduce_scatter " + what);
          }
        }
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, InPlaceForms) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    for (bool on_npu : {true, false}) {
      for (int64_t max_rows : {3, 9000}) {
        const auto splits = random_splits(ctx.world, max_rows + on_npu, max_rows);
        int64_t first = 0;
        for (int r = 0; r < ctx.rank; ++r)
          first += splits[r];
        // All-gather with the input being this rank's rows of the output.
        Tensor output = zeros({sum(splits)}, kFloat32, place(on_npu));
        Tensor slice = output.narrow(0, first, splits[ctx.rank]);
        slice.fill_(ctx.rank + 1);
        all_gather_into_tensor_uneven(output, slice, splits);
        int64_t row = 0;
        for (int r = 0; r < ctx.world; ++r) {
          require_close(output.narrow(0, row, splits[r]), full({splits[r]}, r + 1, kFloat32),
                        "in-place all_gather");
          row += splits[r];
        }
        // Reduce-scatter with the output being this rank's rows of the input.
        Tensor input = full({sum(splits)}, 2, kFloat32, place(on_npu));
        Tensor mine = input.narrow(0, first, splits[ctx.rank]);
        reduce_scatter_tensor_uneven(mine, input, splits);
        require_close(mine, full({splits[ctx.rank]}, 2 * ctx.world, kFloat32), "in-place rs");
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, ManyAsyncInFlightCompleteInOrder) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    constexpr int kInFlight = 32;
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < kInFlight; ++i) {
      tensors.push_back(full({(i % 4) * 3000 + 1}, i + ctx.rank, kFloat32).npu());
      works.push_back(all_reduce(tensors.back(), ReduceOp::SUM, nullptr, /*async_op=*/true));
    }
    // Completion in order: at any moment the completed works are a prefix. Read from the last to
    // the first: a work seen completed was completed before every earlier one was read, and those
    // must be complete by then.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (bool last_done = false; !last_done;) {
      require(std::chrono::steady_clock::now() < deadline, "the works did not complete in 60 s");
      int seen_completed = -1;
      for (int i = kInFlight - 1; i >= 0; --i) {
        const bool completed = works[i]->is_completed();
        if (completed && seen_completed < 0) seen_completed = i;
        require(completed || seen_completed < 0,
                str("work ", seen_completed, " completed before work ", i));
      }
      last_done = seen_completed == kInFlight - 1;
      std::this_thread::yield();
    }
    for (int i = 0; i < kInFlight; ++i)
      require(works[i]->wait(std::chrono::milliseconds(0)), str("work ", i));
    for (int i = 0; i < kInFlight; ++i) {
      require(works[i]->is_success(), "success");
      const double expected = ctx.world * i + ctx.world * (ctx.world - 1) / 2.0;
      require_close(tensors[i], full({(i % 4) * 3000 + 1}, expected, kFloat32), str("op ", i));
    }
    // A finished work keeps no reference to its tensors: dropping them frees their memory.
    const uint64_t allocated = npu::memory_allocated();
    uint64_t tensor_bytes = 0;
    for (const Tensor& tensor : tensors)
      tensor_bytes += tensor.nbytes();
    tensors.clear();
    require(npu::memory_allocated() + tensor_bytes <= allocated,
            str("works kept after they finished hold their tensors: ", npu::memory_allocated(),
                " of ", allocated, " bytes still allocated"));
    // Work::synchronize orders the current stream after the collective.
    Tensor t = ones({50000}, kFloat32).npu();
    auto work = all_reduce(t, ReduceOp::SUM, nullptr, true);
    work->synchronize();
    Tensor doubled = t + t;
    require_close(doubled, full({50000}, 2.0 * ctx.world, kFloat32), "synchronize");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// Work::wait without a timeout runs a collective no one has started on the waiting thread,
// with the ones queued before it (stream order). Waited out of order, from another thread whose
// current device differs, host and NPU tensors alike (a host tensor's staging buffers belong to
// the stream's device): every result is right.
TEST_P(CollectivesTest, AsyncWorksWaitedOutOfOrderFromAnotherThread) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    use_small_chunks();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    constexpr int kCalls = 12;
    for (int round = 0; round < 3; ++round) {
      std::vector<Tensor> tensors;
      std::vector<std::shared_ptr<Work>> works;
      for (int i = 0; i < kCalls; ++i) {
        const int64_t rows = (i % 3 == 0) ? 2000 : 5;  // work-pool and inline paths
        Tensor t = full({rows}, i + ctx.rank, kInt64);
        tensors.push_back(i % 2 ? t.npu() : t);
        works.push_back(all_reduce(tensors.back(), ReduceOp::SUM, nullptr, /*async_op=*/true));
      }
      std::thread waiter([&] {
        npu::set_device((ctx.rank + 1) % npu::device_count());
        works[kCalls / 2]->wait();  // runs the first half in order if no one started them
        works[kCalls - 1]->wait();
      });
      waiter.join();
      for (int i = kCalls - 1; i >= 0; --i) {
        require(works[i]->wait(std::chrono::milliseconds(0)), str("work ", i, " done"));
        const int64_t expected = int64_t{ctx.world} * i + ctx.world * (ctx.world - 1) / 2;
        require_close(tensors[i].cpu(), full({tensors[i].size(0)}, expected, kInt64),
                      str("round ", round, " call ", i));
      }
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// While helped waits make the group's stream thread poll instead of being woken (here once an
// hour), a call waited otherwise must still start at once: polled with is_completed(), waited
// with a timeout (which never runs it on the caller), or ordered before the caller's stream.
TEST_P(CollectivesTest, AsyncWorksPolledOrWaitedWithATimeoutStartAtOnce) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    setenv("SHMCCL_HELPED_POLL_TIME", "1h", 1);
    config::reload();
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto expect_sum = [&](const Tensor& t, int64_t base, const std::string& what) {
      const int64_t expected = int64_t{ctx.world} * base + ctx.world * (ctx.world - 1) / 2;
      require_close(t.cpu(), full({t.size(0)}, expected, kInt64), what);
    };
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < 3; ++i) {  // helped waits (mostly): the stream's thread polls
        Tensor t = full({8}, 10 + ctx.rank, kInt64).npu();
        all_reduce(t, ReduceOp::SUM, nullptr, /*async_op=*/true)->wait();
        expect_sum(t, 10, str("helped wait, round ", round));
      }
      Tensor polled = full({8}, 20 + ctx.rank, kInt64).npu();
      auto work = all_reduce(polled, ReduceOp::SUM, nullptr, /*async_op=*/true);
      while (!work->is_completed()) {
        require(std::chrono::steady_clock::now() < deadline, "the polled call never finished");
        std::this_thread::yield();
      }
      expect_sum(polled, 20, str("polled, round ", round));

      Tensor timed = full({8}, 30 + ctx.rank, kInt64).npu();
      require(all_reduce(timed, ReduceOp::SUM, nullptr, true)->wait(std::chrono::seconds(60)),
              "the call waited with a timeout never finished");
      expect_sum(timed, 30, str("waited with a timeout, round ", round));

      Tensor ordered = full({8}, 40 + ctx.rank, kInt64).npu();
      all_reduce(ordered, ReduceOp::SUM, nullptr, true)->synchronize();
      npu::Event after;
      after.record();  // on the current stream, behind its wait for the collective
      while (!after.query()) {
        require(std::chrono::steady_clock::now() < deadline, "the ordered call never finished");
        std::this_thread::yield();
      }
      expect_sum(ordered, 40, str("stream-ordered, round ", round));
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// A collective starts only after the work already queued on the caller's current stream (as
// with NCCL): here a fill held back behind a gate. Asynchronous: the call must not complete
// while the gate is shut. Synchronous: the call blocks until another thread opens it.
// Stream-ordered: Work::synchronize(), called while the gate holds the collective back, makes
// the work queued afterwards on the caller's stream (a doubling) wait for its result.
TEST_P(CollectivesTest, CollectivesStartAfterWorkQueuedOnTheCallersStream) {
  const int world = GetParam();
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    const int device = ctx.rank % npu::device_count();
    npu::set_device(device);
    ctx.init();
    npu::detail::StreamImpl& stream = device::current_stream_impl(device);
    const int64_t expected = int64_t{ctx.world} * (ctx.world + 1) / 2;
    for (bool async : {true, false}) {
      std::promise<void> gate;
      std::shared_future<void> opened = gate.get_future().share();
      Tensor tensor = zeros({16}, kInt64).npu();
      stream.enqueue([opened] { opened.wait(); });
      tensor.fill_(ctx.rank + 1);  // queued behind the gate
      if (async) {
        auto work = all_reduce(tensor, ReduceOp::SUM, nullptr, /*async_op=*/true);
        // The ranks left init_process_group together: within the probe every rank has queued
        // its call, which would complete if it did not wait for the fill (and the fill would
        // then overwrite its result).
        const auto probe_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        while (std::chrono::steady_clock::now() < probe_end) {
          require(!work->is_completed(), "the collective completed before the queued fill");
          std::this_thread::yield();
        }
        gate.set_value();
        work->wait();
      } else {
        // Opens the gate once the synchronous call has queued behind the fill (gate, fill, call).
        std::atomic<bool> queued{true};
        std::thread opener([&] {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (stream.pending() < 3 && queued) {
            queued = std::chrono::steady_clock::now() < deadline;
            std::this_thread::yield();
          }
          gate.set_value();
        });
        all_reduce(tensor);
        opener.join();
        require(queued, "the synchronous call never queued behind the fill");
      }
      require_close(tensor.cpu(), full({16}, expected, kInt64), async ? "async" : "sync");
    }
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    Tensor tensor = zeros({16}, kInt64).npu();
    stream.enqueue([opened] { opened.wait(); });
    tensor.fill_(ctx.rank + 1);
    auto work = all_reduce(tensor, ReduceOp::SUM, nullptr, /*async_op=*/true);
    work->synchronize();
    require(!work->is_completed(), "the collective completed before the queued fill");
    Tensor doubled = tensor + tensor;  // queued behind the wait for the collective
    gate.set_value();
    require_close(doubled.cpu(), full({16}, 2 * expected, kInt64), "stream-ordered");
    require(work->wait(std::chrono::milliseconds(0)), "synchronized work done");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST_P(CollectivesTest, SubGroupsLiveTogether) {
  const int world = GetParam();
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  auto results = testing::run_ranks(world, [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    std::vector<int> evens, odds;
    for (int r = 0; r < ctx.world; ++r)
      (r % 2 ? odds : evens).push_back(r);
    auto even_group = new_group(evens);
    auto odd_group = new_group(odds);
    auto mine = ctx.rank % 2 ? odd_group : even_group;
    require(mine->is_member(), "member of its group");
    require(!(ctx.rank % 2 ? even_group : odd_group)->is_member(), "not a member of the other");
    require(group_from_comm_name(mine->comm_name()) == mine, "comm_name resolves");
    // As torch's NON_GROUP_MEMBER: every rank may call both groups' collectives, and those of the
    // group it is not in do nothing (they must not join the default group's next call).
    const ProcessGroupPtr other = ctx.rank % 2 ? even_group : odd_group;
    require(get_rank(other) == -1 && get_world_size(other) == -1, "a non-member's rank and size");
    for (int i = 0; i < 5; ++i) {
      Tensor untouched = full({10000}, -7, kInt64).npu();
      Tensor gathered = zeros({10000}, kInt64).npu();
      all_reduce(untouched, ReduceOp::SUM, other);
      broadcast(untouched, other->global_ranks().front(), other);
      all_gather_into_tensor(gathered, untouched, other, /*async_op=*/true)->wait();
      barrier(other);
      require_close(untouched, full({10000}, -7, kInt64), "a non-member's collectives do nothing");
      require_close(gathered, zeros({10000}, kInt64), "a non-member's all_gather does nothing");
      Tensor t = full({10000}, ctx.rank, kInt64).npu();
      all_reduce(t, ReduceOp::SUM, mine);
      int64_t expected = 0;
      for (int r : (ctx.rank % 2 ? odds : evens))
        expected += r;
      require_close(t, full({10000}, expected, kInt64), "sub-group all_reduce");
      Tensor w = ones({3}, kInt32).npu();
      all_reduce(w);  // the default group, interleaved
      require_close(w, full({3}, ctx.world, kInt32), "world all_reduce");
    }
    Tensor b = full({4}, ctx.rank, kInt32).npu();
    const int root = ctx.rank % 2 ? odds.back() : evens.back();
    broadcast(b, root, mine);
    require_close(b, full({4}, root, kInt32), "broadcast with a global src in a sub-group");
    // The method takes a rank of the group (c10d's rootRank): the same root, by its group rank.
    Tensor c = full({4}, ctx.rank, kInt32).npu();
    mine->broadcast(c, mine->size() - 1);
    require_close(c, full({4}, root, kInt32), "the method's broadcast with a group src");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// new_group() (torch's ranks=None): every rank, in a group of its own. Its async all-reduce is
// in flight while the default group runs one, so the two must not share a control block.
TEST_P(CollectivesTest, NewGroupWithoutRanksHoldsEveryRank) {
  auto results = testing::run_ranks(GetParam(), [](const testing::RankContext& ctx) {
    npu::set_device(ctx.rank % npu::device_count());
    ctx.init();
    const ProcessGroupPtr everyone = new_group();
    require(everyone->is_member() && everyone->size() == ctx.world && everyone->rank() == ctx.rank,
            str("new_group(): rank ", everyone->rank(), " of ", everyone->size()));
    require(everyone != default_group() && everyone->comm_name() != default_group()->comm_name(),
            "new_group() is a group of its own");
    require(group_from_comm_name(everyone->comm_name()) == everyone, "its comm_name resolves");
    Tensor mine = full({8}, ctx.rank + 1, kInt64).npu();
    Tensor other = full({8}, 10 * (ctx.rank + 1), kInt64).npu();
    std::shared_ptr<Work> work = everyone->all_reduce(mine, ReduceOp::SUM, /*async_op=*/true);
    all_reduce(other);
    work->wait();
    const int64_t sum = ctx.world * (ctx.world + 1) / 2;
    require(mine.cpu().to_vector<int64_t>() == std::vector<int64_t>(8, sum), "its all_reduce");
    require(other.cpu().to_vector<int64_t>() == std::vector<int64_t>(8, 10 * sum),
            "the default group's all_reduce meanwhile");
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace shmccl
