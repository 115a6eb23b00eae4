// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A rank that stays alive but will run no more collectives on a group (one of its collectives
// failed, or it destroyed its side of the group) departs (RankSlot::departed_at): its peers'
// next wait for it fails at once, naming it and why, instead of after the group's timeout. Each
// test runs at 2, 3, 4 and 8 ranks with a 60 s timeout and bounds the peers' wait at 5 s; the
// departed rank lives until every peer has its error, so no death notice can stand in for the
// departure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/fault_injection.h"
#include "collectives/group_state.h"
#include "core/config.h"
#include "device/device_context.h"
#include "device/stream_impl.h"
#include "multiprocess.h"

namespace shmccl {
namespace {

using testing::require;
using testing::seconds_since;
using testing::str;
namespace fault = collectives::fault;

constexpr int64_t kTimeoutMs = 60000;
constexpr double kBoundSeconds = 5.0;

// What the ranks of one run share: pipes made before they fork, and the survivors' meeting.
struct Shared {
  const testing::TokenPipe reported;  // a survivor has its error
  const testing::TokenPipe step;      // a case's own ordering
  testing::SurvivorBarrier survivors;
  // Staged interleavings (fault::set_hook): a rank has timed out, a rank is in the work pool, a
  // rank has given up.
  const testing::TokenPipe timed_out, in_pool, gave_up;
};

// Runs `body` on every rank at 2, 3, 4 and 8 ranks, once it joined the group (with SHMCCL_FAULT
// set to `fault(world)` when given) and passed a barrier (collective 1); `tensor` is 4 x
// (rank + 1). Then every rank must have ended well and nothing may be left in /dev/shm.
void run_at_every_size(
    const std::function<void(const testing::RankContext&, Tensor&, Shared&)>& body,
    const std::function<std::string(int world)>& fault = nullptr) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    Shared shared;
    testing::RunOptions options;
    auto results = testing::run_ranks(
        world,
        [&](const testing::RankContext& ctx) {
          if (fault) {
            setenv("SHMCCL_FAULT", fault(ctx.world).c_str(), 1);
            config::reload();
          }
          npu::set_device(ctx.rank % 8);
          ctx.init(kTimeoutMs);
          barrier();
          Tensor tensor = full({4}, ctx.rank + 1, kInt32).npu();
          body(ctx, tensor, shared);
        },
        options);
    for (const auto& result : results) {
      EXPECT_TRUE(result.exit_code == 0 && result.signal == 0)
          << world << " ranks, rank " << result.rank << ": " << result.message;
    }
    EXPECT_TRUE(testing::no_segments_left(options.job_id)) << world << " ranks";
  }
}

// The all-reduce of run_at_every_size's tensors is right.
void require_sum(const Tensor& tensor, int world, const char* what) {
  require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>(4, world * (world + 1) / 2),
          str("the all-reduce ", what, " is wrong"));
}

// Whether `text` holds one of the alternatives of `expected`, which '|' separates.
bool has_one_of(const std::string& text, const std::string& expected) {
  size_t begin = 0;
  while (true) {
    const size_t end = expected.find('|', begin);
    if (text.find(expected.substr(begin, end - begin)) != std::string::npos) return true;
    if (end == std::string::npos) return false;
    begin = end + 1;
  }
}

// Runs `call` (a collective the departed rank never joins) and requires an error within
// kBoundSeconds whose text has every one of `expected` (has_one_of): a TimeoutError when the
// departed rank timed out (`timeout`), else a RemoteError. The error is reported to the departed
// rank, and the survivors leave together (a survivor's exit would be the news a slower one sees
// first).
void expect_departure_named(const std::function<void()>& call,
                            const std::vector<std::string>& expected,
                            const testing::RankContext& ctx, Shared& shared, bool timeout = false) {
  const auto start = std::chrono::steady_clock::now();
  std::string text = "the collective returned without the departed rank";
  double seconds = 0;
  try {
    call();
  } catch (const Error& error) {
    seconds = seconds_since(start);
    text = error.what();
    const bool timed_out = dynamic_cast<const TimeoutError*>(&error) != nullptr;
    const bool remote = dynamic_cast<const RemoteError*>(&error) != nullptr;
    if (timeout ? !timed_out : !remote) {
      text = str(timeout ? "not a TimeoutError: " : "not a RemoteError: ", text);
      seconds = 0;
    }
  }
  shared.reported.post(1);
  shared.survivors.arrive_and_wait(ctx.world - 1);
  require(seconds > 0, text);
  for (const std::string& part : expected)
    require(has_one_of(text, part), str("no '", part, "' in: ", text));
  require(seconds < kBoundSeconds, str("noticed after ", seconds, " s: ", text));
}

