// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/child_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/directory.h"
#include "launcher/process_stat.h"

namespace shmccl::launcher {
namespace {

// glibc 2.36 has no <sys/pidfd.h>; the syscall exists since Linux 5.1.
int pidfd_send_signal(int pidfd, int signal_number) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, signal_number, nullptr, 0));
}

void write_stderr(const char* a, const char* b = "", const char* c = "") {
  for (const char* part : {a, b, c}) {
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, part, strlen(part));
  }
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// execve() of an existing file failed with ENOENT: what is missing is its interpreter. A script
// names it in its #! line, which this reads; for a binary it is the dynamic loader. Runs in the
// child, so only async-signal-safe calls and no allocation.
void explain_missing_interpreter(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // the file itself is gone: the plain message says it
  char line[256];
  const ssize_t n = ::read(fd, line, sizeof(line) - 1);
  close(fd);
  if (n >= 2 && line[0] == '#' && line[1] == '!') {
    ssize_t start = 2;
    while (start < n && (line[start] == ' ' || line[start] == '\t'))
      ++start;
    ssize_t end = start;
    while (end < n && line[end] != ' ' && line[end] != '\t' && line[end] != '\n')
      ++end;
    line[end] = '\0';
    write_stderr("shmrun: cannot execute ", path, ": the interpreter named in its #! line, ");
    write_stderr(line + start, ", was not found\n");
  } else {
    write_stderr("shmrun: cannot execute ", path,
                 ": the file exists, but its interpreter (the dynamic loader) was not found\n");
  }
  _exit(127);
}

// The child's side of spawn(): only async-signal-safe calls, no allocation (it shares shmrun's
// memory until exec), and it never returns.
[[noreturn]] void exec_child(const SpawnRequest& request, pid_t parent, char* const* argv,
                             char* const* envp) {
  // Die with shmrun. Checking the parent afterwards closes the race with shmrun dying before
  // the prctl: we would have been re-parented already and no signal would ever come.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
  // Each rank leads its own session and so its own process group, as torchrun's workers do:
  // stopping a rank also stops what it started (a shell script's children, a data loader's
  // workers), a terminal's Ctrl-C reaches shmrun, which stops the ranks in order, and a rank that
  // reads the terminal (input(), a debugger) is not stopped by SIGTTIN as a background job of
  // shmrun's session would be.
  if (setsid() < 0) _exit(125);

  if (request.stdout_fd >= 0 && dup2(request.stdout_fd, STDOUT_FILENO) < 0) _exit(125);
  if (request.stderr_fd >= 0 && dup2(request.stderr_fd, STDERR_FILENO) < 0) _exit(125);

  // shmrun blocks its signals (they go to a signalfd) and ignores SIGPIPE; both would be
  // inherited across exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);

  // Like Python's subprocess (and so torchrun): no fd of shmrun's leaks into the program, except
  // the one it must keep (the job's lock).
  const int keep = request.keep_fd;
  if (keep >= 0) {
    if (keep > 3) close_range(3, static_cast<unsigned>(keep) - 1, CLOSE_RANGE_CLOEXEC);
    close_range(static_cast<unsigned>(keep) + 1, UINT_MAX, CLOSE_RANGE_CLOEXEC);
    const int flags = fcntl(keep, F_GETFD);
    if (flags < 0 || fcntl(keep, F_SETFD, flags & ~FD_CLOEXEC) < 0) _exit(125);
  } else {
    close_range(3, UINT_MAX, CLOSE_RANGE_CLOEXEC);
  }

  if (request.before_exec) {
    if (const char* error = request.before_exec(); error != nullptr) {
      write_stderr("shmrun: ", error, "\n");
      _exit(126);
    }
  }
  execve(request.path.c_str(), argv, envp);
  if (errno == ENOENT) explain_missing_interpreter(request.path.c_str());
  write_stderr("shmrun: cannot execute ", request.path.c_str(), ": ");
  write_stderr(strerror(errno), "\n");
  _exit(127);
}

