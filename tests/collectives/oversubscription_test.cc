// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Whether a group runs oversubscribed (its waits yield and sleep instead of spinning, and its
// barriers let rank 0 out first) is read off the union of its ranks' affinity masks, capped by
// their cgroup's CPU limit: ranks that a launcher binds to a core each are not oversubscribed,
// ranks pinned to one core are, and so are more ranks than the cores they share, or than the CPUs
// their container may use. Every rank must reach the same verdict.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "collectives/group_state.h"
#include "multiprocess.h"
#include "page_tables.h"
#include "peer_buffers.h"
#include "transport/group_transport.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

// The CPUs this test process may use, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

void bind_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  require(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
}

// Runs `world` ranks, each bound by `bind(rank)` (or left alone when it is null) before init, and
// checks that every rank's group reads `expected` and that collectives run (a barrier, whose
// release depends on the verdict, and an all-reduce).
void expect_verdict(int world, const std::function<void(int rank)>& bind, bool expected) {
  auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
    if (bind) bind(ctx.rank);
    npu::set_device(ctx.rank % 8);
    ctx.init();
    const transport::GroupTransport& transport = default_group()->state().transport();
    require(transport.oversubscribed() == expected,
            str("rank ", ctx.rank, " reads oversubscribed = ", transport.oversubscribed()));
    require(transport.awaits_release() == (expected && ctx.rank != 0),
            str("rank ", ctx.rank, " awaits the barrier release: ", transport.awaits_release()));
    for (int i = 0; i < 20; ++i) {
      barrier();
      Tensor t = ones({8}, kInt32).npu();
      all_reduce(t);
      require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(8, ctx.world), "all_reduce");
    }
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

TEST(Oversubscription, RanksBoundToACoreEachAreNot) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  for (int world = 2; world <= std::min<int>(8, static_cast<int>(cpus.size())); world *= 2) {
    SCOPED_TRACE(str(world, " ranks"));
    expect_verdict(
        world, [&](int rank) { bind_to(cpus[static_cast<size_t>(rank)]); }, false);
  }
}

TEST(Oversubscription, RanksPinnedToOneCoreAre) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    expect_verdict(
        world, [&](int) { bind_to(cpus[0]); }, true);
  }
}

TEST(Oversubscription, MoreRanksThanTheirCoresAre) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const int world = static_cast<int>(cpus.size()) * 2;
  if (world > 64) GTEST_SKIP() << "too many CPUs for a test of 2 ranks a core";
  // Bound round-robin, two ranks a core: what a launcher binding more ranks than cores does.
  expect_verdict(
      world, [&](int rank) { bind_to(cpus[static_cast<size_t>(rank) % cpus.size()]); }, true);
  // Unbound, the same count: the scheduler shares the cores out.
  expect_verdict(world, nullptr, true);
}

TEST(Oversubscription, UnboundRanksNoMoreThanCoresAreNot) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  expect_verdict(2, nullptr, false);
}