// The departed rank lives until every survivor has its error.
void outlive_the_survivors(const testing::RankContext& ctx, const Shared& shared) {
  require(shared.reported.wait(ctx.world - 1), "the others did not report");
}

// The last rank's all-reduce (collective 2) throws std::bad_alloc
// (SHMCCL_FAULT=<point>:<rank>:bad_alloc:2) after it arrived (before_copy) or before it did
// (before_arrival). It gets the bad_alloc itself, and "failed earlier" from its next call (a
// non-shmccl exception fails the group too). The others: after an arrival, their all-reduce
// completes (the data was all there) and their barrier names the rank; before one, their
// all-reduce names it.
void expect_local_failure_named(const char* point, bool victim_arrived) {
  SCOPED_TRACE(str("bad_alloc at ", point));
  run_at_every_size(
      [&](const testing::RankContext& ctx, Tensor& tensor, Shared& shared) {
        const int victim = ctx.world - 1;
        if (ctx.rank == victim) {
          try {
            all_reduce(tensor);
            throw testing::RequirementFailed("the injected bad_alloc did not come");
          } catch (const std::bad_alloc&) {
          }
          try {
            barrier();
            throw testing::RequirementFailed("a failed group ran a barrier");
          } catch (const Error& error) {
            require(std::string(error.what()).find("failed earlier") != std::string::npos &&
                        std::string(error.what()).find("std::bad_alloc") != std::string::npos,
                    error.what());
          }
          outlive_the_survivors(ctx, shared);
          return;
        }
        const std::vector<std::string> expected = {str("rank ", victim, " (pid "),
                                                   "failed collective 2", "std::bad_alloc"};
        if (victim_arrived) {
          all_reduce(tensor);
          require_sum(tensor, ctx.world, "the victim arrived at");
          expect_departure_named([] { barrier(); }, expected, ctx, shared);
        } else {
          expect_departure_named([&] { all_reduce(tensor); }, expected, ctx, shared);
        }
      },
      [point](int world) { return str(point, ":", world - 1, ":bad_alloc:2"); });
}

TEST(DepartureTest, ARankWhoseCallFailedAfterItArrivedIsNamedInItsPeersNextCall) {
  expect_local_failure_named("before_copy", /*victim_arrived=*/true);
}

TEST(DepartureTest, ARankWhoseCallFailedBeforeItArrivedIsNamedInThatCall) {
  expect_local_failure_named("before_arrival", /*victim_arrived=*/false);
}

// Rank 0's timeout is 300 ms; the last rank calls the all-reduce only once rank 0 has timed out
// on it. The late rank and the ranks between (60 s timeouts) complete that all-reduce (everyone
// arrived, the data is whole), and their next collective names rank 0's timeout at once, as a
// TimeoutError (the failure it passes on is one).
TEST(DepartureTest, ALateRankLearnsOfThePeerThatTimedOutInItsNextCall) {
  run_at_every_size([](const testing::RankContext& ctx, Tensor& tensor, Shared& shared) {
    const int late = ctx.world - 1;
    if (ctx.rank == 0) {
      default_group()->set_timeout(std::chrono::milliseconds(300));
      try {
        all_reduce(tensor);
        throw testing::RequirementFailed("rank 0 went on without the late rank");
      } catch (const TimeoutError& error) {
        shared.step.post(1);
        require(std::string(error.what()).find(str("rank ", late, " has not called it")) !=
                    std::string::npos,
                error.what());
      }
      outlive_the_survivors(ctx, shared);
      return;
    }
    if (ctx.rank == late) require(shared.step.wait(1), "rank 0 did not time out");
    all_reduce(tensor);
    require_sum(tensor, ctx.world, "rank 0 gave up on");
    expect_departure_named(
        [] { barrier(); },
        {"rank 0 (pid ", "failed collective 2", "timed out in all_reduce (sequence 2"}, ctx, shared,
        /*timeout=*/true);
  });
}

