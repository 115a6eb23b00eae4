// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ChildProcess: one started rank, owned through a pidfd. It is started the way posix_spawn does
// (clone with CLONE_VM | CLONE_VFORK: no page tables to copy; plain fork under sanitizers). The
// child gets PR_SET_PDEATHSIG(SIGKILL) (it dies with shmrun even when shmrun is SIGKILLed), a
// clean signal mask, and every inherited fd closed at exec except stdin/stdout/stderr and the one
// fd it is told to keep. The pidfd becomes readable when the child exits; signals go through the
// pidfd, so they can never hit a recycled pid. The destructor SIGKILLs and reaps a child that was
// not reaped: a ChildProcess never leaves an orphan or a zombie behind. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/file_descriptor.h"

namespace shmccl::launcher {

// How a process ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // the exit code, or the signal number when `signaled`

  bool success() const { return !signaled && code == 0; }
  // The shell's convention: the exit code, or 128 + signal.
  int shell_code() const { return signaled ? 128 + code : code; }
  // "exit code 3" or "signal 9 (SIGKILL)".
  std::string describe() const;
};

// "SIGKILL" for 9; "SIG42" for a number without a name.
std::string signal_name(int signal_number);

struct SpawnRequest {
  std::string path;               // executable, already resolved (see resolve_program)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value" entries: the child's whole environment
  int stdout_fd = -1;             // becomes the child's fd 1 (-1: inherit shmrun's)
  int stderr_fd = -1;             // becomes the child's fd 2 (-1: inherit shmrun's)
  int keep_fd = -1;               // stays open, same number, across exec (-1: none)
  // Runs in the child just before exec, in shmrun's memory: must not allocate or lock. Returns
  // nullptr, or a message: then the child prints it and exits 126.
  std::function<const char*()> before_exec;
};

class ChildProcess {
 public:
  // Starts the program. Throws SystemError if clone/fork fails; a failed exec shows up as the
  // child exiting 127 after printing why to its stderr (for a script whose #! interpreter is
  // missing, that interpreter).
  static ChildProcess spawn(const SpawnRequest& request);

  ChildProcess() = default;  // no process
  ChildProcess(ChildProcess&&) noexcept = default;
  ChildProcess& operator=(ChildProcess&&) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool reaped() const { return status_.has_value(); }
  const std::optional<ExitStatus>& status() const { return status_; }

  // Sends a signal to the rank's whole process group (what it started, too), once: also after
  // the rank exited (its zombie holds the group's id until the ChildProcess goes). ESRCH (all
  // gone) is not an error.
  void send_signal(int signal_number);
  // The same, to the rank process only.
  void send_signal_to_rank(int signal_number);
  // True when send_signal or send_signal_to_rank sent `signal_number`: a rank that died of it was
  // stopped by shmrun (the failure summary says so).
  bool was_sent(int signal_number) const {
    return signal_number >= 1 && signal_number <= 64 && (sent_signals_ >> (signal_number - 1)) & 1;
  }
  // True when the (unreaped) child has a handler for `signal_number` (/proc/<pid>/status SigCgt).
  bool catches(int signal_number) const;
  // Collects the exit status if the child has exited (non-blocking); true once it has. The
  // zombie stays until the ChildProcess goes (see send_signal).
  bool try_reap();

 private:
  ChildProcess(pid_t pid, FileDescriptor pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  void kill_and_reap() noexcept;
  void record_sent(int signal_number);

  pid_t pid_ = -1;
  FileDescriptor pidfd_;
  std::optional<ExitStatus> status_;
  uint64_t sent_signals_ = 0;  // bit n - 1: signal n was sent
};

// Whether a process that is not a zombie is in one of the process groups `groups` (/proc: a
// kill(-group, 0) counts the rank's zombie, which holds its group's id until it is reaped).
bool groups_have_running_members(const std::vector<pid_t>& groups);

// Finds `program` as execvp would (PATH search unless it contains a '/'); nullopt if there is no
// such executable file.
std::optional<std::string> resolve_program(const std::string& program);
// Why resolve_program found nothing: "cannot find an executable 'x' in PATH", "'./x' is not
// executable", "'/tmp' is a directory"...
std::string unusable_program_reason(const std::string& program);

}  // namespace shmccl::launcher
