// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/host_pipeline.h"

#include <algorithm>
#include <string>

#include "collectives/fault_injection.h"
#include "collectives/host_staging.h"
#include "collectives/staging_geometry.h"
#include "core/check.h"
#include "core/memory_order.h"
#include "device/kernels.h"

namespace shmccl::collectives {
namespace {

using transport::kMaxRanks;
using transport::OpKind;
using transport::RankSlot;
using Counter = std::atomic<uint64_t> RankSlot::*;

// One rank's side of the pipeline: what it stages, reduces and copies out, and the counters
// that order it against the other ranks.
class Pipeline {
 public:
  Pipeline(detail::GroupState& state, const ExecContext& context, const StagingGeometry& geometry,
           uint64_t first)
      : state_(state),
        context_(context),
        plan_(context.plan),
        transport_(context.transport),
        g_(geometry),
        me_(context.rank),
        size_(context.size),
        base_(first),
        end_(first + geometry.windows) {}

  void run(std::chrono::milliseconds timeout);

 private:
  // Window numbers are absolute (monotonic across collectives, like the counters); spans and
  // geometry count from the collective's first window.
  char* source(int rank, uint64_t window, int piece) const {
    if (staged_[rank]) {
      return sources_[rank] + (window % kStagingDepth) * g_.window +
             (g_.pieces ? g_.slot_offset[piece] : 0);
    }
    return sources_[rank] + g_.span(rank, window - base_, piece).offset;
  }
  char* destination(int source_rank) const;
  void resolve_source(int rank, bool staged);
  void stage(uint64_t window);
  void reduce(uint64_t window);
  void pull(uint64_t window);

  // A peer's counter, checked: no rank gets past this collective's last window before this one
  // has left it (every rank waits for every `consumed` at the end).
  uint64_t counter(int rank, Counter which) const {
    const uint64_t value = (transport_.slot(rank).*which).load(std::memory_order_acquire);
    if (value > end_) [[unlikely]] {
      throw RemoteError(detail::concat("in ", plan_.name, " (sequence ", plan_.sequence, "): rank ",
                                       rank, " published host-staging window ", value,
                                       " beyond this collective's last window ", end_,
                                       ": the control block is corrupt"));
    }
    return value;
  }
  bool all_reached(Counter which, uint64_t value) const {
    for (int r = 0; r < size_; ++r) {
      if (counter(r, which) < value) return false;
    }
    return true;
  }
  bool peers_reached(Counter which, uint64_t value) const {
    for (int r = 0; r < size_; ++r) {
      if (r != me_ && counter(r, which) < value) return false;
    }
    return true;
  }
  std::string behind(Counter which, uint64_t value, bool peers_only = false) const {
    return transport::ranks_below(
        transport_, value,
        [which](const transport::RankSlot& slot) {
          return (slot.*which).load(std::memory_order_acquire);
        },
        peers_only ? me_ : -1);
  }
  // Seq_cst, like every store a sleeper may wait for (notify's Dekker pairing); release: the
  // window's data happen-before a peer that sees the count.
  void publish(Counter which, uint64_t value) {
    detail::release_to_peers();
    (transport_.slot(me_).*which).store(value, std::memory_order_seq_cst);
    transport_.notify();
  }

  // One phase (stage, reduce, pull) of this rank: windows [next, last) have work; once they are
  // done the counter jumps to the collective's end (later windows hold nothing for this rank).
  struct Phase {
    Counter counter;
    uint64_t next;
    uint64_t last;
    bool pending() const { return next < last; }
  };
  void finish_step(Phase& phase) {
    ++phase.next;
    publish(phase.counter, phase.pending() ? phase.next : end_);
    if (!ran_one_) {
      ran_one_ = true;
      fault::point(fault::Point::kMidCopy, state_.global_ranks()[static_cast<size_t>(me_)],
                   plan_.sequence);
    }
  }
  bool stage_ready(const Phase& stage) const {
    return stage.next < base_ + kStagingDepth ||
           all_reached(&RankSlot::consumed, stage.next + 1 - kStagingDepth);
  }
  std::string describe(const Phase& stage, const Phase& reduce, const Phase& pull) const;
  // A rank that failed this collective after it arrived (it departed: RankSlot::departed_at)
  // before it consumed every window never will, and every rank's last wait needs that: the
  // waits end at once and name it. -1 while there is none.
  int abandoned_by() const {
    return transport_.first_departed([this](const RankSlot& slot) {
      return transport::gave_up_on(slot, plan_.sequence) && !transport::timed_out(slot) &&
             slot.consumed.load(std::memory_order_acquire) < end_;
    });
  }
  void throw_if_abandoned() const {
    const int rank = abandoned_by();
    if (rank < 0) [[likely]]
      return;
    throw RemoteError(detail::concat("in ", plan_.name, " (sequence ", plan_.sequence, "): rank ",
                                     rank, " (pid ", transport_.peer_pid(rank),
                                     ") failed the call before it consumed every window of its ",
                                     "host staging, so no rank can finish it: ",
                                     transport::failure_text(transport_.slot(rank))));
  }