// Rank 0's side of the timeout cases: a 300 ms timeout, and an all-reduce the late rank has not
// called, which must end in a TimeoutError.
void time_out_in_all_reduce(Tensor& tensor) {
  default_group()->set_timeout(std::chrono::milliseconds(300));
  try {
    all_reduce(tensor);
    throw testing::RequirementFailed("rank 0 went on without the late rank");
  } catch (const TimeoutError&) {
  }
}

// The same with a 1 MiB all-reduce, whose ranks read and write each other's tensors (the work
// pool): rank 0's caller has its TimeoutError and reuses the tensor (it writes -5 there), so the
// late rank and the ranks between fail that all-reduce, naming rank 0's timeout, and leave the
// tensor alone.
TEST(DepartureTest, ALateRankLeavesTheTensorsOfAPeerThatTimedOutAlone) {
  run_at_every_size([](const testing::RankContext& ctx, Tensor&, Shared& shared) {
    constexpr int64_t kElements = 1 << 18;
    const int late = ctx.world - 1;
    Tensor tensor = full({kElements}, ctx.rank + 1, kInt32).npu();
    if (ctx.rank == 0) {
      time_out_in_all_reduce(tensor);
      tensor.fill_(-5);
      shared.step.post(1);
      outlive_the_survivors(ctx, shared);
      require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>(kElements, -5),
              "a late rank wrote into the tensor of the rank that timed out");
      return;
    }
    if (ctx.rank == late) require(shared.step.wait(1), "rank 0 did not time out");
    expect_departure_named([&] { all_reduce(tensor); },
                           {"rank 0 (pid ", "gave up on the call before this rank came",
                            "timed out in all_reduce (sequence 2"},
                           ctx, shared, /*timeout=*/true);
  });
}

// The moment of a timeout itself: rank 0 times out on a 1 MiB all-reduce (the work pool) just as
// the late rank comes. Staged with fault hooks: rank 0 stops between its timeout and its give-up
// until the late rank has passed its check and is copying in the pool, and the late rank then
// stops until rank 0 has given up. The late rank reads and writes rank 0's tensor, so rank 0's
// caller gets the TimeoutError only once the late rank is out of it: the tensor then holds the
// whole sum, and the -5 its caller writes stays (it returned while the late rank was still
// copying, and the copy overwrote the -5, before rank 0 waited for the ranks in its tensors).
// The late rank completes the all-reduce (it passed the check); the ranks between complete it or
// fail it naming rank 0, whichever side of the give-up their check fell on; everyone's next call
// names rank 0.
namespace staged {
const Shared* g_shared = nullptr;
bool g_timer = false;  // rank 0: the rank that times out

void hook(fault::Point point, uint64_t sequence) {
  if (sequence != 2) return;
  if (g_timer && point == fault::Point::kTimedOut) {
    g_shared->timed_out.post(1);
    require(g_shared->in_pool.wait(1), "the late rank did not enter the pool");
  } else if (g_timer && point == fault::Point::kGaveUp) {
    g_shared->gave_up.post(1);
  } else if (!g_timer && point == fault::Point::kMidCopy) {
    g_shared->in_pool.post(1);
    require(g_shared->gave_up.wait(1), "rank 0 did not give up");
  }
}
}  // namespace staged

