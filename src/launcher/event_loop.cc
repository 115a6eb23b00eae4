// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/event_loop.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/logging.h"

namespace shmccl::launcher {
namespace {

// Room for every pid, pipe and timer of a large group; next_sqe() submits early when full.
constexpr unsigned kRingEntries = 256;
constexpr EventLoop::OpId kCancelTag = 0;

}  // namespace

EventLoop::EventLoop(Backend backend) {
  if (backend == Backend::kPoll) return;
  const int result = io_uring_queue_init(kRingEntries, &ring_, 0);
  if (result < 0) {
    SHMCCL_INFO(kLaunch, "io_uring refused (", std::strerror(-result), "): waiting with ppoll");
    return;
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
  const bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_POLL_ADD) &&
                         io_uring_opcode_supported(probe, IORING_OP_TIMEOUT) &&
                         io_uring_opcode_supported(probe, IORING_OP_ASYNC_CANCEL);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!supported) {
    SHMCCL_INFO(kLaunch, "io_uring lacks the operations used: waiting with ppoll");
    io_uring_queue_exit(&ring_);
    return;
  }
  uring_ = true;
}

EventLoop::~EventLoop() {
  if (uring_) io_uring_queue_exit(&ring_);
}

io_uring_sqe* EventLoop::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // The submission queue is full: hand what is queued to the kernel and try again.
    const int submitted = io_uring_submit(&ring_);
    if (submitted < 0) detail::throw_system_error("io_uring_submit", -submitted);
    sqe = io_uring_get_sqe(&ring_);
    SHMCCL_CHECK(sqe != nullptr, "io_uring submission queue still full after submit");
  }
  return sqe;
}

EventLoop::OpId EventLoop::add_poll(int fd, unsigned poll_mask, Handler handler) {
  const OpId id = next_id_++;
  Pending& pending = handlers_[id];
  pending.handler = std::move(handler);
  if (!uring_) {
    pending.fd = fd;
    pending.poll_mask = poll_mask;
    return id;
  }
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_add(sqe, fd, poll_mask);
  io_uring_sqe_set_data64(sqe, id);
  return id;
}

EventLoop::OpId EventLoop::add_timeout(std::chrono::nanoseconds delay, Handler handler) {
  const OpId id = next_id_++;
  Pending& pending = handlers_[id];  // node storage: the timespec's address is stable
  pending.handler = std::move(handler);
  if (!uring_) {
    pending.deadline = Clock::now() + delay;
    return id;
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(delay);
  pending.timespec.tv_sec = seconds.count();
  pending.timespec.tv_nsec = (delay - seconds).count();
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_timeout(sqe, &pending.timespec, 0, 0);
  io_uring_sqe_set_data64(sqe, id);
  return id;
}

void EventLoop::cancel(OpId id) {
  auto found = handlers_.find(id);
  if (found == handlers_.end() || !found->second.handler) return;
  if (!uring_) {
    handlers_.erase(found);  // nothing in the kernel to take back
    return;
  }
  // The entry stays until the operation's own completion arrives: a timeout not yet submitted
  // still needs its timespec. ASYNC_CANCEL finds polls and timeouts alike; its own completion
  // (tagged 0) is ignored, and so is the operation's -ECANCELED, since its handler is empty.
  found->second.handler = nullptr;
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_cancel64(sqe, id, 0);
  io_uring_sqe_set_data64(sqe, kCancelTag);
}

void EventLoop::run_once() {
  if (uring_) {
    run_once_with_io_uring();
  } else {
    run_once_with_ppoll();
  }
}

void EventLoop::run_once_with_io_uring() {
  int result = io_uring_submit_and_wait(&ring_, 1);
  if (result < 0 && result != -EINTR)
    detail::throw_system_error("io_uring_submit_and_wait", -result);

  // Collect first, then dispatch: handlers queue new SQEs and may cancel ids seen in this batch.
  std::vector<std::pair<OpId, int>> completions;
  unsigned head;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    completions.emplace_back(io_uring_cqe_get_data64(cqe), cqe->res);
  }
  io_uring_cq_advance(&ring_, static_cast<unsigned>(completions.size()));
  dispatch(completions);
}

void EventLoop::run_once_with_ppoll() {
  std::vector<pollfd> fds;
  std::vector<OpId> polled;
  Clock::time_point first_deadline = Clock::time_point::max();
  for (const auto& [id, pending] : handlers_) {
    if (pending.fd >= 0) {
      fds.push_back(pollfd{pending.fd, static_cast<short>(pending.poll_mask), 0});
      polled.push_back(id);
    } else {
      first_deadline = std::min(first_deadline, pending.deadline);
    }
  }
  timespec wait{};
  const timespec* wait_for = nullptr;  // no timeout pending: until an fd is ready
  if (first_deadline != Clock::time_point::max()) {
    const auto left = std::max(first_deadline - Clock::now(), Clock::duration::zero());
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
    wait.tv_sec = seconds.count();
    wait.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count();
    wait_for = &wait;
  }
  const int ready = ::ppoll(fds.data(), fds.size(), wait_for, nullptr);
  if (ready < 0 && errno != EINTR) detail::throw_system_error("ppoll", errno);

  // As io_uring reports them: a poll completes with its ready events (POLLNVAL for a closed fd,
  // where io_uring says -EBADF), expired timeouts with -ETIME, earliest first.
  std::vector<std::pair<OpId, int>> completions;
  for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
    if (fds[i].revents != 0) completions.emplace_back(polled[i], fds[i].revents);
  }
  std::vector<std::pair<Clock::time_point, OpId>> expired;
  const auto now = Clock::now();
  for (const auto& [id, pending] : handlers_) {
    if (pending.fd < 0 && pending.deadline <= now) expired.emplace_back(pending.deadline, id);
  }
  std::sort(expired.begin(), expired.end());
  for (const auto& [deadline, id] : expired)
    completions.emplace_back(id, -ETIME);
  dispatch(completions);
}

void EventLoop::dispatch(const std::vector<std::pair<OpId, int>>& completions) {
  for (const auto& [id, res] : completions) {
    if (id == kCancelTag) continue;
    auto found = handlers_.find(id);
    if (found == handlers_.end()) continue;
    Handler handler = std::move(found->second.handler);
    handlers_.erase(found);
    if (handler) handler(res);  // empty: cancelled
  }
}

}  // namespace shmccl::launcher