// Oversubscribed ranks read a peer's buffer of 64 KiB-32 MiB whole the first time they resolve
// it (GroupTransport::kTouchBytes), and again after its owner decommitted it. The reads must
// leave every byte as it was: uneven all-gathers, reduce-scatters and all-reduces of such
// buffers, repeated on the same tensors with new values, then on new tensors after
// npu::empty_cache(), give the reference results at 2, 3, 4 and 8 ranks, two ranks a core.
TEST(Oversubscription, PeerBuffersTouchedOnFirstUseKeepTheirData) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  // About 128 KiB of int32 in all: the gathered, scattered-from and all-reduced buffers (and the
  // all-gather inputs that reach 64 KiB) are touched.
  constexpr int64_t kTotalRows = 32 * 1024;
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      // Two ranks share a core at the least: the group is oversubscribed wherever it runs.
      bind_to(cpus[static_cast<size_t>(ctx.rank / 2) % cpus.size()]);
      npu::set_device(ctx.rank % 8);
      ctx.init();
      require(default_group()->state().transport().oversubscribed(), "not oversubscribed");
      std::vector<int64_t> splits;
      const int64_t shares = ctx.world * (ctx.world + 1) / 2;
      for (int r = 0; r < ctx.world; ++r)
        splits.push_back((r + 1) * (kTotalRows / shares + 1));
      int64_t total = 0;
      for (int64_t rows : splits)
        total += rows;
      const int64_t mine = splits[static_cast<size_t>(ctx.rank)];
      for (int phase = 0; phase < 2; ++phase) {
        Tensor gathered = zeros({total}, kInt32).npu();
        Tensor scattered = zeros({mine}, kInt32).npu();
        for (int call = 0; call < 2; ++call) {
          const int32_t salt = phase * 100 + call * 7;
          std::vector<int32_t> input(static_cast<size_t>(mine));
          for (int64_t j = 0; j < mine; ++j)
            input[static_cast<size_t>(j)] = ctx.rank * 1000 + salt + static_cast<int32_t>(j % 13);
          all_gather_into_tensor_uneven(gathered, from_vector<int32_t>(input).npu(), splits);
          const std::vector<int32_t> got = gathered.cpu().to_vector<int32_t>();
          int64_t row = 0;
          for (int source = 0; source < ctx.world; ++source) {
            for (int64_t j = 0; j < splits[static_cast<size_t>(source)]; ++j, ++row) {
              const int32_t want = source * 1000 + salt + static_cast<int32_t>(j % 13);
              require(got[static_cast<size_t>(row)] == want,
                      str("all-gather phase ", phase, " call ", call, ": row ", row, " holds ",
                          got[static_cast<size_t>(row)], ", expected ", want));
            }
          }

          // Rank q's row k is q + salt + k % 11: rank r's output rows sum those over the ranks.
          std::vector<int32_t> rows(static_cast<size_t>(total));
          for (int64_t k = 0; k < total; ++k)
            rows[static_cast<size_t>(k)] = ctx.rank + salt + static_cast<int32_t>(k % 11);
          Tensor reduced = from_vector<int32_t>(rows).npu();
          reduce_scatter_tensor_uneven(scattered, reduced, splits);
          const std::vector<int32_t> part = scattered.cpu().to_vector<int32_t>();
          int64_t first = 0;
          for (int r = 0; r < ctx.rank; ++r)
            first += splits[static_cast<size_t>(r)];
          const int32_t rank_sum = ctx.world * (ctx.world - 1) / 2;
          for (int64_t j = 0; j < mine; ++j) {
            const int32_t want =
                rank_sum + ctx.world * (salt + static_cast<int32_t>((first + j) % 11));
            require(part[static_cast<size_t>(j)] == want,
                    str("reduce-scatter phase ", phase, " call ", call, ": row ", j, " holds ",
                        part[static_cast<size_t>(j)], ", expected ", want));
          }

          all_reduce(reduced);
          const std::vector<int32_t> sums = reduced.cpu().to_vector<int32_t>();
          for (int64_t k = 0; k < total; ++k) {
            const int32_t want = rank_sum + ctx.world * (salt + static_cast<int32_t>(k % 11));
            require(sums[static_cast<size_t>(k)] == want,
                    str("all-reduce phase ", phase, " call ", call, ": element ", k, " holds ",
                        sums[static_cast<size_t>(k)], ", expected ", want));
          }
        }
        // Every rank's segments go back to its arena and are decommitted before the next phase
        // reuses the ranges; the barrier keeps a rank from freeing while a peer still copies.
        gathered = Tensor();
        scattered = Tensor();
        barrier();
        npu::empty_cache();
        barrier();
      }
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
  }
}

