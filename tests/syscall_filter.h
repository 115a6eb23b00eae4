// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// refuse_syscalls({SYS_pidfd_getfd}, EPERM): from then on those syscalls fail with that errno in
// the calling process (all its threads, and the threads and processes it starts), as they do for
// the tests' subjects out there: Yama's ptrace_scope 1 (Ubuntu's default) refuses pidfd_getfd
// between sibling processes with EPERM, Docker's seccomp profile refuses what it does not list,
// and older kernels and valgrind do not know pidfd_open or pidfd_getfd (ENOSYS). A seccomp
// filter, which needs no privilege, and cannot be undone: call it in a forked child.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace shmccl::testing {

inline void refuse_syscalls(std::initializer_list<long> numbers, int error) {
#if defined(__x86_64__)
  constexpr uint32_t kArchitecture = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArchitecture = AUDIT_ARCH_AARCH64;
#else
#error "refuse_syscalls: add this architecture's AUDIT_ARCH_ value"
#endif
  const uint32_t refusal = SECCOMP_RET_ERRNO | (static_cast<uint32_t>(error) & SECCOMP_RET_DATA);
  std::vector<sock_filter> program;
  // Another architecture's syscall numbers mean other calls: let them through.
  program.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArchitecture, 1, 0));
  program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  program.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  for (long number : numbers) {
    program.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(number), 0, 1));
    program.push_back(BPF_STMT(BPF_RET | BPF_K, refusal));
  }
  program.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  const sock_fprog filter{static_cast<unsigned short>(program.size()), program.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &filter) != 0) {
    throw std::runtime_error(std::string("refuse_syscalls: seccomp: ") + std::strerror(errno));
  }
}

}  // namespace shmccl::testing