TEST(DepartureTest, APeerTimingOutAsTheLateRankEntersWaitsForItToLeaveItsTensors) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  run_at_every_size([](const testing::RankContext& ctx, Tensor&, Shared& shared) {
    constexpr int64_t kElements = 1 << 18;
    const int late = ctx.world - 1;
    const std::vector<int32_t> sum(kElements, ctx.world * (ctx.world + 1) / 2);
    Tensor tensor = full({kElements}, ctx.rank + 1, kInt32).npu();
    staged::g_shared = &shared;
    staged::g_timer = ctx.rank == 0;
    if (ctx.rank == 0 || ctx.rank == late) fault::set_hook(staged::hook);
    if (ctx.rank == 0) {
      time_out_in_all_reduce(tensor);
      require(tensor.cpu().to_vector<int32_t>() == sum,
              "rank 0's caller got its TimeoutError while a peer still wrote its tensor");
      tensor.fill_(-5);
      outlive_the_survivors(ctx, shared);
      require(tensor.cpu().to_vector<int32_t>() == std::vector<int32_t>(kElements, -5),
              "a peer wrote into the tensor of the rank that timed out after it returned");
      return;
    }
    if (ctx.rank == late) require(shared.timed_out.wait(1), "rank 0 did not time out");
    bool completed = false;
    std::string error_text;
    try {
      all_reduce(tensor);
      completed = true;
    } catch (const TimeoutError& error) {
      error_text = error.what();
    }
    if (completed) {
      require(tensor.cpu().to_vector<int32_t>() == sum,
              "the all-reduce rank 0 gave up on is wrong");
      expect_departure_named(
          [] { barrier(); },
          {"rank 0 (pid ", "failed collective 2", "timed out in all_reduce (sequence 2"}, ctx,
          shared, /*timeout=*/true);
      return;
    }
    shared.reported.post(1);
    shared.survivors.arrive_and_wait(ctx.world - 1);
    require(ctx.rank != late,
            str("the late rank was stopped after it passed its check: ", error_text));
    require(error_text.find("gave up on the call before this rank came") != std::string::npos,
            error_text);
  });
}

// The last rank's stream is held, so its asynchronous all-reduces 2 and 3 wait on the group's
// stream, and its all-reduce 4 cannot be queued (SHMCCL_FAULT=queues:<rank>:bad_alloc:4). It
// departs at 4 with its reason; once its stream goes on, all-reduce 2 finds the group failed and
// moves the departure down to 2. The others wait in all-reduce 2, and must hear of it at once
// (with the departure left at 4 they sat out their whole timeout).
TEST(DepartureTest, ARankThatCouldNotQueueACallIsNamedInTheCallsQueuedBeforeIt) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  run_at_every_size(
      [](const testing::RankContext& ctx, Tensor& tensor, Shared& shared) {
        const int victim = ctx.world - 1;
        if (ctx.rank == victim) {
          std::promise<void> gate;
          std::shared_future<void> opened = gate.get_future().share();
          device::current_stream_impl(ctx.rank % 8).enqueue([opened] { opened.wait(); });
          std::shared_ptr<Work> second = all_reduce(tensor, ReduceOp::SUM, nullptr, true);
          std::shared_ptr<Work> third = all_reduce(tensor, ReduceOp::SUM, nullptr, true);
          try {
            all_reduce(tensor, ReduceOp::SUM, nullptr, true);
            throw testing::RequirementFailed("the injected bad_alloc did not come");
          } catch (const std::bad_alloc&) {
          }
          gate.set_value();
          for (const auto& work : {second, third}) {
            try {
              work->wait();
              throw testing::RequirementFailed("a call queued before the failure ran");
            } catch (const Error& error) {
              require(std::string(error.what()).find("could not be queued") != std::string::npos,
                      error.what());
            }
          }
          outlive_the_survivors(ctx, shared);
          return;
        }
        expect_departure_named([&] { all_reduce(tensor); },
                               {str("rank ", victim, " (pid "), "failed collective 4",
                                "takes no part in collective 2 or later",
                                "collective 4 (all_reduce) could not be queued: std::bad_alloc"},
                               ctx, shared);
      },
      [](int world) { return str("queues:", world - 1, ":bad_alloc:4"); });
}

