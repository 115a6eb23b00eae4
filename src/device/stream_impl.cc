// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// StreamImpl: one mutex-guarded deque per stream and one worker thread draining it in order.
// Tasks complete in order, so two counters (enqueued, completed) say everything a synchronizer
// needs: "all work queued so far" is "completed reaches the enqueued count read now". A task run
// inline on an idle stream (run_sync) takes its ticket without the mutex (see State).

#include "device/stream_impl.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"
#include "core/signal_mask.h"
#include "shmccl/npu.hpp"

namespace shmccl::npu::detail {
namespace {

// Bumped in the child after fork(): streams created before it have no worker thread there and
// their locks may be held by parent threads that do not exist. Relaxed is enough: the handler runs
// on the only thread of the child before fork() returns, and threads the child starts later
// synchronize with it through their creation.
std::atomic<uint64_t> g_fork_generation{0};

}  // namespace

uint64_t fork_generation() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr,
                   [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)registered;
  return g_fork_generation.load(std::memory_order_relaxed);
}

namespace {

// The stream (its State) whose task the calling thread is running, if any: a worker sets it once
// for its whole life, run_sync around an inline task. Lets run_sync nest and synchronize refuse
// to wait for itself.
thread_local const void* t_running_stream = nullptr;
// Set while a helper (not a worker) runs a task: see running_helped_task().
thread_local bool t_running_helped_task = false;

// The address of t_running_stream. Out of line: in a shared library every access to a
// thread_local is a call, which the compiler repeats after each call it cannot see into.
[[gnu::noinline]] const void*& running_stream_slot() {
  return t_running_stream;
}

// Helped streams (see State::helped_until): the idle worker keeps polling for this many poll
// periods (SHMCCL_HELPED_POLL_TIME) after the last helped task.
constexpr int kHelpedWindowPolls = 10;

// Read as each stream is made (rarely): tests set it per stream.
std::chrono::nanoseconds helped_poll_period() {
  return std::chrono::nanoseconds(
      static_cast<int64_t>(config::get_seconds("SHMCCL_HELPED_POLL_TIME") * 1e9));
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a non-std::exception";
  }
}

// Requires event.mutex held. Completes `generation`; only the latest one sets the event's public
// state (an older marker finishing late must not mark a newer record completed).
void complete_generation_locked(EventState& event, uint64_t generation,
                                const std::exception_ptr& stream_error) {
  std::erase(event.pending_generations, generation);
  if (generation != event.record_generation) return;
  event.completed = true;
  event.error = stream_error;
  if (event.enable_timing) event.completed_at = std::chrono::steady_clock::now();
}

