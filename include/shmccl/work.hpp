// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Work: the handle of a collective, with the contract of c10d's Work. is_completed() never
// blocks; wait() blocks the host until the collective is done and rethrows its error;
// synchronize() makes the caller's current stream wait for it instead of the host. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "shmccl/npu.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

class Work {
 public:
  static constexpr std::chrono::milliseconds kNoTimeout{-1};

  explicit Work(std::string description, uint64_t sequence = 0);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once the collective finished, successfully or not.
  bool is_completed() const;
  // True when it finished without error.
  bool is_success() const;
  // The error it finished with, or nullptr.
  std::exception_ptr exception() const;
  // Blocks until it finished. Returns true; rethrows its error (a shmccl::Error, or std::bad_alloc
  // as itself). With a timeout
  // (>= 0; a negative one, kNoTimeout, is none; a huge one, milliseconds::max(), waits as long
  // as it takes), returns false if it has not finished by then (the collective goes on; its own
  // timeout and peer checks bound it once it started). Unlike c10d's Work::wait, which throws
  // then: a caller that ignores the result must not read the outputs. Without one, a collective
  // that has not started yet runs on the calling thread (it is next in its stream's order): waiting
  // at once costs what a synchronous call does, not two thread hand-offs.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout);
  // Orders the calling thread's current NPU stream after the collective (no host block): work
  // queued there afterwards starts once the collective is done. Errors surface at that stream's
  // next synchronisation.
  void synchronize();

  // "all_gather_into_tensor_uneven" etc. and the group's sequence number of this collective.
  const std::string& description() const { return description_; }
  uint64_t sequence() const { return sequence_; }

  // For the library: completes the work (once), with an error or not.
  void finish(std::exception_ptr error = nullptr);

 protected:
  // For work that runs as a task of a device stream (runs_on_stream): synchronize() then orders
  // the caller's stream after it, and wait(), is_completed() and synchronize() call help() while
  // it is not completed.
  // `device`: see device_.
  Work(std::string description, uint64_t sequence, bool runs_on_stream, int device = -1);
  // help(true) runs the work on the calling thread if no one has started it yet; help(false)
  // makes its stream's thread start it now. Does nothing here.
  virtual void help(bool run_here) const;

 private:
  // InvalidArgument in a child forked while this work was not completed: nothing runs it there.
  void throw_if_made_before_fork() const;

  const std::string description_;
  const uint64_t sequence_;
  const bool runs_on_stream_ = false;
  // The NPU device whose current stream synchronize() orders (the collective's tensors'); -1:
  // the calling thread's current device.
  const int device_ = -1;
  const uint64_t fork_generation_;  // the process's, when the work was made (see stream_impl.h)
  mutable std::mutex mutex_;
  std::condition_variable completed_cv_;
  // Set once, by finish() under mutex_ (for completed_cv_'s waiters), with a release store after
  // error_: a reader that sees it (acquire) reads error_ without the mutex, which a call waited at
  // once would otherwise take twice more.
  std::atomic<bool> completed_{false};
  std::exception_ptr error_;
  // What synchronize() orders streams after, made by the first one before the work completed
  // (most works are waited, never synchronized: no event for them); finish() completes it.
  std::shared_ptr<npu::detail::EventState> completion_event_;
  uint64_t completion_generation_ = 0;
};

}  // namespace shmccl

#pragma GCC visibility pop