  detail::GroupState& state_;
  const ExecContext& context_;
  const OpPlan& plan_;
  transport::GroupTransport& transport_;
  const StagingGeometry& g_;
  const int me_;
  const int size_;
  const uint64_t base_;
  const uint64_t end_;
  char* sources_[kMaxRanks] = {};
  bool staged_[kMaxRanks] = {};
  bool ran_one_ = false;
  bool overwrites_source_ = false;  // writes its output over its source, which peers read
};

// Where rank `source_rank`'s data lands in this rank's output (all-gather, broadcast), or this
// rank's output itself.
char* Pipeline::destination(int source_rank) const {
  if (plan_.kind == OpKind::kAllGatherList) {
    return static_cast<char*>(plan_.outputs()[static_cast<size_t>(source_rank)].data_ptr());
  }
  char* output = static_cast<char*>(plan_.output().data_ptr());
  if (plan_.kind == OpKind::kAllGather)
    output += plan_.rows_before(source_rank) * plan_.row_bytes();
  return output;
}

// Maps rank `rank`'s source: its staging area when its input is on the host, else its NPU input.
// The sizes come from the agreed plan and geometry; resolve() checks them against the owner's
// descriptor and arena.
void Pipeline::resolve_source(int rank, bool staged) {
  staged_[rank] = staged;
  const uint64_t bytes = staged ? kStagingDepth * g_.window : g_.source_bytes[rank];
  sources_[rank] =
      transport_.resolve(context_.descriptors[rank]->input, bytes, element_size(plan_.dtype));
}

void Pipeline::stage(uint64_t window) {
  const char* input = static_cast<const char*>(plan_.input().data_ptr());
  const int pieces = g_.pieces ? size_ : 1;
  for (int i = 0; i < pieces; ++i) {
    const Span span = g_.span(me_, window - base_, i);
    if (span.bytes > 0) kernels::copy(source(me_, window, i), input + span.offset, span.bytes);
  }
}

// All-reduce: piece `me` of every rank's window, reduced into this rank's own source.
void Pipeline::reduce(uint64_t window) {
  const Span span = g_.span(me_, window - base_, me_);
  if (span.bytes == 0) return;
  const void* sources[kMaxRanks];
  for (int r = 0; r < size_; ++r)
    sources[r] = source(r, window, me_);
  kernels::reduce(plan_.reduce_op, plan_.dtype, source(me_, window, me_), sources, size_,
                  span.bytes / element_size(plan_.dtype));
}

void Pipeline::pull(uint64_t window) {
  const uint64_t w = window - base_;
  switch (plan_.kind) {
    case OpKind::kAllGather:
    case OpKind::kAllGatherList:
      for (int step = 0; step < size_; ++step) {
        const int r = (me_ + step) % size_;
        const Span span = g_.span(r, w, 0);
        if (span.bytes == 0) continue;
        char* to = destination(r) + span.offset;
        const char* from = source(r, window, 0);
        // In place, this rank's rows are its input already.
        const bool own_rows =
            r == me_ && to == static_cast<const char*>(plan_.input().data_ptr()) + span.offset;
        if (to != from && !own_rows) context_.copy(to, from, span.bytes);
      }
      return;
    case OpKind::kBroadcast: {
      const Span span = g_.span(plan_.root, w, 0);
      if (span.bytes > 0) {
        context_.copy(destination(plan_.root) + span.offset, source(plan_.root, window, 0),
                      span.bytes);
      }
      return;
    }
    case OpKind::kReduceScatter: {
      const Span span = g_.span(me_, w, me_);
      if (span.bytes == 0) return;
      const void* sources[kMaxRanks];
      for (int r = 0; r < size_; ++r)
        sources[r] = source(r, window, me_);
      kernels::reduce(plan_.reduce_op, plan_.dtype,
                      destination(me_) + (span.offset - g_.begin[me_]), sources, size_,
                      span.bytes / element_size(plan_.dtype));
      return;
    }
    case OpKind::kAllReduce: {
      if (!g_.pieces) {  // small: the whole window from every source, in rank order
        const Span span = g_.span(me_, w, 0);
        const void* sources[kMaxRanks];
        for (int r = 0; r < size_; ++r)
          sources[r] = source(r, window, 0);
        kernels::reduce(plan_.reduce_op, plan_.dtype, destination(me_) + span.offset, sources,
                        size_, span.bytes / element_size(plan_.dtype));
        return;
      }
      for (int step = 0; step < size_; ++step) {
        const int i = (me_ + step) % size_;
        const Span span = g_.span(i, w, i);
        if (span.bytes == 0) continue;
        char* to = destination(me_) + span.offset;
        const char* from = source(i, window, i);
        if (to != from) context_.copy(to, from, span.bytes);  // an NPU tensor holds its own piece
      }
      return;
    }
    case OpKind::kBarrier:
    case OpKind::kNone:
      return;
  }
}

std::string Pipeline::describe(const Phase& stage, const Phase& reduce, const Phase& pull) const {
  std::string what;
  auto add = [&what](const std::string& ranks, const std::string& text) {
    if (!ranks.empty()) what += (what.empty() ? "" : "; ") + text;
  };
  // "rank 1 has not " / "ranks 1, 3 have not " + `rest`.
  auto add_same = [&add](const std::string& ranks, const std::string& rest) {
    add(ranks, transport::ranks_have_not(ranks, rest));
  };
  const uint64_t windows = end_ - base_;
  if (pull.pending()) {
    const std::string window = detail::concat("window ", pull.next - base_, " of ", windows);
    // The two-phase all-reduce: each rank reduces its piece of the window before any pull.
    const bool reduces = plan_.kind == OpKind::kAllReduce && g_.pieces;
    const std::string late =
        behind(reduces ? &RankSlot::reduced : &RankSlot::staged, pull.next + 1);
    if (reduces) {
      add(late, transport::ranks_that(late, " has not reduced its share of " + window,
                                      " have not reduced their share of " + window));
    } else {
      add_same(late, "staged " + window);
    }
    if (overwrites_source_) {
      add_same(
          behind(&RankSlot::consumed, pull.next + 1),
          "consumed " + window + " (this rank's NPU tensor, which they read, receives the result)");
    }
  }
  if (reduce.pending()) {
    add_same(behind(&RankSlot::staged, reduce.next + 1),
             detail::concat("staged window ", reduce.next - base_, " of ", windows));
  }
  if (stage.pending() && stage.next >= base_ + kStagingDepth) {
    add_same(behind(&RankSlot::consumed, stage.next + 1 - kStagingDepth),
             detail::concat("consumed window ", stage.next - base_ - kStagingDepth, " of ", windows,
                            " (its staging slot is needed again)"));
  }
  if (!pull.pending() && !reduce.pending() && !stage.pending()) {
    add_same(behind(&RankSlot::consumed, end_), "consumed every window");
  }
  return detail::concat("in ", plan_.name, " (sequence ", plan_.sequence, ", timeout ",
                        state_.timeout().count(), " ms): staging host tensors: ",
                        what.empty() ? std::string("no rank is behind any more") : what);
}

void Pipeline::run(std::chrono::milliseconds timeout) {
  // The two-phase all-reduce has a reduce phase; in the whole-window form an NPU tensor, read in
  // place by the peers, is overwritten only once every peer consumed the window.
  const bool all_reduce = plan_.kind == OpKind::kAllReduce && g_.pieces;
  overwrites_source_ =
      plan_.kind == OpKind::kAllReduce && !g_.pieces && !plan_.input().is_cpu() && size_ > 1;
  // Alone in the group, the rank reads its own tensors in place: nobody needs a staged copy.
  const bool alone = size_ == 1;
  const bool stages = plan_.input().is_cpu() && sends_data(plan_, me_) && !alone;
  // With pieces every window holds some destination's piece: a staging rank stages them all.
  const uint64_t staged_windows = g_.pieces ? g_.windows : g_.active_windows(me_, 0);
  Phase stage{&RankSlot::staged, base_, base_ + (stages ? staged_windows : 0)};
  Phase reduce{&RankSlot::reduced, base_, base_ + (all_reduce ? g_.active_windows(me_, me_) : 0)};
  uint64_t pulls = 0;
  switch (plan_.kind) {
    case OpKind::kReduceScatter:
      pulls = g_.active_windows(me_, me_);
      break;
    case OpKind::kBroadcast:
      pulls = me_ == plan_.root ? 0 : g_.windows;
      break;
    default:
      pulls = g_.windows;
      break;
  }
  Phase pull{&RankSlot::consumed, base_, base_ + pulls};
  // Map the sources while every owner is certainly alive: none leaves before this rank has
  // consumed everything. This rank's own side follows its tensors, not its (shared) descriptor.
  const bool reads = pull.pending() || reduce.pending();
  for (int r = 0; r < size_ && !alone; ++r) {
    if (!sends_data(plan_, r) || (r != me_ && !reads) || (r == me_ && !reads && !stages)) continue;
    const uint8_t sides = context_.descriptors[r]->host_sides;
    resolve_source(r, r == me_ ? stages : (sides & transport::kHostInput) != 0);
  }
  if (alone) sources_[me_] = static_cast<char*>(plan_.input().data_ptr());
  for (Phase* phase : {&stage, &reduce, &pull}) {
    if (!phase->pending()) publish(phase->counter, end_);
  }

  Counter awaited = all_reduce ? &RankSlot::reduced : &RankSlot::staged;
  auto pull_ready = [&] {
    return pull.pending() && all_reached(awaited, pull.next + 1) &&
           (!overwrites_source_ || peers_reached(&RankSlot::consumed, pull.next + 1));
  };
  auto reduce_ready = [&] {
    return reduce.pending() && all_reached(&RankSlot::staged, reduce.next + 1);
  };
  while (stage.pending() || reduce.pending() || pull.pending()) {
    bool progressed = false;
    // Keep the window peers need next staged, then unblock their pulls, then pull; stage ahead
    // (into free slots) only when nothing else can move: that is the copy-in that overlaps the
    // peers' copy-out.
    if (stage.pending() && stage.next <= pull.next && stage_ready(stage)) {
      this->stage(stage.next);
      finish_step(stage);
      progressed = true;
    }
    if (reduce_ready()) {
      this->reduce(reduce.next);
      finish_step(reduce);
      progressed = true;
    }
    if (pull_ready()) {
      this->pull(pull.next);
      finish_step(pull);
      progressed = true;
    }
    if (!progressed && stage.pending() && stage_ready(stage)) {
      this->stage(stage.next);
      finish_step(stage);
      progressed = true;
    }
    if (progressed) continue;
    transport_.wait_until(
        [&] {
          return pull_ready() || reduce_ready() || (stage.pending() && stage_ready(stage)) ||
                 abandoned_by() >= 0;
        },
        timeout, [&] { return describe(stage, reduce, pull); });
    throw_if_abandoned();
  }
  if (!ran_one_) {
    fault::point(fault::Point::kMidCopy, state_.global_ranks()[static_cast<size_t>(me_)],
                 plan_.sequence);
  }
  // Peers may still read this rank's slots or NPU input: leave once every rank consumed all.
  transport_.wait_until(
      [&] { return all_reached(&RankSlot::consumed, end_) || abandoned_by() >= 0; }, timeout,
      [&] { return describe(stage, reduce, pull); });
  if (!all_reached(&RankSlot::consumed, end_)) throw_if_abandoned();
}

}  // namespace

bool uses_host_pipeline(const ExecContext& context) {
  for (int r = 0; r < context.size; ++r) {
    if (context.descriptors[r]->host_sides != 0) return true;
  }
  return false;
}

void run_host_pipeline(detail::GroupState& state, ExecContext& context,
                       std::chrono::milliseconds timeout) {
  const StagingGeometry geometry = staging_geometry(context);
  const uint64_t first = state.host_staging().take_windows(geometry.windows);
  if (geometry.windows == 0) return;
  Pipeline pipeline(state, context, geometry, first);
  pipeline.run(timeout);
}

}  // namespace shmccl::collectives