// Makes a stream's device current on the thread that runs its tasks; false (the thread keeps its
// device) for a device index beyond SHMCCL_NPU_DEVICE_COUNT, which tests give streams.
bool make_device_current(int device) {
  try {
    npu::set_device(device);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Requires event.mutex held. Generation `generation`, just taken, is pending until completed.
void mark_pending_locked(EventState& event, uint64_t generation) {
  event.completed = false;
  event.error = nullptr;
  event.pending_generations.push_back(generation);
  event.pending_fork_generation = fork_generation();
}

// Completes `generation` and wakes who waits for the event (a record's marker, or the task that
// records itself: begin_task_record).
void complete_generation(EventState& event, uint64_t generation,
                         const std::exception_ptr& stream_error) {
  {
    std::lock_guard<std::mutex> lock(event.mutex);
    complete_generation_locked(event, generation, stream_error);
  }
  event.completed_cv.notify_all();
}

}  // namespace

bool running_helped_task() {
  return t_running_helped_task;
}

bool running_stream_task() {
  return running_stream_slot() != nullptr;
}

bool generation_completed_locked(const EventState& event, uint64_t generation) {
  return std::find(event.pending_generations.begin(), event.pending_generations.end(),
                   generation) == event.pending_generations.end();
}

uint64_t begin_task_record(EventState& event) {
  std::lock_guard<std::mutex> lock(event.mutex);
  const uint64_t generation = ++event.record_generation;
  event.recorded = true;
  mark_pending_locked(event, generation);
  return generation;
}

void complete_task_record(EventState& event, uint64_t generation, const std::exception_ptr& error) {
  complete_generation(event, generation, error);
}

void throw_if_pending_from_before_fork(const EventState& event, uint64_t generation,
                                       const char* what) {
  if (event.pending_fork_generation == g_fork_generation.load(std::memory_order_relaxed) ||
      generation_completed_locked(event, generation)) [[likely]] {
    return;
  }
  throw InvalidArgument(shmccl::detail::concat(
      what,
      ": the event was recorded before fork() and its work had not completed; that work "
      "runs in the parent process only, so the child would wait for it forever"));
}

void wait_event_completed(EventState& event) {
  std::unique_lock<std::mutex> lock(event.mutex);
  const uint64_t generation = event.record_generation;
  throw_if_pending_from_before_fork(event, generation, "Event.synchronize()");
  event.completed_cv.wait(lock, [&] { return generation_completed_locked(event, generation); });
}

StreamImpl::State::State(int device_index, uint64_t stream_id)
    : device(device_index),
      id(stream_id),
      fork_generation(detail::fork_generation()),
      poll_period(helped_poll_period()) {}

StreamImpl::StreamImpl(int device, uint64_t id)
    : device_(device), id_(id), state_(std::make_shared<State>(device, id)) {}

StreamImpl::~StreamImpl() {
  State& s = *state_;
  // In a forked child the worker does not exist: joining would hang. Its State stays referenced
  // by the parent's worker closure, so nothing here is freed either.
  if (s.fork_generation != g_fork_generation.load(std::memory_order_relaxed)) return;

  std::thread worker;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
    worker = std::move(s.worker);
    wake = std::exchange(s.worker_sleeping, false);
  }
  if (wake) s.work_cv.notify_one();
  if (!worker.joinable()) return;  // never enqueued to: nothing can be pending
  if (running_stream_slot() == &s || worker.get_id() == std::this_thread::get_id()) {
    // A task of this stream dropped its last handle: on the worker (maybe from inside another
    // stream's task it nests into), or on a thread that helped it (help_through), where joining
    // would wait for ourselves: the worker waits for this task's ticket before it runs the next
    // one. The worker keeps the State alive and drains the rest of the queue once this task is
    // counted.
    worker.detach();
    return;
  }
  worker.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    error = std::move(s.error);
  }
  if (error) {
    SHMCCL_WARN(kDevice, "npu:", device_, " stream ", id_,
                " destroyed with an error no synchronize() saw: ", describe(error));
  }
}

void StreamImpl::check_usable() const {
  if (state_->fork_generation != g_fork_generation.load(std::memory_order_relaxed)) [[unlikely]]
    throw_unusable();
}

void StreamImpl::throw_unusable() const {
  throw InvalidArgument(
      shmccl::detail::concat("npu:", device_, " stream ", id_,
                             " was created before fork() and cannot be used in the child process"));
}

void StreamImpl::worker_loop(const std::shared_ptr<State>& state) {
  State& s = *state;
  char name[16];
  std::snprintf(name, sizeof(name), "npu%d:s%llu", s.device, static_cast<unsigned long long>(s.id));
  pthread_setname_np(pthread_self(), name);
  t_running_stream = &s;
  // Work on a stream runs with the stream's device current (as CUDA does): a task that allocates
  // (the staging buffers of an asynchronous host-tensor collective) does so on that device, not on
  // device 0 of a fresh thread.
  make_device_current(s.device);

  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    if (s.queue.empty()) {
      if (s.stop) return;
      // No spinning before blocking: measured on the 2-core development box, a bounded spin
      // (3 or 20 us, worker and/or synchronizer side) made every hand-off benchmark slower
      // (e.g. enqueue + synchronize 7.6 -> 10.5 us), as the spinner takes the core the thread it
      // waits for needs.
      s.worker_sleeping = true;
      const auto now = std::chrono::steady_clock::now();
      if (now < s.helped_until) {
        s.worker_polling = true;
        s.work_cv.wait_until(lock, now + s.poll_period);
        s.worker_polling = false;
      } else {
        s.work_cv.wait(lock);
      }
      s.worker_sleeping = false;
      continue;
    }
    const uint64_t ticket = s.queue.front().ticket;
    if (s.completed.load(std::memory_order_seq_cst) + 1 < ticket) {
      // A task run inline (run_sync) holds the ticket before: its completion wakes us, since it
      // reads worker_blocked after storing `completed` and we read `completed` after this store.
      s.worker_blocked.store(true, std::memory_order_seq_cst);
      if (s.completed.load(std::memory_order_seq_cst) + 1 < ticket) s.work_cv.wait(lock);
      s.worker_blocked.store(false, std::memory_order_relaxed);
      continue;
    }
    StreamTask task = std::move(s.queue.front().run);
    s.queue.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    // Release the captures before completing the task and without the lock: they may hold the
    // last handle of this very stream (see ~StreamImpl), and a synchronizer that returns should
    // find them released.
    task = nullptr;
    lock.lock();
    complete_locked(s, lock, ticket, std::move(error));
  }
}