// The last rank destroys its side of the group after two collectives and goes on living; the
// others' third collective names it at once.
TEST(DepartureTest, ARankThatDestroyedItsGroupIsNamedInItsPeersNextCall) {
  run_at_every_size([](const testing::RankContext& ctx, Tensor& tensor, Shared& shared) {
    const int leaver = ctx.world - 1;
    all_reduce(tensor);
    if (ctx.rank == leaver) {
      destroy_process_group();
      outlive_the_survivors(ctx, shared);
      return;
    }
    expect_departure_named(
        [&] { all_reduce(tensor); },
        {str("rank ", leaver, " (pid "), "destroyed its side of the group after collective 2",
         "takes no part in collective 3"},
        ctx, shared);
  });
}

// As above, but the last rank still holds its groups (the default one and a sub-group of every
// rank) when it calls destroy_process_group: they are shut down all the same, and the others'
// next collective on the sub-group names it at once. The held groups throw on the leaver.
TEST(DepartureTest, ARankThatDestroyedGroupsItStillHoldsIsNamedInItsPeersNextCall) {
  run_at_every_size([](const testing::RankContext& ctx, Tensor& tensor, Shared& shared) {
    const int leaver = ctx.world - 1;
    std::vector<int> everyone(static_cast<size_t>(ctx.world));
    for (int r = 0; r < ctx.world; ++r)
      everyone[static_cast<size_t>(r)] = r;
    ProcessGroupPtr all = new_group(everyone);
    all_reduce(tensor, ReduceOp::SUM, all);
    require_sum(tensor, ctx.world, "of the sub-group");
    if (ctx.rank == leaver) {
      ProcessGroupPtr world_group = default_group();
      destroy_process_group();
      for (const ProcessGroupPtr& held : {all, world_group}) {
        try {
          all_reduce(tensor, ReduceOp::SUM, held);
          throw testing::RequirementFailed("a destroyed group ran an all_reduce");
        } catch (const Error& error) {
          require(std::string(error.what()).find("was shut down") != std::string::npos,
                  error.what());
        }
      }
      outlive_the_survivors(ctx, shared);
      return;
    }
    expect_departure_named(
        [&] { all_reduce(tensor, ReduceOp::SUM, all); },
        {str("rank ", leaver, " (pid "), "destroyed its side of the group after collective 1",
         "takes no part in collective 2"},
        ctx, shared);
  });
}

// The last rank's 4 MiB all-reduce (256 chunks of work pool) throws std::bad_alloc after it ran
// its first chunk and before it counted it done (SHMCCL_FAULT=mid_copy:<rank>:bad_alloc:2): no
// one will finish that chunk. The others' all-reduce fails at once, naming the rank, instead of
// waiting out the 60 s timeout. When the others took every chunk before the victim claimed one
// (which oversubscription allows), their all-reduce completes and their next collective names it.
// Fault hooks stage each case: the others wait before the data moves until the victim ran its
// chunk, or the victim waits before it until the others are done.
namespace abandon {
const Shared* g_shared = nullptr;
bool g_victim = false;
bool g_victim_holds_a_chunk = true;
int g_world = 0;

void hook(fault::Point point, uint64_t sequence) {
  if (sequence != 2) return;
  if (g_victim_holds_a_chunk) {
    if (g_victim && point == fault::Point::kMidCopy) {
      g_shared->in_pool.post(g_world - 1);
    } else if (!g_victim && point == fault::Point::kBeforeCopy) {
      require(g_shared->in_pool.wait(1), "the victim ran no chunk");
    }
  } else {
    if (!g_victim && point == fault::Point::kAfterCopy) {
      g_shared->in_pool.post(1);
    } else if (g_victim && point == fault::Point::kBeforeCopy) {
      require(g_shared->in_pool.wait(g_world - 1), "the others did not finish the pool");
    }
  }
}
}  // namespace abandon

