// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// FileDescriptor: the one owner of a file descriptor, used by every layer (device arenas,
// transport segments and pidfds, the launcher's pipes). Move-only; closes in its destructor.
//
// Thread safety: none of its own (like an int). Distinct objects may be used from distinct threads.
#pragma once

#include <unistd.h>

#include <utility>

namespace shmccl {

class FileDescriptor {
 public:
  FileDescriptor() noexcept = default;
  // Takes ownership of `fd` (-1: empty).
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  ~FileDescriptor() { reset(); }

  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing; returns the descriptor (-1 when empty).
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the current descriptor (if any) and takes ownership of `fd`.
  //
  // EINTR-safe by *not* retrying: on Linux close() releases the descriptor even when it reports
  // EINTR, so a retry could close a descriptor another thread has just been given. Errors from
  // close are ignored: nothing useful can be done with them in a destructor, and every file we
  // own is either shared memory or a kernel object (pidfd, eventfd, epoll) with no data to flush.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) ::close(old);
  }

 private:
  int fd_ = -1;
};

}  // namespace shmccl
