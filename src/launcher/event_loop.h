// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// EventLoop: tells shmrun when an fd becomes ready (pidfds, pipes, the signalfd) or a delay has
// passed. Every operation is one-shot and carries a handler called from run_once() with the
// completion's result (poll: the ready events, or -errno; timeout: -ETIME when it expired).
// cancel() forgets an operation: its handler is never called. No threads, no polling sleeps:
// run_once() blocks in the kernel until something happens. Single-threaded; the loop owns its
// kernel objects.
//
// Two backends with one behaviour. io_uring (IORING_OP_POLL_ADD, IORING_OP_TIMEOUT) where the
// kernel lets us have a ring; ppoll(2) over the pending operations where it does not: Docker's
// default seccomp profile refuses io_uring since Docker 25, the io_uring_disabled sysctl (some
// distributions, hardened hosts) and gVisor refuse it too, and kernels before 5.6 cannot be probed
// for the operations used. shmrun waits on tens of fds at most, so ppoll's scan costs nothing
// there.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace shmccl::launcher {

class EventLoop {
 public:
  using Handler = std::function<void(int result)>;
  using OpId = uint64_t;

  enum class Backend {
    kAuto,  // io_uring, or ppoll where io_uring is refused
    kPoll,  // ppoll only
  };
  explicit EventLoop(Backend backend = Backend::kAuto);
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

  // Whether the loop runs on io_uring (else on ppoll: see above).
  bool uses_io_uring() const { return uring_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    Handler handler;
    __kernel_timespec timespec{};  // read by the kernel at submission (io_uring timeouts only)
    // The ppoll backend's record of the operation: an fd to poll, or a deadline.
    int fd = -1;
    unsigned poll_mask = 0;
    Clock::time_point deadline = Clock::time_point::max();
  };

  io_uring_sqe* next_sqe();
  void run_once_with_io_uring();
  void run_once_with_ppoll();
  // Runs the handlers of `completions` (id, result), in order, skipping ids cancelled meanwhile.
  void dispatch(const std::vector<std::pair<OpId, int>>& completions);

  bool uring_ = false;
  io_uring ring_{};
  OpId next_id_ = 1;  // 0 tags cancel requests, whose completions are ignored
  // Ordered: ppoll reports what is ready in one wake-up in the order the operations were queued
  // (two ranks that exit together come in rank order, as io_uring reports them in exit order),
  // not in a hash table's.
  std::map<OpId, Pending> handlers_;
};

}  // namespace shmccl::launcher
