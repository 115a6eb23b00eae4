// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The engine behind npu::Stream and npu::Event: an in-order task queue per stream, run by one
// worker thread started on first use. Thread-safe: any thread may enqueue, query or synchronize.
//
// Lock order: a stream's State::mutex before an EventState::mutex (record() holds both so that an
// event generation is never visible before its marker is queued). No lock is held while a task
// runs, so tasks may freely use other streams, events and even their own stream (run_sync nests).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/stream_task.h"

namespace shmccl::npu::detail {

// Completion state of one event, shared by the Event handles, the marker tasks that complete its
// records and the wait tasks that block on them. Every field is guarded by `mutex`, except
// enable_timing, which is set before the state is shared and never changes.
//
// Each record() takes a new generation. A marker completes only its own generation, and a wait
// blocks only until the generation it captured has completed, so re-recording the event (even on
// another stream, whose marker may complete first or later) never affects an earlier wait.
struct EventState {
  bool enable_timing = false;
  std::mutex mutex;
  std::condition_variable completed_cv;  // notified (all) whenever a marker completes
  uint64_t record_generation = 0;        // bumped by each record(); 0 = never recorded
  bool recorded = false;                 // recorded at least once
  bool completed = true;                 // the latest generation completed; never-recorded: true
  // Generations recorded but whose marker has not run yet, usually zero or one entry (more only
  // when the event is re-recorded before an earlier record completed).
  std::vector<uint64_t> pending_generations;
  // When the latest generation completed (set only with enable_timing).
  std::chrono::steady_clock::time_point completed_at{};
  // The error the recording stream had stored when the latest generation completed: work queued
  // before the record failed. Event::synchronize rethrows it (it stays stored in the stream too).
  std::exception_ptr error;
  // The process's fork_generation() when the latest generation was marked pending: in a child
  // forked since, nothing will complete it.
  uint64_t pending_fork_generation = 0;
};

// True when generation `generation` of `event` has completed. Requires event.mutex held.
bool generation_completed_locked(const EventState& event, uint64_t generation);

class StreamImpl {
  struct State;

 public:
  // What enqueue_helpable returns: a handle on one queued task for a thread that needs it done.
  // Called with run_here = true, it runs the task on the calling thread if no one has started it
  // yet (see help_through); with run_here = false it only makes sure the worker starts it now,
  // not at its next poll (see State::helped_until). Holds the stream weakly: once the stream is
  // gone it does nothing. A default-constructed one does nothing. Copyable; thread-safe.
  class Helper {
   public:
    Helper() = default;
    void operator()(bool run_here) const;
    // Returns once the stream has counted the task as completed. A task that signals its own
    // end (a Work) wakes its waiter before the worker counts it, so a waiter that then finds the
    // stream busy would queue its next call behind a task that is over: a thread hand-off per
    // call, call after call (a loop of synchronous collectives, each 0.5 us inline, took 6-7
    // us each until the worker happened to count one in time).
    void await_recorded() const;

   private:
    friend class StreamImpl;
    Helper(std::weak_ptr<State> state, uint64_t ticket)
        : state_(std::move(state)), ticket_(ticket) {}
    std::weak_ptr<State> state_;
    uint64_t ticket_ = 0;
  };

  StreamImpl(int device, uint64_t id);
  // Waits for queued work to finish, then stops the worker. When the last handle is dropped by
  // one of the stream's own tasks (on its worker thread) the worker is detached instead and
  // drains the queue on its own. In a forked child, a stream of the parent is dropped without
  // waiting (its worker does not exist there).
  ~StreamImpl();
  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;

  int device() const { return device_; }
  uint64_t id() const { return id_; }

  // Queues `task`; tasks run in order on the worker thread. An exception a task throws is kept
  // (the first one) and rethrown by the next synchronize(); later tasks still run. Never waits
  // for running work.
  void enqueue(StreamTask task);

  // Queues `task` like enqueue() and returns its Helper: a thread that must wait for the task can
  // run it instead of sleeping through two thread hand-offs, and a thread that waits with a
  // deadline or orders another stream after it can have the worker start it now. The task must
  // not queue work on the current stream: on a helper that is the caller's, not the worker's.
  Helper enqueue_helpable(StreamTask task);