TEST(DepartureTest, ARankThatFailedHoldingPoolWorkIsNamedInThatCall) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  constexpr int64_t kElements = 1 << 20;
  for (bool holds_a_chunk : {true, false}) {
    SCOPED_TRACE(holds_a_chunk ? "the victim holds a chunk" : "the others ran every chunk");
    for (int world : {2, 3, 4, 8}) {
      SCOPED_TRACE(str(world, " ranks"));
      Shared shared;
      testing::SharedInt claimed;  // 1: the victim held a chunk; 2: it claimed none
      testing::RunOptions options;
      auto results = testing::run_ranks(
          world,
          [&](const testing::RankContext& ctx) {
            const int victim = ctx.world - 1;
            setenv("SHMCCL_FAULT", str("mid_copy:", victim, ":bad_alloc:2").c_str(), 1);
            setenv("SHMCCL_CHUNK_BYTES", "16384", 1);
            config::reload();
            npu::set_device(ctx.rank % 8);
            abandon::g_shared = &shared;
            abandon::g_victim = ctx.rank == victim;
            abandon::g_victim_holds_a_chunk = holds_a_chunk;
            abandon::g_world = ctx.world;
            fault::set_hook(abandon::hook);
            ctx.init(kTimeoutMs);
            barrier();
            Tensor tensor = full({kElements}, ctx.rank + 1, kInt32).npu();
            if (ctx.rank == victim) {
              try {
                all_reduce(tensor);
                throw testing::RequirementFailed("the injected bad_alloc did not come");
              } catch (const std::bad_alloc&) {
              }
              const transport::RankSlot& mine = default_group()->state().transport().slot(ctx.rank);
              *claimed = mine.pool_claimed.load() == 2 ? 1 : 2;
              shared.step.post(ctx.world - 1);
              outlive_the_survivors(ctx, shared);
              return;
            }
            const auto start = std::chrono::steady_clock::now();
            std::string text;
            double seconds = 0;
            try {
              all_reduce(tensor);
            } catch (const RemoteError& error) {
              seconds = seconds_since(start);
              text = error.what();
            }
            require(shared.step.wait(1), "the victim did not report");
            require(*claimed == (holds_a_chunk ? 1 : 2),
                    holds_a_chunk ? "the victim claimed no chunk" : "the victim claimed a chunk");
            if (!holds_a_chunk) {
              // The victim left the pool whole: the others completed the call.
              require(text.empty(), "the victim held no chunk, yet: " + text);
              require(tensor.cpu().to_vector<int32_t>()[kElements - 1] ==
                          ctx.world * (ctx.world + 1) / 2,
                      "the all-reduce without the victim's share is wrong");
              expect_departure_named([] { barrier(); }, {"failed collective 2"}, ctx, shared);
              return;
            }
            shared.reported.post(1);
            shared.survivors.arrive_and_wait(ctx.world - 1);
            require(!text.empty(), "the all-reduce returned without the victim's chunk");
            for (const std::string& part :
                 {str("rank ", victim, " (pid "), std::string("std::bad_alloc")}) {
              require(text.find(part) != std::string::npos, str("no '", part, "' in: ", text));
            }
            // In the pool when the victim failed, or come to its door after that.
            require(text.find("failed the call with chunks of its work unfinished") !=
                            std::string::npos ||
                        text.find("failed the call before this rank began to move data") !=
                            std::string::npos,
                    text);
            require(seconds < kBoundSeconds, str("noticed after ", seconds, " s: ", text));
          },
          options);
      for (const auto& result : results) {
        EXPECT_TRUE(result.exit_code == 0 && result.signal == 0)
            << world << " ranks, rank " << result.rank << ": " << result.message;
      }
      EXPECT_TRUE(testing::no_segments_left(options.job_id));
    }
  }
}

