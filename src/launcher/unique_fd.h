// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// UniqueFd: the single owner of a file descriptor; closes it on destruction. Move-only. Not
// thread-safe (like the int it wraps).
#pragma once

#include <unistd.h>

#include <utility>

namespace shmccl::launcher {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the current fd (if any) and owns `fd` instead.
  void reset(int fd = -1) noexcept {
    // close(2) is not retried on EINTR: on Linux the fd is released either way.
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace shmccl::launcher