void StreamImpl::complete_locked(State& s, std::unique_lock<std::mutex>& lock, uint64_t ticket,
                                 std::exception_ptr error) {
  if (error && !s.error) s.error = std::move(error);
  s.completed.store(ticket, std::memory_order_release);  // idle()'s acquire loads pair with it
  // The worker checks `completed` under the mutex before it blocks for a helper's task.
  const bool wake_worker = s.worker_blocked.load(std::memory_order_relaxed);
  if (s.sync_waiters.load(std::memory_order_relaxed) > 0 || wake_worker) {
    lock.unlock();
    if (wake_worker) s.work_cv.notify_one();
    s.done_cv.notify_all();
    lock.lock();
  }
}

void StreamImpl::help_through(State& s, uint64_t target) {
  const void*& running_stream = running_stream_slot();
  // A task of this stream waiting for a later one would wait for itself; leave it to the caller.
  if (running_stream == &s) return;
  if (s.fork_generation != g_fork_generation.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    const uint64_t completed = s.completed.load(std::memory_order_seq_cst);
    // Started elsewhere (the worker popped it, or run_sync runs one inline): that runner goes on.
    if (s.queue.empty() || s.queue.front().ticket != completed + 1) return;
    if (completed >= target && !s.queue.front().marker) return;
    Task task = std::move(s.queue.front());
    s.queue.pop_front();
    if (!task.marker && s.poll_period.count() > 0) {
      s.helped_until = std::chrono::steady_clock::now() + kHelpedWindowPolls * s.poll_period;
    }
    lock.unlock();
    std::exception_ptr error;
    {
      // As on the worker: the stream's device is current and the stream counts as running. The
      // caller's current streams stay current: a helpable task (a collective) queues nothing.
      const int caller_device = npu::current_device();
      const bool switched = caller_device != s.device && make_device_current(s.device);
      const void* outer = std::exchange(running_stream, &s);
      const bool outer_helped = std::exchange(t_running_helped_task, true);
      try {
        task.run();
      } catch (...) {
        error = std::current_exception();
      }
      task.run = nullptr;  // release the captures before completing, as the worker does
      t_running_helped_task = outer_helped;
      running_stream = outer;
      if (switched) npu::set_device(caller_device);
    }
    lock.lock();
    complete_locked(s, lock, task.ticket, std::move(error));
  }
}

void StreamImpl::start_now(State& s, uint64_t target) {
  if (s.fork_generation != g_fork_generation.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.completed.load(std::memory_order_relaxed) >= target || !s.worker_sleeping) return;
  s.worker_sleeping = false;
  lock.unlock();
  s.work_cv.notify_one();
}

StreamImpl::Helper StreamImpl::enqueue_helpable(StreamTask task) {
  check_usable();
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  uint64_t ticket = 0;
  const bool wake = push_locked(std::move(task), &ticket, /*marker=*/false, /*helpable=*/true);
  lock.unlock();
  if (wake) s.work_cv.notify_one();
  return Helper(state_, ticket);
}

void StreamImpl::Helper::operator()(bool run_here) const {
  const std::shared_ptr<State> state = state_.lock();
  if (state == nullptr) return;
  if (run_here) {
    help_through(*state, ticket_);
  } else {
    start_now(*state, ticket_);
  }
}

void StreamImpl::Helper::await_recorded() const {
  const std::shared_ptr<State> state = state_.lock();
  if (state == nullptr || state->completed.load(std::memory_order_acquire) >= ticket_) return;
  // A stream of the parent, in a fork child: nobody here runs or counts its tasks.
  if (state->fork_generation != g_fork_generation.load(std::memory_order_relaxed)) return;
  // The task is over: whoever ran it is about to count it (under the mutex).
  std::unique_lock<std::mutex> lock(state->mutex);
  wait_completed_locked(*state, lock, ticket_, std::chrono::steady_clock::time_point::max());
}

