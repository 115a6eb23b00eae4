// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Another process of the job, reached by the ways the kernel and the sandbox allow. The precise
// ways are pidfds: pidfd_getfd takes a peer's file without a race against pid reuse, and a pidfd
// becomes readable when its process exits. Where they are refused, the same is done through
// /proc:
//  - pidfd_getfd needs ptrace *attach* rights, which Yama's ptrace_scope 1 (Ubuntu's default)
//    grants only to ancestors, so sibling ranks are refused (EPERM), and so are processes in
//    containers without CAP_SYS_PTRACE on such hosts. Opening /proc/<pid>/fd/<n> needs only
//    ptrace *read* rights (same user), which Yama leaves alone.
//  - pidfd_open and pidfd_getfd do not exist before Linux 5.3 and 5.6, and valgrind does not
//    know them (ENOSYS); a seccomp filter may refuse them (EPERM). Liveness is then read from
//    /proc/<pid>/stat (a zombie counts as exited, as a pidfd has it).
#pragma once

#include <sys/types.h>

#include <string>

#include "core/file_descriptor.h"

namespace shmccl::detail {

// pidfd_open(pid): a pidfd, or an empty descriptor with errno set.
FileDescriptor open_pidfd(pid_t pid);

// True when `error` (an errno of pidfd_open or pidfd_getfd) means that pidfds are unavailable
// here, not that the process is gone: the caller then takes the /proc way.
bool pidfds_refused(int error);

// Our own descriptor of file `fd` of process `pid`: pidfd_getfd, or else an open of
// /proc/<pid>/fd/<fd> (read-write; a new open file description of the same file, which is all
// mmap needs). On failure `file` is empty and `error` is the errno of the last way tried:
// ESRCH when the process is gone, EBADF when it has no such descriptor; `failure` then says what
// was tried and how each way failed.
struct PeerFile {
  FileDescriptor file;
  int error = 0;
  std::string failure;
};
PeerFile open_peer_file(pid_t pid, int fd);

// Whether process `pid` has exited (or never existed), from /proc/<pid>/stat: no such entry, or
// a zombie. For when no pidfd can be had.
bool exited_per_proc(pid_t pid);

}  // namespace shmccl::detail
