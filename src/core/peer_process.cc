// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/peer_process.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/check.h"

namespace shmccl::detail {

// glibc has wrappers for pidfd_open and pidfd_getfd only since 2.36: the syscalls, directly.
FileDescriptor open_pidfd(pid_t pid) {
  return FileDescriptor(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

bool pidfds_refused(int error) {
  return error == ENOSYS || error == EPERM || error == EACCES;
}

PeerFile open_peer_file(pid_t pid, int fd) {
  PeerFile result;
  std::string refused;  // how the pidfd way was refused, for the message
  FileDescriptor pidfd = open_pidfd(pid);
  if (pidfd) {
    const int raw = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0));
    if (raw >= 0) {
      result.file.reset(raw);
      return result;
    }
    result.error = errno;
    refused = concat("pidfd_getfd: ", std::strerror(result.error));
  } else {
    result.error = errno;
    refused = concat("pidfd_open: ", std::strerror(result.error));
  }
  if (!pidfds_refused(result.error)) {  // ESRCH (gone), EBADF (no such fd), EMFILE...
    result.failure = std::move(refused);
    return result;
  }
  const std::string path = concat("/proc/", pid, "/fd/", fd);
  const int raw = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (raw >= 0) {
    result.file.reset(raw);
    result.error = 0;
    return result;
  }
  const int open_error = errno;
  result.failure = concat(refused, "; open ", path, ": ", std::strerror(open_error));
  // No such entry: the process or its descriptor is gone; tell which.
  result.error = open_error != ENOENT ? open_error : exited_per_proc(pid) ? ESRCH : EBADF;
  return result;
}

bool exited_per_proc(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FileDescriptor stat(::open(path, O_RDONLY | O_CLOEXEC));
  if (!stat) return errno == ENOENT || errno == ESRCH;  // EACCES and the like: it exists
  // "pid (comm) S ...": the state follows the last ')' (the command may hold parentheses).
  char text[512];
  ssize_t bytes;
  do {
    bytes = ::read(stat.get(), text, sizeof(text));
  } while (bytes == -1 && errno == EINTR);
  if (bytes <= 0) return bytes == -1 && errno == ESRCH;  // it exited after the open
  const std::string_view line(text, static_cast<size_t>(bytes));
  const size_t close = line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace shmccl::detail