bool StreamImpl::push_locked(StreamTask task, uint64_t* ticket, bool marker, bool helpable) {
  State& s = *state_;
  // Not after stop: a task draining during destruction may still enqueue, and the worker that
  // is draining runs it; a new worker would outlive the stream.
  if (!s.worker.joinable() && !s.stop) {
    const shmccl::detail::ScopedSignalBlock no_signals;  // the application's signals are not ours
    s.worker = std::thread([state = state_] { worker_loop(state); });
  }
  // The slot first: a bad_alloc must leave no ticket behind without a task (every later wait
  // would wait for it). Nobody sees the slot before it is filled: the queue is read under the
  // mutex held here.
  s.queue.emplace_back();
  const uint64_t mine = s.enqueued.fetch_add(1, std::memory_order_seq_cst) + 1;
  s.queue.back() = Task{mine, std::move(task), marker};
  if (ticket != nullptr) *ticket = mine;
  // A task running inline holds an earlier ticket: the worker then waits for it (see worker_loop).
  // A polling worker finds a helpable task or a marker within a period, if no waiter ran it.
  if (s.worker_sleeping && !(s.worker_polling && (helpable || marker))) {
    s.worker_sleeping = false;
    return true;
  }
  return false;
}

bool StreamImpl::wait_completed_locked(State& s, std::unique_lock<std::mutex>& lock,
                                       uint64_t target,
                                       std::chrono::steady_clock::time_point deadline) {
  // sync_waiters before `completed` (seq_cst both): an inline task's completion stores
  // `completed` and then reads sync_waiters, so one of the two sees the other.
  s.sync_waiters.fetch_add(1, std::memory_order_seq_cst);
  const auto done = [&] { return s.completed.load(std::memory_order_seq_cst) >= target; };
  if (done()) {
    s.sync_waiters.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  bool finished = true;
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    s.done_cv.wait(lock, done);
  } else {
    finished = s.done_cv.wait_until(lock, deadline, done);
  }
  s.sync_waiters.fetch_sub(1, std::memory_order_relaxed);
  return finished;
}

void StreamImpl::enqueue(StreamTask task) {
  check_usable();
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const bool wake = push_locked(std::move(task));
  lock.unlock();
  if (wake) s.work_cv.notify_one();
}

