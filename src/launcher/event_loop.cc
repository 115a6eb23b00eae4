// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/event_loop.h"

#include <cerrno>
#include <vector>

#include "core/check.h"

namespace shmccl::launcher {
namespace {

// Room for every pid, pipe and timer of a large group; next_sqe() submits early when full.
constexpr unsigned kRingEntries = 256;
constexpr EventLoop::OpId kCancelTag = 0;

}  // namespace

EventLoop::EventLoop() {
  const int result = io_uring_queue_init(kRingEntries, &ring_, 0);
  if (result < 0) detail::throw_system_error("io_uring_queue_init", -result);
}

EventLoop::~EventLoop() {
  io_uring_queue_exit(&ring_);
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
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_add(sqe, fd, poll_mask);
  io_uring_sqe_set_data64(sqe, id);
  handlers_[id].handler = std::move(handler);
  return id;
}

EventLoop::OpId EventLoop::add_timeout(std::chrono::nanoseconds delay, Handler handler) {
  const OpId id = next_id_++;
  Pending& pending = handlers_[id];  // node storage: the timespec's address is stable
  pending.handler = std::move(handler);
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
  // The entry stays until the operation's own completion arrives: a timeout not yet submitted
  // still needs its timespec. ASYNC_CANCEL finds polls and timeouts alike; its own completion
  // (tagged 0) is ignored, and so is the operation's -ECANCELED, since its handler is empty.
  found->second.handler = nullptr;
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_cancel64(sqe, id, 0);
  io_uring_sqe_set_data64(sqe, kCancelTag);
}

void EventLoop::run_once() {
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
