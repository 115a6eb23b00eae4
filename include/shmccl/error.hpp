// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The one error hierarchy of shmccl. Every failure a user can see is a shmccl::Error (a
// std::runtime_error), so `catch (const std::runtime_error&)` keeps working for code written
// against torch. The subclasses let callers tell the kinds apart; docs/errors.md states the policy.
#pragma once

#include <stdexcept>
#include <string>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

// Base of everything shmccl throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something wrong (shape, dtype, split sizes, device index...). Thrown before any
// peer is made to wait.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A system call failed. what() names the call, the object (path, size) and strerror(errno).
class SystemError : public Error {
 public:
  SystemError(const std::string& what, int error_code) : Error(what), error_code_(error_code) {}
  int error_code() const noexcept { return error_code_; }

 private:
  int error_code_;
};

// Device (arena) memory or /dev/shm is exhausted.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died, aborted or disagreed about the collective being run.
class RemoteError : public Error {
 public:
  using Error::Error;
};

}  // namespace shmccl

#pragma GCC visibility pop