bool is_executable_file(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string signal_name(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "SIG" + std::to_string(signal_number);
}

std::string ExitStatus::describe() const {
  if (signaled) return "signal " + std::to_string(code) + " (" + signal_name(code) + ")";
  return "exit code " + std::to_string(code);
}

ChildProcess ChildProcess::spawn(const SpawnRequest& request) {
  // Everything the child needs is built before the clone.
  std::vector<char*> argv = c_strings(request.argv);
  std::vector<char*> envp = c_strings(request.env);
  struct ChildArgs {
    const SpawnRequest* request;
    pid_t parent;
    char* const* argv;
    char* const* envp;
  } args{&request, getpid(), argv.data(), envp.data()};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizers cannot follow a child that runs on a foreign stack in shmrun's memory: plain fork.
  const pid_t pid = fork();
  if (pid < 0) detail::throw_system_error("fork", errno);
  if (pid == 0) exec_child(request, args.parent, args.argv, args.envp);
  // The child cannot be reaped before this returns, so its pid is still its own.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int error = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    detail::throw_system_error("pidfd_open(" + std::to_string(pid) + ")", error);
  }
#else
  // posix_spawn's technique: the child shares our memory (no page tables to copy, no
  // copy-on-write faults afterwards) and we are suspended until it has exec'd or exited, so it
  // can use this stack-allocated state safely. It needs its own stack, and must not allocate.
  // CLONE_PIDFD hands us the pidfd atomically with the pid.
  constexpr size_t kStackSize = 256 * 1024;
  std::unique_ptr<char[]> stack(new char[kStackSize]);
  int pidfd = -1;
  const pid_t pid = clone(
      [](void* raw) -> int {
        const auto* a = static_cast<const ChildArgs*>(raw);
        exec_child(*a->request, a->parent, a->argv, a->envp);
      },
      stack.get() + kStackSize, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &args, &pidfd);
  if (pid < 0) detail::throw_system_error("clone", errno);
#endif
  return ChildProcess(pid, FileDescriptor(pidfd));
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  kill_and_reap();
}

void ChildProcess::kill_and_reap() noexcept {
  if (!pidfd_) return;
  // The rank's process group: the rank, or its zombie, holds its id until reaped just below.
  kill(-pid_, SIGKILL);
  if (!status_) pidfd_send_signal(pidfd_.get(), SIGKILL);
  siginfo_t info{};
  while (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED) < 0 && errno == EINTR) {
  }
  if (!status_) status_ = ExitStatus{true, SIGKILL};
  pidfd_.reset();
}

void ChildProcess::record_sent(int signal_number) {
  if (signal_number >= 1 && signal_number <= 64)
    sent_signals_ |= uint64_t{1} << (signal_number - 1);
}

void ChildProcess::send_signal(int signal_number) {
  if (!pidfd_) return;
  record_sent(signal_number);
  // The rank's process group (see exec_child): one signal reaches the rank and what it started.
  // Safe by id: until kill_and_reap, the rank or its zombie (try_reap leaves it) holds the id,
  // so no other process can have it. A rank that moved to another group gets it by its pidfd.
  const bool in_its_group = getpgid(pid_) == pid_;  // (a zombie keeps its group)
  kill(-pid_, signal_number);                       // ESRCH: the group is empty
  if (in_its_group || status_) return;
  if (pidfd_send_signal(pidfd_.get(), signal_number) < 0 && errno != ESRCH) {
    detail::throw_system_error(
        "pidfd_send_signal(" + std::to_string(pid_) + ", " + signal_name(signal_number) + ")",
        errno);
  }
}

void ChildProcess::send_signal_to_rank(int signal_number) {
  if (!pidfd_ || status_) return;
  record_sent(signal_number);
  if (pidfd_send_signal(pidfd_.get(), signal_number) < 0 && errno != ESRCH) {
    detail::throw_system_error(
        "pidfd_send_signal(" + std::to_string(pid_) + ", " + signal_name(signal_number) + ")",
        errno);
  }
}

bool ChildProcess::catches(int signal_number) const {
  if (!pidfd_ || status_ || signal_number < 1 || signal_number > 64) return false;
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const uint64_t caught = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caught >> (signal_number - 1) & 1) != 0;
  }
  return false;
}

bool ChildProcess::try_reap() {
  if (status_) return true;
  siginfo_t info{};
  // WNOWAIT: the status, but the zombie stays until kill_and_reap, holding the rank's pid and so
  // its process group's id, which send_signal and kill_and_reap then signal safely (a reaped
  // rank's pid, and that id with it, may be taken by any new process).
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG | WNOWAIT) < 0) {
    detail::throw_system_error("waitid(" + std::to_string(pid_) + ")", errno);
  }
  if (info.si_pid == 0) return false;  // still running
  status_ = info.si_code == CLD_EXITED ? ExitStatus{false, info.si_status}
                                       : ExitStatus{true, info.si_status};
  return true;
}

std::optional<std::string> resolve_program(const std::string& program) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

bool groups_have_running_members(const std::vector<pid_t>& groups) {
  bool found = false;
  detail::for_each_process([&](long pid) {
    const std::optional<ProcessStat> stat = read_process_stat(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') return true;
    found = std::find(groups.begin(), groups.end(), stat->group) != groups.end();
    return !found;
  });
  return found;
}

std::string unusable_program_reason(const std::string& program) {
  const std::string quoted = "'" + program + "'";
  struct stat info;
  if (program.find('/') == std::string::npos) {
    return "cannot find an executable " + quoted + " in PATH";
  }
  if (stat(program.c_str(), &info) != 0) return "cannot find an executable " + quoted;
  if (S_ISDIR(info.st_mode)) return quoted + " is a directory";
  if (!S_ISREG(info.st_mode)) return quoted + " is not a regular file";
  return quoted + " is not executable (no execute permission)";
}

}  // namespace shmccl::launcher