void StreamImpl::run_sync(const std::function<void()>& task) {
  State& s = *state_;
  const void*& running_stream = running_stream_slot();  // one thread-local lookup, not three
  if (running_stream == &s) {  // inside one of our own tasks: this is already stream order
    task();
    return;
  }
  check_usable();
  // Idle (everything accepted has completed): take the next ticket and run here, without the
  // mutex. Counting the task as enqueued keeps the stream busy, so synchronizers wait for it and
  // tasks queued meanwhile stay behind it (the worker waits for their ticket's turn).
  const uint64_t completed = s.completed.load(std::memory_order_acquire);
  uint64_t expected = completed;
  if (s.enqueued.load(std::memory_order_relaxed) == completed &&
      s.enqueued.compare_exchange_strong(expected, completed + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) [[likely]] {
    std::exception_ptr error;
    const void* outer = std::exchange(running_stream, &s);
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    running_stream = outer;
    // seq_cst: then the sleepers' flags (Dekker with worker_loop and wait_completed_locked).
    s.completed.store(completed + 1, std::memory_order_seq_cst);
    if (s.worker_blocked.load(std::memory_order_seq_cst) ||
        s.sync_waiters.load(std::memory_order_seq_cst) != 0) [[unlikely]] {
      // Taking the mutex orders this after a sleeper's check (done under it): it is waiting now.
      { std::lock_guard<std::mutex> lock(s.mutex); }
      s.work_cv.notify_one();
      s.done_cv.notify_all();
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  // Busy: queue the task and wait for it. `task` and `error` outlive the wrapper: we wait for it
  // below. The worker writes `error` before it takes the mutex to count the task completed; we
  // read it after seeing that count under the same mutex, so the write happens-before the read.
  std::exception_ptr error;
  std::unique_lock<std::mutex> lock(s.mutex);
  uint64_t ticket = 0;
  const bool wake = push_locked(
      [&task, &error] {
        try {
          task();
        } catch (...) {
          error = std::current_exception();
        }
      },
      &ticket);
  if (wake) {
    lock.unlock();
    s.work_cv.notify_one();
    lock.lock();
  }
  wait_completed_locked(s, lock, ticket, std::chrono::steady_clock::time_point::max());
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

bool StreamImpl::runs_here() const {
  return running_stream_slot() == state_.get();
}

bool StreamImpl::idle() const {
  check_usable();
  // Without the mutex: a thread sees its own enqueues, and a completion it sees happened-before
  // (release/acquire with the completions' stores); concurrent enqueues by other threads are
  // unordered anyway.
  const uint64_t completed = state_->completed.load(std::memory_order_acquire);
  return completed == state_->enqueued.load(std::memory_order_acquire);
}

bool StreamImpl::worker_polls() const {
  check_usable();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->worker_sleeping && state_->worker_polling;
}

uint64_t StreamImpl::pending() const {
  check_usable();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->enqueued - state_->completed;
}

void StreamImpl::synchronize() {
  synchronize_for(std::chrono::nanoseconds::max());
}

bool StreamImpl::synchronize_for(std::chrono::nanoseconds timeout) {
  const bool finished = wait_idle(timeout);
  if (std::exception_ptr error = take_error()) std::rethrow_exception(error);
  return finished;
}

bool StreamImpl::wait_idle(std::chrono::nanoseconds timeout) {
  State& s = *state_;
  SHMCCL_CHECK_ARG(t_running_stream != &s, "npu:", device_, " stream ", id_,
                   " synchronize() called from one of its own tasks: it would wait for itself");
  check_usable();
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = timeout >= std::chrono::steady_clock::time_point::max() - now
                            ? std::chrono::steady_clock::time_point::max()
                            : now + timeout;
  std::unique_lock<std::mutex> lock(s.mutex);
  return wait_completed_locked(s, lock, s.enqueued, deadline);
}

std::exception_ptr StreamImpl::take_error() {
  check_usable();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return std::exchange(state_->error, nullptr);
}

void StreamImpl::record(const std::shared_ptr<EventState>& event) {
  check_usable();
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  uint64_t generation = 0;
  {
    // Under the stream lock: the new generation becomes visible to wait() only together with
    // its marker's place in the queue, so no wait can be queued ahead of the marker it needs.
    std::lock_guard<std::mutex> event_lock(event->mutex);
    generation = ++event->record_generation;
    event->recorded = true;
    if (s.enqueued == s.completed) {
      // Idle stream: the marker would be next and run at once. Complete it here. No one can be
      // waiting for a generation that did not exist until now, so there is no one to notify.
      complete_generation_locked(*event, generation, s.error);
      return;
    }
    mark_pending_locked(*event, generation);
  }
  // `raw` stays valid while the marker runs: the worker or a helper runs it, and each holds a
  // reference to the State.
  State* raw = &s;
  bool wake = false;
  try {
    wake = push_locked(
        [raw, event = event, generation] {  // not [event]: a const member, copied by each move
          std::exception_ptr stream_error;
          {
            std::lock_guard<std::mutex> stream_lock(raw->mutex);
            stream_error = raw->error;  // work queued before the record failed
          }
          complete_generation(*event, generation, stream_error);
        },
        /*ticket=*/nullptr, /*marker=*/true);
  } catch (...) {
    // Not queued (no worker thread could start, or no memory): the generation must not stay
    // pending, or every wait for it would wait forever. It completes with this error.
    complete_generation(*event, generation, std::current_exception());
    throw;
  }
  lock.unlock();
  if (wake) s.work_cv.notify_one();
}

void StreamImpl::wait(const std::shared_ptr<EventState>& event) {
  check_usable();
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> event_lock(event->mutex);
    generation = event->record_generation;
    if (generation_completed_locked(*event, generation)) return;  // nothing to wait for
    throw_if_pending_from_before_fork(*event, generation, "Event.wait(stream)");
  }
  enqueue([event = event, generation] {  // not [event]: a const member, copied by each move
    std::unique_lock<std::mutex> event_lock(event->mutex);
    event->completed_cv.wait(event_lock,
                             [&] { return generation_completed_locked(*event, generation); });
  });
}

void StreamImpl::wait_for_task(const std::shared_ptr<EventState>& event, uint64_t generation) {
  {
    std::lock_guard<std::mutex> event_lock(event->mutex);
    throw_if_pending_from_before_fork(*event, generation, "Work.synchronize()");
  }
  enqueue([event = event, generation] {
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> event_lock(event->mutex);
      event->completed_cv.wait(event_lock,
                               [&] { return generation_completed_locked(*event, generation); });
      // A later record would have replaced the error: a task's record has only this generation.
      if (event->record_generation == generation) error = event->error;
    }
    if (error) std::rethrow_exception(error);
  });
}

void StreamImpl::fail_with(std::exception_ptr error) {
  enqueue([error = std::move(error)] { std::rethrow_exception(error); });
}

}  // namespace shmccl::npu::detail
