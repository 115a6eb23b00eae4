// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// EventLoop: one io_uring that tells shmrun when an fd becomes ready (IORING_OP_POLL_ADD: pidfds,
// pipes, the signalfd) or a delay has passed (IORING_OP_TIMEOUT). Every operation is one-shot and
// carries a handler called from run_once() with the completion's result (poll: the ready events,
// or -errno; timeout: -ETIME when it expired). cancel() forgets an operation: its handler is never
// called. No threads, no polling sleeps: run_once() blocks in io_uring_enter until something
// happens. Single-threaded; the loop owns the ring.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <unordered_map>

namespace shmccl::launcher {

class EventLoop {
 public:
  using Handler = std::function<void(int result)>;
  using OpId = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // One-shot: the handler runs once `fd` has any of `poll_mask` (POLLIN, ...) or an error/hangup.
  OpId add_poll(int fd, unsigned poll_mask, Handler handler);
  // One-shot: the handler runs with -ETIME once `delay` has passed.
  OpId add_timeout(std::chrono::nanoseconds delay, Handler handler);
  // Forgets a pending operation (no-op if it already completed) and asks the kernel to drop it.
  void cancel(OpId id);

  // Submits what is queued, waits for at least one completion, runs the handlers of every
  // completion available. Handlers may add and cancel operations.
  void run_once();

 private:
  struct Pending {
    Handler handler;
    __kernel_timespec timespec{};  // read by the kernel at submission (timeouts only)
  };

  io_uring_sqe* next_sqe();

  io_uring ring_{};
  OpId next_id_ = 1;  // 0 tags cancel requests, whose completions are ignored
  std::unordered_map<OpId, Pending> handlers_;
};

}  // namespace shmccl::launcher
