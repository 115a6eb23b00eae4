// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ConsoleSink: shmrun's stdout or stderr as the ranks' lines reach it, written without ever
// blocking the supervisor. A reader that stops reading (`shmrun ... | less` left unscrolled, a
// stopped terminal, a stalled log collector) must not keep shmrun from noticing a failed rank or
// Ctrl-C, as a blocking write(2) did: what the console does not take at once waits in the sink's
// backlog, the supervisor writes it when the console becomes writable (POLLOUT on fd()), and stops
// reading the ranks' pipes while the backlog is large, so that the ranks wait in their own writes
// as they would writing to the console directly. Nothing is dropped unless the reader is gone.
//
// How a write avoids blocking without touching the console's file status flags (O_NONBLOCK there
// would be shared with the shell and every process holding the same terminal or pipe): a pipe or
// terminal is opened anew through /proc/self/fd, which gives shmrun its own non-blocking open
// file; a socket is written with send(MSG_DONTWAIT); where neither works, a write of at most
// PIPE_BUF bytes follows a poll that says the fd has room. Regular files never stall: they are
// written directly. Not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/file_descriptor.h"

namespace shmccl::launcher {

class ConsoleSink {
 public:
  // `fd` (not owned) is shmrun's stdout or stderr.
  explicit ConsoleSink(int fd);
  ConsoleSink(const ConsoleSink&) = delete;
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  // Writes what the console takes now and keeps the rest, in order, for flush().
  void write(std::string_view text);
  // Writes as much of the backlog as the console takes now.
  void flush();

  // The fd to poll for POLLOUT while backlog() > 0.
  int fd() const { return own_fd_ ? own_fd_.get() : fd_; }
  size_t backlog() const { return backlog_.size() - backlog_start_; }
  // The console's reader is gone (EPIPE): everything since is dropped. Text whose write fails
  // otherwise (a full disk, a terminal hung up) is dropped alone.
  bool gone() const { return gone_; }
  // For shmrun's last words, after the loop: waits until the console took the backlog, a signal
  // is pending on `signal_fd` (not consumed), or `bound` passed (none: no bound). Returns whether
  // everything was written; what was not is dropped.
  bool drain(int signal_fd, std::optional<std::chrono::milliseconds> bound);
  // Drops the backlog (the job ends at once and the reader takes nothing more), but for a '\n'
  // that ends a line the console took only part of: written now if the console takes it, else
  // before the next text (it does not count as backlog: nothing waits for it).
  void abandon();

 private:
  enum class Method {
    kOwnNonBlockingFile,  // own_fd_: the pipe or terminal reopened with O_NONBLOCK
    kSocket,              // send(MSG_DONTWAIT)
    kPollThenWrite,       // poll, then at most PIPE_BUF bytes (where reopening failed)
    kDirect,              // a regular file: write(2) never waits for a reader
  };
  // Writes a prefix of `text` without blocking; returns its length (0: the console is full).
  size_t write_some(std::string_view text);
  // Writes the '\n' a cut line is owed (line_cut_), if the console takes it now.
  void end_cut_line();

  int fd_;
  FileDescriptor own_fd_;
  Method method_ = Method::kDirect;
  std::string backlog_;
  size_t backlog_start_ = 0;  // written bytes at the front of backlog_, trimmed now and then
  bool gone_ = false;
  bool at_line_start_ = true;  // what the console took so far ends with '\n'
  bool line_cut_ = false;      // abandon() cut a line whose '\n' the console has not taken yet
};

}  // namespace shmccl::launcher
