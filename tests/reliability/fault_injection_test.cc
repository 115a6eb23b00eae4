// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The fault-injection suite: one rank is killed, stalled or made to exit at every injection point
// (SHMCCL_FAULT, collectives/fault_injection.h) at 2, 4 and 8 ranks, and the survivors must fail
// with a shmccl::Error that names it: within a second of a death (pidfd, not a timeout), or after
// the group's timeout, naming the late rank and the collective's sequence number, for a stall.
// They must also write their flight recorder, and nothing may be left in /dev/shm. Then a
// randomized run: SHMCCL_FAULT_TRIALS trials (default 12) of a random op, size, point, action
// and victim, from SHMCCL_FAULT_SEED (default 1; printed, to replay a failure).
//
// Each survivor reports the moment its error arrived through a shared page; the harness reports
// when it saw the victim end (its pidfd). The latencies are printed as "[detect] ..." lines.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <sstream>

#include "collectives/fault_injection.h"
#include "core/config.h"
#include "core/logging.h"
#include "core/memory_order.h"
#include "multiprocess.h"
#include "reliability/random_collective.h"

namespace shmccl {
namespace {

using collectives::fault::Action;
using collectives::fault::Point;
using testing::require;
using testing::str;

// Detection must take about a millisecond; the bound leaves room for a loaded 2-core machine
// (and sanitizers). The measured figures are printed.
constexpr double kDeathBoundSeconds = 3.0;
// Under ThreadSanitizer a victim's _exit runs TSan's finalization, which in a forked child with
// threads took over a second: a 1 s group timeout then fired before the death was visible.
constexpr auto kStallTimeout = std::chrono::milliseconds(detail::kThreadSanitizer ? 5000 : 1000);

struct Trial {
  int world = 2;
  Point point = Point::kBeforeArrival;
  Action action = Action::kKill;
  int victim = 1;
  uint64_t sequence = 3;  // the faulty collective (group creation number for kRendezvous)
  testing::OpSpec op;     // the collective every rank calls repeatedly (kBarrier for kBarrier)
  // When set: the survivors must fail in the faulty collective itself, with this text.
  std::string survivors_fail_at_fault_with;
  bool one_cpu = false;  // every rank on one CPU (testing::run_on_one_cpu)
  std::string describe() const {
    return str(world, " ranks, ", collectives::fault::action_name(action), " at ",
               collectives::fault::point_name(point), " of rank ", victim, ", sequence ", sequence,
               ", ", op.describe());
  }
};

// What each rank reports back through memory shared with the test process.
struct Report {
  int64_t error_at_ns;    // steady clock, when the error reached the rank (0: none)
  int64_t call_start_ns;  // when the failing call began
  int64_t failed_sequence;
  int64_t fault_reached;  // the victim: 1 once it reached the trial's point at its sequence
};

// The victim's fault hook (a plain function: the hook takes no captures) marks its report when it
// reaches the trial's point at the trial's sequence, just before SHMCCL_FAULT's action runs: the
// fault fired where the trial asked for it.
Report* g_victim_report = nullptr;
Point g_fault_point = Point::kBeforeArrival;
uint64_t g_fault_sequence = 0;

void mark_fault_reached(Point point, uint64_t sequence) {
  const Point expected = g_fault_point == Point::kBarrier ? Point::kBeforeArrival : g_fault_point;
  if (g_victim_report != nullptr && point == expected && sequence == g_fault_sequence)
    __atomic_store_n(&g_victim_report->fault_reached, 1, __ATOMIC_SEQ_CST);
}

// Whether some "ranks 1, 2, 3 have" or "rank 1 has" in `text` names `rank` (a rank that finished
// early may wait for the victim and for survivors still stuck with it).
bool lists_rank(const std::string& text, int rank) {
  for (const char* verb : {" has ", ", which has "}) {
    if (text.find(str("rank ", rank, verb)) != std::string::npos) return true;
  }
  for (size_t at = text.find("ranks "); at != std::string::npos; at = text.find("ranks ", at + 1)) {
    size_t position = at + 6;
    while (position < text.size() && std::isdigit(static_cast<unsigned char>(text[position]))) {
      size_t end = position;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])))
        ++end;
      if (std::stoi(text.substr(position, end - position)) == rank) return true;
      if (text.compare(end, 2, ", ") != 0) break;
      position = end + 2;
    }
  }
  return false;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Memory shared by the test process and its ranks (mapped before the fork).