// A rank whose own exception (here std::bad_alloc) fails a 1 MiB all-reduce, whose ranks read
// and write each other's tensors, gets the error only once no peer is in its tensors, and a peer
// that comes to them after the failure does not touch them: the victim's caller may reuse them.
namespace reuse {
const Shared* g_shared = nullptr;
bool g_victim = false;
constexpr int64_t kElements = 1 << 18;

// The survivors come to the data movement of collective 2 only once the victim's caller has its
// error and has overwritten its tensor.
void after_the_reuse(fault::Point point, uint64_t sequence) {
  if (sequence == 2 && point == fault::Point::kBeforeCopy)
    require(g_shared->step.wait(1), "the victim's caller did not get its error");
}

// The survivors stop after their first chunk until the victim, whose copy failed, waits for them.
void victim_waits(fault::Point point, uint64_t sequence) {
  if (sequence != 2) return;
  if (g_victim && point == fault::Point::kAwaitsPeers) {
    g_shared->in_pool.post(64);  // one for every survivor stopped in the pool, and more
  } else if (!g_victim && point == fault::Point::kMidCopy) {
    require(g_shared->in_pool.wait(1), "the victim did not wait for the ranks in its tensors");
  }
}

// The victim aborts the group from inside its pool, after its first chunk, while the survivors
// stop after theirs until it waits for them. The abort marks the group failed before the victim's
// call fails of it: that call must still wait for the peers in its tensors.
void victim_aborts(fault::Point point, uint64_t sequence) {
  if (g_victim && point == fault::Point::kMidCopy && sequence == 2)
    default_group()->abort("the victim aborts mid-copy");
  victim_waits(point, sequence);
}

// The victim's side: its error (`expected` in its text), then -7 written into the tensor at once,
// as a caller that reuses its memory would; once every survivor has its result, the -7 must all
// be there.
void reuse_after_the_error(const testing::RankContext& ctx, Tensor& tensor, const Shared& shared,
                           const std::string& expected = "std::bad_alloc") {
  std::string text = "the all-reduce completed";
  try {
    all_reduce(tensor);
  } catch (const std::exception& error) {
    text = error.what();
  }
  require(text.find(expected) != std::string::npos, str("the victim's call: ", text));
  tensor.fill_(-7);
  npu::synchronize();
  shared.step.post(ctx.world - 1);
  outlive_the_survivors(ctx, shared);
  const std::vector<int32_t> values = tensor.cpu().to_vector<int32_t>();
  int64_t overwritten = 0;
  for (int32_t value : values)
    overwritten += value != -7;
  require(overwritten == 0, str(overwritten, " of ", kElements,
                                " elements of the victim's tensor were written after its error"));
}

// A survivor's all-reduce, which must fail: its error's text, reported to the victim.
std::string survivors_error(Tensor& tensor, const Shared& shared) {
  std::string text = "the all-reduce completed";
  try {
    all_reduce(tensor);
  } catch (const RemoteError& error) {
    text = error.what();
  }
  shared.reported.post(1);
  return text;
}

// A survivor's all-reduce must fail naming the victim, with one of `texts`.
void expect_victim_named(const testing::RankContext& ctx, Tensor& tensor, Shared& shared,
                         const std::vector<std::string>& texts) {
  const int victim = ctx.world - 1;
  const std::string text = survivors_error(tensor, shared);
  shared.survivors.arrive_and_wait(ctx.world - 1);
  bool named = false;
  for (const std::string& expected : texts)
    named = named || text.find(expected) != std::string::npos;
  require(named && text.find(str("rank ", victim, " (pid ")) != std::string::npos &&
              text.find("std::bad_alloc") != std::string::npos,
          text);
}
}  // namespace reuse

TEST(DepartureTest, APeerThatFailedBeforeTheDataMovedIsLeftOutOfItsTensors) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  // The survivors' tensors on the NPU (the work pool), then on the host (the host pipeline, which
  // reads the victim's NPU tensor in place).
  for (bool survivors_on_host : {false, true}) {
    SCOPED_TRACE(survivors_on_host ? "survivors on the host" : "every tensor on the NPU");
    run_at_every_size(
        [&](const testing::RankContext& ctx, Tensor&, Shared& shared) {
          const bool victim = ctx.rank == ctx.world - 1;
          Tensor tensor = full({reuse::kElements}, ctx.rank + 1, kInt32);
          if (victim || !survivors_on_host) tensor = tensor.npu();
          reuse::g_shared = &shared;
          if (victim) {
            reuse::reuse_after_the_error(ctx, tensor, shared);
            return;
          }
          fault::set_hook(reuse::after_the_reuse);
          reuse::expect_victim_named(ctx, tensor, shared,
                                     {"failed the call before this rank began to move data"});
        },
        [](int world) { return str("before_copy:", world - 1, ":bad_alloc:2"); });
  }
}