  // Runs `task` in stream order and returns when it is done, rethrowing its exception. When the
  // stream is idle the task runs on the calling thread (no hand-off) while the stream counts as
  // busy, so work queued meanwhile runs after it; otherwise it is queued and waited for. Called
  // from a task of this stream it runs the task at once (it is already in order). Errors stored
  // by earlier tasks stay stored (they surface at synchronize()). The caller keeps the stream
  // alive for the call: `task` must not drop its last handle, since run_sync counts the task
  // completed after it returns. Holding a reference here instead would cost the synchronous
  // small-collective path two atomic read-modify-writes; the only callers (device::run_ordered,
  // read_ordered) run the library's own tasks on the thread's current stream, which its
  // ThreadStreams keeps.
  void run_sync(const std::function<void()>& task);

  // True when the worker sleeps in a poll (see State::helped_until): helpable tasks queued now
  // wait for a helper, start_now or the poll's end. For tests and diagnostics.
  bool worker_polls() const;
  // True when nothing is queued or running. Never waits for work.
  bool idle() const;
  // True on a thread that runs one of this stream's tasks (its worker, a helper, run_sync inline):
  // what it calls is already in stream order.
  bool runs_here() const;
  // Tasks accepted but not finished: queued, running on the worker or running inline.
  uint64_t pending() const;
  // Waits until everything queued so far has run; rethrows (and clears) the stored error.
  // InvalidArgument when called from a task of this stream (it would wait for itself).
  void synchronize();
  // Like synchronize() but with a deadline: false on timeout. A stored error is rethrown (and
  // cleared) whether or not the deadline passed.
  bool synchronize_for(std::chrono::nanoseconds timeout);
  // Waits until everything queued so far has run (false: `timeout` passed first), leaving a
  // stored error stored. synchronize_for() is this, then take_error().
  bool wait_idle(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
  // Returns the stored error and clears it (null when there is none). Never waits.
  std::exception_ptr take_error();

  // Queues the completion of `event` (its record()). On an idle stream the event completes at
  // once, without a hand-off.
  void record(const std::shared_ptr<EventState>& event);
  // Queues a wait: later tasks start only once `event`'s current record has completed. Nothing
  // is queued when that record has already completed (or the event was never recorded).
  void wait(const std::shared_ptr<EventState>& event);
  // Queues a wait for a task's record (begin_task_record's `generation` of `event`) that also
  // takes on the task's error: later tasks start once it completed, and a failed task's error is
  // stored here, rethrown by this stream's next synchronize(). An asynchronous collective's
  // Work::synchronize() orders the caller's stream this way.
  void wait_for_task(const std::shared_ptr<EventState>& event, uint64_t generation);
  // Stores `error` as if a task queued now had thrown it (rethrown by the next synchronize()).
  void fail_with(std::exception_ptr error);

 private:
  // Everything the worker thread touches. The worker holds its own reference, so the State
  // outlives the StreamImpl when the worker is detached (see ~StreamImpl). All fields are guarded
  // by `mutex` except the const ones and the atomics, which run_sync's idle path uses without it.
  //
  // Tickets: every task gets the next value of `enqueued`; tasks complete in ticket order, and
  // `completed` is the last one completed. run_sync on an idle stream (enqueued == completed)
  // takes the next ticket with one compare-and-swap, runs the task on its caller's thread and
  // stores `completed`; a task queued meanwhile has a later ticket and the worker starts it only
  // once `completed` reaches the ticket before it. Nobody else sleeping is the common case: then
  // the idle path costs two locked instructions and no mutex (a mutex round trip per collective
  // measured 7-9% of an 8-byte all-gather).
  struct Task {
    uint64_t ticket;
    StreamTask run;
    bool marker = false;  // an event record's completion: short, never blocks
  };
  struct State {
    State(int device, uint64_t id);

    const int device;
    const uint64_t id;
    const uint64_t fork_generation;              // of the process that created the stream
    const std::chrono::nanoseconds poll_period;  // SHMCCL_HELPED_POLL_TIME; 0: never poll

    std::mutex mutex;
    std::condition_variable work_cv;  // worker: new task or stop
    std::condition_variable done_cv;  // synchronizers: `completed` advanced
    std::deque<Task> queue;
    // Tasks ever accepted (queued or run inline), and tasks finished (in order, so <= enqueued).
    // enqueued: fetch_add under `mutex`, or run_sync's compare-and-swap without it; completed:
    // stored by whoever ran the task with that ticket (one at a time, by the ticket order).
    std::atomic<uint64_t> enqueued{0};
    std::atomic<uint64_t> completed{0};
    // Sleepers that an inline task's completion must wake (read by run_sync without `mutex`;
    // written under it, seq_cst: Dekker with the completion's store of `completed`).
    std::atomic<uint32_t> sync_waiters{0};    // threads blocked on done_cv
    std::atomic<bool> worker_blocked{false};  // worker waits for an inline task's completion
    bool worker_sleeping = false;  // worker blocked on work_cv, queue empty, not yet notified
    // While waiters keep running its tasks (help_through), the idle worker polls instead of
    // sleeping until notified, and helpable tasks and markers do not wake it: the waiter runs
    // them, and a task no one waits for starts within a poll period. Set by helpers. Waking the
    // worker for each task that a waiter then ran itself cost 4 ranks on 2 cores 8-25 us per
    // asynchronous call waited at once; deferring it (polls of 1 ms), 3.6-7 us.
    std::chrono::steady_clock::time_point helped_until{};
    bool worker_polling = false;  // the worker's sleep is one poll period (with worker_sleeping)
    bool stop = false;
    std::exception_ptr error;  // first error of an enqueued task since the last synchronize
    std::thread worker;
  };

  static void worker_loop(const std::shared_ptr<State>& state);
  // Runs on the calling thread, in order, the queued tasks that no one has started, until ticket
  // `target` has completed, then the event markers right behind it; stops early when the next
  // task runs elsewhere (the worker, or run_sync inline), leaving the rest to the worker.
  static void help_through(State& s, uint64_t target);
  // Wakes a polling worker while ticket `target` has not completed.
  static void start_now(State& s, uint64_t target);
  // Completes `ticket` (run by the worker or a helper): stores the error, advances `completed`
  // and wakes who waits for it. Requires s.mutex held by `lock`; may unlock and relock it.
  static void complete_locked(State& s, std::unique_lock<std::mutex>& lock, uint64_t ticket,
                              std::exception_ptr error);
  void check_usable() const;
  [[noreturn, gnu::cold, gnu::noinline]] void throw_unusable() const;
  // Queues `task` (its ticket into `*ticket` when given) and returns whether the worker needs a
  // notify (done after unlocking).
  bool push_locked(StreamTask task, uint64_t* ticket = nullptr, bool marker = false,
                   bool helpable = false);
  // Waits until s.completed reaches `target` or `deadline`; false on timeout.
  static bool wait_completed_locked(State& s, std::unique_lock<std::mutex>& lock, uint64_t target,
                                    std::chrono::steady_clock::time_point deadline);

  const int device_;
  const uint64_t id_;
  const std::shared_ptr<State> state_;
};

// True while the calling thread runs a task of a stream it helped (StreamImpl::help_through): a
// waiter, not the stream's worker, so nothing else of its own needs its core meanwhile.
bool running_helped_task();

// True while the calling thread runs a task of any stream (its worker, a helper, run_sync
// inline): what it calls is in that stream's order, whichever stream is current on the thread.
bool running_stream_task();

// For a task that completes an event itself when it ends, instead of a marker queued behind it
// (one queue entry less per asynchronous collective): begin_task_record marks a fresh,
// unshared `event` recorded and pending and returns its generation; the task passes that to
// complete_task_record as its last step. Work queued after the task is not waited for, which
// is what a record right behind it means too.
uint64_t begin_task_record(EventState& event);
// `error`: the task failed; it is stored in the event (EventState::error) for the streams that
// wait for it (wait_for_task).
void complete_task_record(EventState& event, uint64_t generation,
                          const std::exception_ptr& error = nullptr);

// Blocks until `event`'s latest record (at the time of the call) has completed. InvalidArgument
// in a child forked while it was pending (see throw_if_pending_from_before_fork).
void wait_event_completed(EventState& event);

// How many times this process was forked into a child (0 in the original process, and more in
// each child): what a stream, an event or a Work made before the fork has no thread to run it in
// the child.
uint64_t fork_generation();

// Requires event.mutex held. InvalidArgument if generation `generation` of `event` is pending,
// recorded before this process was forked: its marker runs in the parent only, and a wait for it
// here would never end. `what` names the wait.
void throw_if_pending_from_before_fork(const EventState& event, uint64_t generation,
                                       const char* what);

}  // namespace shmccl::npu::detail