class SharedReports {
 public:
  SharedReports() {
    void* memory =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap");
    shared_ = new (memory) Shared();
  }
  ~SharedReports() { munmap(shared_, sizeof(Shared)); }
  Report& operator[](int rank) { return shared_->reports[rank]; }

  // Survivors leave only once all of them have their error (see testing::SurvivorBarrier).
  void wait_for_survivors(int survivors) { survivors_.arrive_and_wait(survivors); }

 private:
  struct Shared {
    Report reports[64];
  };
  Shared* shared_;
  testing::SurvivorBarrier survivors_;
};

// The body every rank runs: arm the fault, create the group, call the op until an error.
void run_rank(const testing::RankContext& ctx, const Trial& trial, const std::string& trace,
              SharedReports& shared) {
  Report& report = shared[ctx.rank];
  if (trial.one_cpu) testing::run_on_one_cpu();
  const std::string fault = str(collectives::fault::point_name(trial.point), ":", trial.victim, ":",
                                collectives::fault::action_name(trial.action), ":", trial.sequence);
  setenv("SHMCCL_FAULT", fault.c_str(), 1);
  if (ctx.rank == trial.victim) {
    g_victim_report = &report;
    g_fault_point = trial.point;
    g_fault_sequence = trial.sequence;
    collectives::fault::set_hook(&mark_fault_reached);
  }
  setenv("SHMCCL_CHUNK_BYTES", "16K", 1);  // pool collectives of several chunks per rank
  setenv("SHMCCL_TRACE_FILE", trace.c_str(), 1);
  if (std::getenv("FAULT_TEST_VERBOSE") == nullptr) setenv("SHMCCL_DEBUG", "NONE", 1);
  config::reload();
  log::reload();
  npu::set_device(ctx.rank % 8);
  // The creator of the default group dying at rendezvous may leave the others unable to tell it
  // from a late rank (if it is gone before they join the store, they find the store stale and
  // start a fresh one): they then time out in init, naming it. Keep that timeout short.
  const bool creator_lost =
      trial.point == Point::kRendezvous && trial.victim == 0 && trial.action != Action::kStall;
  try {
    ctx.init(/*timeout_ms=*/creator_lost ? 2000 : 60000);
  } catch (const TimeoutError& error) {
    report.error_at_ns = now_ns();
    shared.wait_for_survivors(ctx.world - 1);
    const std::string text = error.what();
    require(creator_lost, "init timed out: " + text);
    require(text.find("rank 0 (the first rank of group world) did not arrive") != std::string::npos,
            "the error does not name rank 0: " + text);
    return;
  }
  default_group()->set_timeout(kStallTimeout);
  const uint64_t calls = trial.point == Point::kRendezvous ? 3 : trial.sequence + 3;
  // A rank that finishes its calls early (a small broadcast's root and receivers need no one
  // else) may never wait for the victim in them: the barrier after them needs every rank.
  const uint64_t closing_barrier = calls + 1;
  for (uint64_t call = 1; call <= closing_barrier; ++call) {
    testing::OpSpec spec = trial.op;
    spec.salt = static_cast<int>(call);
    testing::PreparedOp op(spec, ctx.rank, ctx.world);
    report.call_start_ns = now_ns();
    try {
      if (call == closing_barrier) {
        barrier();
      } else {
        std::shared_ptr<Work> work = op.launch(nullptr);
        work->wait();
      }
    } catch (const Error& error) {
      report.error_at_ns = now_ns();
      report.failed_sequence = static_cast<int64_t>(call);
      shared.wait_for_survivors(ctx.world - 1);
      const std::string text = error.what();
      require(ctx.rank != trial.victim, "the victim failed: " + text);
      if (trial.action == Action::kStall) {
        require(dynamic_cast<const TimeoutError*>(&error) != nullptr, "not a timeout: " + text);
        require(text.find(str("sequence ", call)) != std::string::npos,
                str("the error does not name sequence ", call, ": ", text));
        require(lists_rank(text, trial.victim),
                str("the error does not name rank ", trial.victim, " as late: ", text));
      } else {
        require(dynamic_cast<const RemoteError*>(&error) != nullptr, "not a RemoteError: " + text);
        require(text.find(str("rank ", trial.victim, " (pid ")) != std::string::npos &&
                    text.find("died") != std::string::npos,
                str("the error does not name rank ", trial.victim, " as dead: ", text));
      }
      if (!trial.survivors_fail_at_fault_with.empty()) {
        require(call == trial.sequence &&
                    text.find(trial.survivors_fail_at_fault_with) != std::string::npos,
                str("expected an error in collective ", trial.sequence, " with '",
                    trial.survivors_fail_at_fault_with, "', got in ", call, ": ", text));
      }
      // Every survivor wrote its flight recorder before the error reached it, with the failed
      // call as failed.
      const std::string recorded = read_file(str(trace, ".", ctx.rank));
      const size_t entry = recorded.find(str("seq=", call, " op="));
      const size_t entry_end = recorded.find('\n', entry);
      require(
          entry != std::string::npos &&
              recorded.substr(entry, entry_end - entry).find("state=failed") != std::string::npos,
          str("flight recorder (seq=", call, " should be failed): ", recorded));
      return;
    }
    if (call != closing_barrier) op.verify();  // collectives before the fault are correct
  }
  require(ctx.rank == trial.victim && trial.action == Action::kStall, "no error on a survivor");
}

