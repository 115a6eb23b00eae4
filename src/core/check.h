// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Message building and argument checks. Checks print both sides ("expected 5 rows, got 4").
#pragma once

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shmccl/error.hpp"

namespace shmccl::detail {

template <typename T>
void append_to_stream(std::ostringstream& out, const T& value) {
  out << value;
}

template <typename T>
void append_to_stream(std::ostringstream& out, const std::vector<T>& values) {
  out << '[';
  for (size_t i = 0; i < values.size(); ++i)
    out << (i ? ", " : "") << values[i];
  out << ']';
}

// Concatenates every argument with operator<< (vectors print as [a, b, c]).
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (append_to_stream(out, args), ...);
  return out.str();
}

// Throws SystemError("<context>: <strerror(errno)>") with the current errno.
[[noreturn]] void throw_system_error(const std::string& context, int error_code);

}  // namespace shmccl::detail

// Throws shmccl::InvalidArgument with the concatenated message when `condition` is false.
#define SHMCCL_CHECK_ARG(condition, ...)                                      \
  do {                                                                        \
    if (!(condition)) [[unlikely]] {                                          \
      throw ::shmccl::InvalidArgument(::shmccl::detail::concat(__VA_ARGS__)); \
    }                                                                         \
  } while (0)

// Throws shmccl::Error when an internal invariant does not hold.
#define SHMCCL_CHECK(condition, ...)                                                    \
  do {                                                                                  \
    if (!(condition)) [[unlikely]] {                                                    \
      throw ::shmccl::Error(::shmccl::detail::concat("internal error: ", __VA_ARGS__)); \
    }                                                                                   \
  } while (0)

// Evaluates a syscall-like expression; when it returns -1, throws SystemError with errno.
#define SHMCCL_SYSCALL(expression, ...)                                                   \
  ([&]() {                                                                                \
    auto syscall_result = (expression);                                                   \
    if (syscall_result == -1) [[unlikely]] {                                              \
      ::shmccl::detail::throw_system_error(::shmccl::detail::concat(__VA_ARGS__), errno); \
    }                                                                                     \
    return syscall_result;                                                                \
  }())