// Resolves a peer's 8 KiB NPU tensor (two pages, far below GroupTransport::kPopulateBytes) on
// 2 ranks bound by `bind`, whose group must read `oversubscribed`: first for a copy of this rank
// alone, which must leave it unmapped, then for the work pool, which must leave
// `pool_mapped_pages` of its pages mapped in this rank's page table. Then the peer frees it
// (npu::empty_cache() punches the hole, which unmaps it here too) and makes a new one in the same
// place, described by the same bytes: resolving that for the work pool must map it again.
void expect_resolve_maps(const std::function<void(int rank)>& bind, bool oversubscribed,
                         int pool_mapped_pages) {
  using Copier = transport::GroupTransport::Copier;
  constexpr int64_t kElements = 1024;
  auto results = testing::run_ranks(2, [&](const testing::RankContext& ctx) {
    bind(ctx.rank);
    npu::set_device(ctx.rank);
    ctx.init();
    const transport::GroupTransport& transport = default_group()->state().transport();
    require(transport.oversubscribed() == oversubscribed,
            str("oversubscribed = ", transport.oversubscribed()));
    Tensor mine = full({kElements}, 10 + ctx.rank, kInt64).npu();
    const transport::BufferRef peer =
        testing::exchange_buffer_refs(mine)[static_cast<size_t>(1 - ctx.rank)];
    auto mapped_pages = [&](const char* values) {
      int pages = 0;
      for (uint64_t offset = 0; offset < peer.bytes; offset += 4096)
        pages += testing::page_mapped(values + offset) ? 1 : 0;
      return pages;
    };
    auto expect_value = [&](const char* values, int64_t want) {
      int64_t first = 0;
      std::memcpy(&first, values, sizeof(first));
      require(first == want, str("the peer's tensor reads ", first, ", expected ", want));
    };
    const char* values = transport.resolve(peer, peer.bytes, sizeof(int64_t), Copier::kThisRank);
    require(mapped_pages(values) == 0,
            str("resolve() for this rank alone left ", mapped_pages(values),
                " of the peer tensor's 2 pages mapped"));
    values = transport.resolve(peer, peer.bytes, sizeof(int64_t), Copier::kWorkPool);
    require(mapped_pages(values) == pool_mapped_pages,
            str("resolve() for the work pool left ", mapped_pages(values),
                " of the peer tensor's 2 pages mapped, expected ", pool_mapped_pages));
    expect_value(values, 11 - ctx.rank);

    barrier();  // both ranks have read before either frees its tensor
    mine = Tensor();
    npu::empty_cache();
    barrier();
    mine = full({kElements}, 20 + ctx.rank, kInt64).npu();
    const transport::BufferRef again =
        testing::exchange_buffer_refs(mine)[static_cast<size_t>(1 - ctx.rank)];
    require(std::memcmp(&again, &peer, sizeof(peer)) == 0,
            "the peer's new tensor is not described as the old one (the arena placed it "
            "elsewhere): this test needs the same place");
    require(mapped_pages(values) == 0, "the peer's hole punch left its old pages mapped here");
    values = transport.resolve(again, again.bytes, sizeof(int64_t), Copier::kWorkPool);
    require(
        mapped_pages(values) == pool_mapped_pages,
        str("resolve() for the work pool after the owner's decommit left ", mapped_pages(values),
            " of the new tensor's 2 pages mapped, expected ", pool_mapped_pages));
    expect_value(values, 21 - ctx.rank);
    barrier();
  });
  EXPECT_TRUE(testing::all_ranks_succeeded(results));
}

// Oversubscribed ranks share the work pool's pieces out anew at every call, so a small peer
// buffer meets a new writer call after call; resolve() maps it whole at once (in a PVM guest a
// chunk whose pages were cold took ~45 us instead of 2). Ranks with a core each copy the same
// pieces every call, and a rank that copies a buffer alone (a pull) copies all of it every call:
// they fault in the few pages themselves, with no system call per resolve.
TEST(Oversubscription, TheWorkPoolMapsASmallPeerBufferWholeOnlyWhenOversubscribed) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  expect_resolve_maps([&](int) { bind_to(cpus[0]); }, true, 2);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs for ranks with a core each";
  expect_resolve_maps([&](int rank) { bind_to(cpus[static_cast<size_t>(rank)]); }, false, 0);
}