// Runs one trial and checks every rank's outcome; returns the worst detection latency (s).
double run_trial(const Trial& trial) {
  SCOPED_TRACE(trial.describe());
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / str("fault_injection_", getpid());
  std::filesystem::create_directories(directory);
  const std::string trace = (directory / "trace").string();
  SharedReports reports;
  testing::RunOptions options;
  options.timeout = std::chrono::seconds(60);
  if (trial.action == Action::kStall) options.reap_when_others_end = {trial.victim};
  const auto results = testing::run_ranks(
      trial.world, [&](const testing::RankContext& ctx) { run_rank(ctx, trial, trace, reports); },
      options);
  std::filesystem::remove_all(directory);

  double worst = 0;
  EXPECT_EQ(reports[trial.victim].fault_reached, 1)
      << "the victim never reached " << collectives::fault::point_name(trial.point)
      << " at sequence " << trial.sequence;
  for (const testing::RankResult& result : results) {
    if (result.rank == trial.victim) {
      switch (trial.action) {
        case Action::kKill:
        case Action::kStall:  // killed by the harness once the others were done
          EXPECT_EQ(result.signal, SIGKILL) << "victim: " << result.message;
          break;
        case Action::kExit:
          EXPECT_EQ(result.exit_code, collectives::fault::kFaultExitCode)
              << "victim: " << result.message;
          break;
        case Action::kStop:      // needs a peer to resume it: pull_broadcast_test.cc
        case Action::kBadAlloc:  // the victim lives on: departure_test.cc
          ADD_FAILURE() << "the random trials inject no "
                        << collectives::fault::action_name(trial.action);
          break;
      }
      continue;
    }
    EXPECT_TRUE(result.exit_code == 0 && result.signal == 0)
        << "rank " << result.rank << ": exit " << result.exit_code << ", signal " << result.signal
        << ": " << result.message;
    const Report& report = reports[result.rank];
    if (report.error_at_ns == 0) continue;
    if (trial.action == Action::kStall) {
      worst = std::max(worst, (report.error_at_ns - report.call_start_ns) / 1e9);
    } else {
      // From the victim's end (as the harness saw it through its pidfd) to the error.
      const int64_t died = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               results[static_cast<size_t>(trial.victim)].exited.time_since_epoch())
                               .count();
      const double latency = std::max<int64_t>(0, report.error_at_ns - died) / 1e9;
      worst = std::max(worst, latency);
      // (Except a lost creator that the others could only time out on, in init: see run_rank.)
      const bool lost_creator = trial.point == Point::kRendezvous && trial.victim == 0;
      if (!lost_creator || latency < 1.5) {
        EXPECT_LT(latency, kDeathBoundSeconds) << "rank " << result.rank << " noticed late";
      }
    }
  }
  if (trial.action == Action::kStall) {
    EXPECT_GE(worst, 0.9 * std::chrono::duration<double>(kStallTimeout).count());
    EXPECT_LT(worst, std::chrono::duration<double>(kStallTimeout).count() + kDeathBoundSeconds);
  }
  EXPECT_TRUE(testing::no_segments_left(options.job_id));
  std::printf("[detect] %-80s %8.3f ms\n", trial.describe().c_str(), worst * 1e3);
  return worst;
}

