// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/console_sink.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace shmccl::launcher {
namespace {

// Written bytes at the front of the backlog are trimmed once they are this many.
constexpr size_t kTrimAt = 64 * 1024;

}  // namespace

ConsoleSink::ConsoleSink(int fd) : fd_(fd) {
  struct stat info {};
  if (fstat(fd, &info) != 0) return;  // a bad fd: writes fail and mark the sink gone
  if (S_ISSOCK(info.st_mode)) {
    method_ = Method::kSocket;
  } else if (S_ISFIFO(info.st_mode) || S_ISCHR(info.st_mode)) {
    // A new open file of the same pipe or terminal: O_NONBLOCK on it is shmrun's alone.
    // O_NOCTTY: a terminal must not become shmrun's controlling terminal by being opened.
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    own_fd_.reset(open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    method_ = own_fd_ ? Method::kOwnNonBlockingFile : Method::kPollThenWrite;
  }
}

size_t ConsoleSink::write_some(std::string_view text) {
  while (true) {
    ssize_t n = -1;
    switch (method_) {
      case Method::kOwnNonBlockingFile:
        n = ::write(own_fd_.get(), text.data(), text.size());
        break;
      case Method::kSocket:
        n = ::send(fd_, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case Method::kPollThenWrite: {
        pollfd room{fd_, POLLOUT, 0};
        const int ready = poll(&room, 1, 0);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) return 0;
        // Room for PIPE_BUF bytes at least: a pipe with a free slot takes them at once.
        n = ::write(fd_, text.data(), std::min<size_t>(text.size(), PIPE_BUF));
        break;
      }
      case Method::kDirect:
        n = ::write(fd_, text.data(), text.size());
        break;
    }
    if (n > 0) {
      at_line_start_ = text[static_cast<size_t>(n) - 1] == '\n';
      return static_cast<size_t>(n);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0 && errno == EPIPE) {
      gone_ = true;
      return 0;
    }
    // Another error (a full disk, a terminal hung up): this text is dropped, as a blocking
    // write's failure dropped it; rank output must never stop the supervisor.
    return text.size();
  }
}

void ConsoleSink::write(std::string_view text) {
  if (gone_) return;
  end_cut_line();
  if (line_cut_) backlog_.push_back('\n');  // not taken now: first in the backlog
  line_cut_ = false;
  if (backlog() == 0) {
    while (!text.empty()) {
      const size_t written = write_some(text);
      if (written == 0) break;
      text.remove_prefix(written);
    }
    if (gone_) return;
  }
  backlog_.append(text);
}

void ConsoleSink::end_cut_line() {
  if (line_cut_ && !gone_ && backlog() == 0 && write_some("\n") == 1) line_cut_ = false;
  if (gone_) line_cut_ = false;
}

void ConsoleSink::flush() {
  end_cut_line();
  while (!gone_ && backlog() > 0) {
    const size_t written = write_some(std::string_view(backlog_).substr(backlog_start_));
    if (written == 0) break;
    backlog_start_ += written;
  }
  if (gone_ || backlog() == 0) {
    backlog_.clear();
    backlog_start_ = 0;
  } else if (backlog_start_ >= kTrimAt) {
    backlog_.erase(0, backlog_start_);
    backlog_start_ = 0;
  }
}

bool ConsoleSink::drain(int signal_fd, std::optional<std::chrono::milliseconds> bound) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = bound ? Clock::now() + *bound : Clock::time_point::max();
  flush();
  while (!gone_ && backlog() > 0) {
    pollfd fds[2] = {{fd(), POLLOUT, 0}, {signal_fd, POLLIN, 0}};
    int wait_ms = -1;
    if (bound) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      wait_ms = static_cast<int>(left.count());
    }
    const int ready = poll(fds, 2, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0 && fds[1].revents != 0) break;  // a signal: shmrun must go now
    flush();
  }
  const bool complete = gone_ || backlog() == 0;
  abandon();
  return complete;
}

void ConsoleSink::abandon() {
  // A line the console took only part of is ended, so that what shmrun prints next starts a line:
  // when the console does not take the '\n' now, it goes before the next text (it is no backlog:
  // nothing waits for it).
  const bool cut_line = backlog() > 0 && !gone_ && !at_line_start_;
  backlog_.clear();
  backlog_start_ = 0;
  if (cut_line) line_cut_ = true;
  end_cut_line();
}

}  // namespace shmccl::launcher