TEST(DepartureTest, ARankWhoseCopyFailedWaitsForThePeersInItsTensors) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  // Small chunks, so that the pool outlasts every rank's first one. The group takes rank 0's.
  setenv("SHMCCL_CHUNK_BYTES", "16384", 1);
  run_at_every_size(
      [&](const testing::RankContext& ctx, Tensor&, Shared& shared) {
        Tensor tensor = full({reuse::kElements}, ctx.rank + 1, kInt32).npu();
        reuse::g_shared = &shared;
        reuse::g_victim = ctx.rank == ctx.world - 1;
        fault::set_hook(reuse::victim_waits);
        if (reuse::g_victim) {
          reuse::reuse_after_the_error(ctx, tensor, shared);
          return;
        }
        // The victim held a chunk it never finished; a survivor that entered the pool only after
        // the victim failed is stopped at the door.
        reuse::expect_victim_named(ctx, tensor, shared,
                                   {"failed the call with chunks of its work unfinished",
                                    "failed the call before this rank began to move data"});
      },
      [](int world) { return str("mid_copy:", world - 1, ":bad_alloc:2"); });
  unsetenv("SHMCCL_CHUNK_BYTES");
}

// As above, but the victim's call fails of an abort the victim made (here from inside the call;
// another thread's abort is the same): the group was failed before the call failed. The call used
// to skip its wait for the peers in its tensors then, which could write into them after its caller
// had them back.
TEST(DepartureTest, ARankWhoseCallFailsOfItsOwnAbortWaitsForThePeersInItsTensors) {
  if (!fault::compiled_in()) GTEST_SKIP() << "no fault injection in this build";
  setenv("SHMCCL_CHUNK_BYTES", "16384", 1);
  run_at_every_size([&](const testing::RankContext& ctx, Tensor&, Shared& shared) {
    Tensor tensor = full({reuse::kElements}, ctx.rank + 1, kInt32).npu();
    reuse::g_shared = &shared;
    reuse::g_victim = ctx.rank == ctx.world - 1;
    const std::string reason =
        str("the group was aborted by rank ", ctx.world - 1, ": the victim aborts mid-copy");
    fault::set_hook(reuse::victim_aborts);
    if (reuse::g_victim) {
      reuse::reuse_after_the_error(ctx, tensor, shared, reason);
      return;
    }
    const std::string text = reuse::survivors_error(tensor, shared);
    require(text.find(reason) != std::string::npos, text);
  });
  unsetenv("SHMCCL_CHUNK_BYTES");
}

// The same inside the host-tensor pipeline: the last rank's 1 MiB all-reduce of host tensors
// throws std::bad_alloc after its first step (it staged one window of its data), so it never
// consumes the rest, which every rank's last wait needs. The others' all-reduce names it at once.
TEST(DepartureTest, ARankThatFailedInTheHostPipelineIsNamedInThatCall) {
  run_at_every_size(
      [](const testing::RankContext& ctx, Tensor&, Shared& shared) {
        const int victim = ctx.world - 1;
        Tensor host = full({1 << 18}, ctx.rank + 1, kInt32);
        if (ctx.rank == victim) {
          try {
            all_reduce(host);
            throw testing::RequirementFailed("the injected bad_alloc did not come");
          } catch (const std::bad_alloc&) {
          }
          outlive_the_survivors(ctx, shared);
          return;
        }
        // In the pipeline when the victim failed, or come to its door after that.
        expect_departure_named([&] { all_reduce(host); },
                               {str("rank ", victim, " (pid "),
                                "failed the call before it consumed every window of its host "
                                "staging|failed the call before this rank began to move data",
                                "std::bad_alloc"},
                               ctx, shared);
      },
      [](int world) { return str("mid_copy:", world - 1, ":bad_alloc:2"); });
}

}  // namespace
}  // namespace shmccl