// A pool-sized op (several 16 KiB chunks per rank) that cycles through the collectives.
testing::OpSpec grid_op(Point point, int world, int index) {
  testing::OpSpec spec;
  spec.dtype = kFloat32;
  spec.row = 4;
  spec.rows = 2048;  // 32 KiB per rank
  spec.splits.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r)
    spec.splits[static_cast<size_t>(r)] = 1024 + 512 * r;
  spec.root = world - 1;
  static const testing::RandomOp kOps[] = {
      testing::RandomOp::kAllReduce, testing::RandomOp::kAllGatherUneven,
      testing::RandomOp::kReduceScatterUneven, testing::RandomOp::kBroadcast,
      testing::RandomOp::kAllGatherList};
  spec.op = point == Point::kBarrier ? testing::RandomOp::kBarrier : kOps[index % 5];
  return spec;
}

using GridParam = std::tuple<Point, int, Action>;

class FaultGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(FaultGrid, SurvivorsFailPromptlyNamingTheFaultyRank) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "built without SHMCCL_FAULT_INJECTION";
  const auto [point, world, action] = GetParam();
  Trial trial;
  trial.world = world;
  trial.point = point;
  trial.action = action;
  trial.victim = world - 1;  // not the group's first rank (rank 0 is covered by random trials)
  trial.sequence = point == Point::kRendezvous ? 1 : 3;
  trial.op = grid_op(point, world, static_cast<int>(point) + world);
  run_trial(trial);
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [point, world, action] = info.param;
  return str(collectives::fault::point_name(point), "_", world, "ranks_",
             collectives::fault::action_name(action));
}

INSTANTIATE_TEST_SUITE_P(
    Points, FaultGrid,
    ::testing::Combine(::testing::Values(Point::kBeforeArrival, Point::kAfterArrival,
                                         Point::kBeforeCopy, Point::kMidCopy, Point::kAfterCopy,
                                         Point::kRendezvous, Point::kBarrier),
                       ::testing::Values(2, 4, 8),
                       ::testing::Values(Action::kKill, Action::kStall)),
    grid_name);

INSTANTIATE_TEST_SUITE_P(Exit, FaultGrid,
                         ::testing::Combine(::testing::Values(Point::kBeforeArrival,
                                                              Point::kMidCopy),
                                            ::testing::Values(4), ::testing::Values(Action::kExit)),
                         grid_name);

// When ranks outnumber cores, rank 0 leaves a barrier first: the others leave once it has seen
// every arrival. Rank 0 stalled between its arrival and that release holds them in the same
// barrier, which they name (without the release they would leave it and time out in the next
// call instead). Every rank runs on one CPU, so that the group is oversubscribed on any machine.
TEST(FaultBarrier, RankZeroStalledAfterArrivingHoldsTheOthersInTheBarrier) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "built without SHMCCL_FAULT_INJECTION";
  for (int world : {2, 3, 4, 8}) {
    Trial trial;
    trial.world = world;
    trial.point = Point::kAfterArrival;
    trial.action = Action::kStall;
    trial.victim = 0;
    trial.sequence = 3;
    trial.op = grid_op(Point::kBarrier, world, 0);
    trial.one_cpu = true;
    trial.survivors_fail_at_fault_with = "in barrier (sequence 3, timeout " +
                                         std::to_string(kStallTimeout.count()) +
                                         " ms): rank 0 has not released it";
    run_trial(trial);
  }
}