// A sub-group whose own ranks fit their cores still runs oversubscribed when the job's ranks
// outnumber them: the job's other ranks need the cores its waits would spin on. A sub-group of a
// job that fits stays fast.
TEST(Oversubscription, SubGroupsTakeTheJobsVerdict) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  for (const int world : {2, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks on two cores"));
    const bool expected = world > 2;
    auto results = testing::run_ranks(world, [&](const testing::RankContext& ctx) {
      bind_to(cpus[static_cast<size_t>(ctx.rank % 2)]);  // ranks 0 and 1 on different cores
      npu::set_device(ctx.rank % 8);
      ctx.init();
      require(default_group()->state().transport().oversubscribed() == expected,
              str("rank ", ctx.rank, ": the job reads oversubscribed = ", !expected));
      ProcessGroupPtr pair = new_group({0, 1});
      if (ctx.rank > 1) {
        require(!pair->is_member() && pair->rank() == -1, "a non-member got a group");
        return;
      }
      const transport::GroupTransport& transport = pair->state().transport();
      require(
          transport.oversubscribed() == expected,
          str("rank ", ctx.rank, ": the pair reads oversubscribed = ", transport.oversubscribed()));
      require(transport.awaits_release() == (expected && ctx.rank != 0),
              str("rank ", ctx.rank,
                  " awaits the pair's barrier release: ", transport.awaits_release()));
      for (int i = 0; i < 20; ++i) {
        barrier(pair);
        Tensor t = ones({8}, kInt32).npu();
        all_reduce(t, ReduceOp::SUM, pair);
        require(t.cpu().to_vector<int32_t>() == std::vector<int32_t>(8, 2), "all_reduce");
      }
    });
    EXPECT_TRUE(testing::all_ranks_succeeded(results));
  }
}

// A cgroup of this machine's cpu controller, limited to `cpus` CPUs, made for a test and removed
// after it; not usable where we may not make one (not root, no writable cgroup file system).
class CpuLimitedCgroup {
 public:
  explicit CpuLimitedCgroup(int cpus) {
    const std::string name = "/shmccl-test-" + std::to_string(getpid());
    // v1's cpu hierarchy where the host has one, else v2's (the root's, which enables cpu).
    for (const char* v1 : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
      if (make(v1 + name) && put("cpu.cfs_period_us", "100000") &&
          put("cpu.cfs_quota_us", std::to_string(cpus * 100000))) {
        return;
      }
      remove();
    }
    if (make("/sys/fs/cgroup" + name) && put("cpu.max", std::to_string(cpus * 100000) + " 100000"))
      return;
    remove();
  }
  ~CpuLimitedCgroup() { remove(); }
  bool usable() const { return !directory_.empty(); }
  // Moves the calling process into the cgroup.
  void join() const { require(put("cgroup.procs", "0"), "joining " + directory_); }

 private:
  bool make(const std::string& directory) {
    if (::mkdir(directory.c_str(), 0755) != 0) return false;
    directory_ = directory;
    return true;
  }
  bool put(const std::string& file, const std::string& value) const {
    std::ofstream out(directory_ + "/" + file);
    out << value << std::flush;
    return static_cast<bool>(out);
  }
  void remove() {
    if (!directory_.empty()) ::rmdir(directory_.c_str());  // empty once its ranks exited
    directory_.clear();
  }
  std::string directory_;
};

// Two ranks bound to a core each, in a container allowed one CPU: they run oversubscribed (they
// spun before and, where the limit throttles, stalled each other for the rest of the period).
TEST(Oversubscription, RanksThatTheirCgroupLimitsToFewerCpusAre) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  CpuLimitedCgroup one_cpu(1);
  if (!one_cpu.usable()) GTEST_SKIP() << "cannot make a cgroup with a CPU limit here";
  expect_verdict(
      2,
      [&](int rank) {
        one_cpu.join();
        bind_to(cpus[static_cast<size_t>(rank)]);
      },
      true);
}

}  // namespace
}  // namespace shmccl