// Pull broadcasts (3+ ranks, past the inline sizes): receivers finish without waiting for each
// other, the root waits for their reads. A receiver or the root dies or stalls while the others
// copy; victim `world - 1` is a receiver (the root is rank 0) or the root itself.
using PullParam = std::tuple<Point, int, Action, bool>;

class PullBroadcastFaults : public ::testing::TestWithParam<PullParam> {};

TEST_P(PullBroadcastFaults, SurvivorsFailPromptlyNamingTheFaultyRank) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "built without SHMCCL_FAULT_INJECTION";
  const auto [point, world, action, victim_is_root] = GetParam();
  Trial trial;
  trial.world = world;
  trial.point = point;
  trial.action = action;
  trial.victim = world - 1;
  trial.sequence = 3;
  trial.op = grid_op(point, world, 3);
  ASSERT_EQ(trial.op.op, testing::RandomOp::kBroadcast);
  trial.op.root = victim_is_root ? world - 1 : 0;
  run_trial(trial);
}

std::string pull_name(const ::testing::TestParamInfo<PullParam>& info) {
  const auto [point, world, action, victim_is_root] = info.param;
  return str(collectives::fault::point_name(point), "_", world, "ranks_",
             collectives::fault::action_name(action), victim_is_root ? "_root" : "_receiver");
}

INSTANTIATE_TEST_SUITE_P(
    Points, PullBroadcastFaults,
    ::testing::Combine(::testing::Values(Point::kAfterArrival, Point::kMidCopy),
                       ::testing::Values(3, 8), ::testing::Values(Action::kKill, Action::kStall),
                       ::testing::Bool()),
    pull_name);

int64_t env_or(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoll(value) : fallback;
}

TEST(FaultRandomized, RandomOpSizePointActionAndVictim) {
  if (!collectives::fault::compiled_in()) GTEST_SKIP() << "built without SHMCCL_FAULT_INJECTION";
  const uint64_t seed = static_cast<uint64_t>(env_or("SHMCCL_FAULT_SEED", 1));
  const int64_t trials = env_or("SHMCCL_FAULT_TRIALS", 12);
  std::printf("[random] seed %llu, %lld trials (SHMCCL_FAULT_SEED, SHMCCL_FAULT_TRIALS)\n",
              static_cast<unsigned long long>(seed), static_cast<long long>(trials));
  std::mt19937_64 rng(seed);
  auto pick = [&rng](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  static const int kWorlds[] = {2, 3, 4, 8};
  int survived = 0;
  int creator_lost = 0;
  double worst_death = 0;
  for (int64_t i = 0; i < trials && !HasFailure(); ++i) {
    Trial trial;
    trial.world = kWorlds[pick(0, 3)];
    trial.point = static_cast<Point>(pick(0, 6));
    // Stalls cost a timeout each: one trial in four.
    const int64_t action = pick(0, 7);
    trial.action = action < 2 ? Action::kStall : (action < 4 ? Action::kExit : Action::kKill);
    trial.victim = static_cast<int>(pick(0, trial.world - 1));
    trial.sequence = trial.point == Point::kRendezvous ? 1 : static_cast<uint64_t>(pick(1, 4));
    trial.op = testing::random_op_spec(rng, trial.world, 16384);
    if (trial.point == Point::kBarrier) trial.op.op = testing::RandomOp::kBarrier;
    const double latency = run_trial(trial);
    if (trial.point == Point::kRendezvous && trial.victim == 0 && latency > 1.5) {
      ++creator_lost;  // the others could only time out in init (see run_rank)
    } else if (trial.action != Action::kStall) {
      worst_death = std::max(worst_death, latency);
    }
    ++survived;
  }
  std::printf(
      "[random] %d of %lld trials survived; worst death detection %.3f ms (%d creators "
      "lost before the others joined: init timeouts)\n",
      survived, static_cast<long long>(trials), worst_death * 1e3, creator_lost);
}

}  // namespace
}  // namespace shmccl
