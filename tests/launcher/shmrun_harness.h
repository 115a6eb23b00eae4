// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Runs the real shmrun binary for the end-to-end launcher tests: posix_spawn with its stdout and
// stderr on pipes, every wait bounded by a deadline (a hang fails the test instead of stalling
// the suite), and helpers to find what shmrun reported (rank pids, job namespaces) and to check
// that processes are gone and /dev/shm is clean. Header-only; not thread-safe.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/directory.h"

extern char** environ;

namespace shmccl::launcher::testing {

inline const std::string kShmrun = SHMCCL_BINARY_DIR "/src/launcher/shmrun";
inline const std::string kWorker = SHMCCL_BINARY_DIR "/tests/launcher/launcher_test_worker";
constexpr auto kDeadline = std::chrono::seconds(20);

struct RunResult {
  int exit_code = -1;  // shell convention: 128 + signal when shmrun was killed
  std::string out;
  std::string err;
  int ended_by_signal = 0;  // the signal shmrun died of; 0: it exited
};

inline int pidfd_open(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

// One running shmrun.
class Shmrun {
 public:
  // `stderr_to_stdout`: shmrun's stderr is its stdout pipe, as `shmrun ... 2>&1 | ...` has it
  // (err() stays empty).
  // `stderr_full`: shmrun's stderr pipe is full before it starts, and stalled (stall_stderr()).
  explicit Shmrun(const std::vector<std::string>& args,
                  const std::vector<std::string>& extra_env = {}, bool stderr_to_stdout = false,
                  bool stderr_full = false) {
    int out[2], err[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    if (stderr_full) {
      // O_NONBLOCK only while filling: shmrun gets the blocking write end a terminal or a
      // shell's pipe gives it.
      const int flags = fcntl(err[1], F_GETFL);
      EXPECT_EQ(fcntl(err[1], F_SETFL, flags | O_NONBLOCK), 0);
      const std::string filler(4096, '.');
      while (write(err[1], filler.data(), filler.size()) > 0) {
      }
      EXPECT_EQ(errno, EAGAIN);
      EXPECT_EQ(fcntl(err[1], F_SETFL, flags), 0);
      stderr_stalled_ = true;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, stderr_to_stdout ? out[1] : err[1], STDERR_FILENO);
    std::vector<std::string> argv_strings = {kShmrun};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    // The test's own environment, without anything that would change shmrun's output.
    std::vector<std::string> env_strings;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, "SHMCCL_", 7) != 0) env_strings.emplace_back(*entry);
    }
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> argv, envp;
    for (auto& s : argv_strings)
      argv.push_back(s.data());
    for (auto& s : env_strings)
      envp.push_back(s.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    // Its own process group, so a test can signal shmrun and its ranks together, as Ctrl-C does.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    EXPECT_EQ(posix_spawn(&pid_, kShmrun.c_str(), &actions, &attributes, argv.data(), envp.data()),
              0);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    if (stderr_to_stdout) {
      close(err_fd_);
      err_fd_ = -1;
    }
    pidfd_ = pidfd_open(pid_);
    start_ = std::chrono::steady_clock::now();
  }

  ~Shmrun() {
    if (exit_code_ < 0 && pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : {out_fd_, err_fd_, pidfd_}) {
      if (fd >= 0) close(fd);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  // Reads output until `done(stdout)` holds; false at the deadline or when shmrun exits first.
  bool read_until(const std::function<bool(const std::string&)>& done) {
    while (!done(out_)) {
      if (!pump(/*want_exit=*/false)) return done(out_);
    }
    return true;
  }
  // The pids of the workers' "ready rank=R pid=P" lines seen on stdout so far, in order.
  static std::vector<pid_t> ready_pids(const std::string& out) {
    std::vector<pid_t> pids;
    for (size_t at = out.find("ready rank="); at != std::string::npos;
         at = out.find("ready rank=", at + 1)) {
      const size_t end = out.find('\n', at);
      const size_t pid_at = out.find(" pid=", at);
      pids.push_back(pid_at < end ? std::atoi(out.c_str() + pid_at + 5) : 0);
    }
    return pids;
  }
  // Whether `count` ready lines were seen, for read_until.
  static bool has_ready_lines(const std::string& out, int count) {
    return ready_pids(out).size() >= static_cast<size_t>(count);
  }

  // Reads output until `done(stderr)` holds; false at the deadline or when shmrun exits first.
  bool read_err_until(const std::function<bool(const std::string&)>& done) {
    while (!done(err_)) {
      if (!pump(/*want_exit=*/false)) return done(err_);
    }
    return true;
  }

  // Stops reading shmrun's stdout but keeps it open, as a pager left unscrolled does: shmrun's
  // writes find the pipe full. resume_stdout() reads it again.
  void stall_stdout() { stdout_stalled_ = true; }
  void resume_stdout() { stdout_stalled_ = false; }
  void stall_stderr() { stderr_stalled_ = true; }
  void resume_stderr() { stderr_stalled_ = false; }
  // Whether shmrun's stdout (`err`: stderr) pipe has no free buffer left, so that shmrun's next
  // write does not fit (asked of a write end of our own, opened through /proc: POLLOUT is the
  // kernel's word on it).
  bool pipe_full(bool err) const {
    const std::string path = "/proc/" + std::to_string(pid_) + "/fd/" + (err ? "2" : "1");
    const int writer = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer < 0) return false;
    pollfd room{writer, POLLOUT, 0};
    const bool full = poll(&room, 1, 0) == 0;
    close(writer);
    return full;
  }

  // Stops reading shmrun's stdout, as `head` does once it has its lines: its writes fail (EPIPE).
  void close_stdout() {
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
  }

  void send(int signal_number) { ASSERT_EQ(kill(pid_, signal_number), 0); }
  // To shmrun and its ranks at once, like Ctrl-C in a terminal.
  void send_to_group(int signal_number) { ASSERT_EQ(kill(-pid_, signal_number), 0); }

  // Waits for shmrun to exit and its pipes to close; SIGKILLs it and fails at the deadline.
  RunResult wait() {
    while (pump(/*want_exit=*/true)) {
    }
    if (exit_code_ < 0) {
      ADD_FAILURE() << "shmrun did not exit within " << kDeadline.count() << " s\nstdout:\n"
                    << out_ << "\nstderr:\n"
                    << err_;
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_code_ = 128 + SIGKILL;
    }
    return RunResult{exit_code_, out_, err_, ended_by_signal_};
  }

 private:
  // One poll round; false when there is nothing more to wait for (or the deadline passed).
  bool pump(bool want_exit) {
    const auto remaining = kDeadline - (std::chrono::steady_clock::now() - start_);
    if (remaining <= std::chrono::seconds(0)) return false;
    const int out_fd = stdout_stalled_ ? -1 : out_fd_;
    const int err_fd = stderr_stalled_ ? -1 : err_fd_;
    pollfd fds[3] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    if (out_fd < 0 && err_fd < 0 && exit_code_ >= 0) return false;
    if (!want_exit && exit_code_ >= 0 && out_fd < 0) return false;
    const int ready =
        poll(fds, 3,
             static_cast<int>(
                 std::chrono::duration_cast<std::chrono::milliseconds>(remaining).count() + 1));
    if (ready < 0) return errno == EINTR;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (i == 0 ? out_ : err_).append(buffer, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        (i == 0 ? out_fd_ : err_fd_) = -1;
      }
    }
    if (fds[2].fd >= 0 && (fds[2].revents & POLLIN) && exit_code_ < 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      ended_by_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      close(pidfd_);
      pidfd_ = -1;
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1, pidfd_ = -1;
  int exit_code_ = -1;
  int ended_by_signal_ = 0;
  bool stdout_stalled_ = false;
  bool stderr_stalled_ = false;
  std::string out_, err_;
  std::chrono::steady_clock::time_point start_;
};

inline RunResult run_shmrun(const std::vector<std::string>& args,
                            const std::vector<std::string>& extra_env = {}) {
  return Shmrun(args, extra_env).wait();
}

// For every occurrence of `marker` in `text`, the characters that follow it up to a space, ',',
// ')' or end of line. (No std::regex: GCC 12's <regex> trips -Wmaybe-uninitialized under ASan.)
inline std::vector<std::string> tokens_after(const std::string& text, const std::string& marker) {
  std::vector<std::string> found;
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
    const size_t start = at + marker.size();
    const size_t end = text.find_first_of(" ,)\n", start);
    found.push_back(text.substr(start, end == std::string::npos ? end : end - start));
  }
  return found;
}

// The line of `text` that contains `needle` ("" if none).
inline std::string line_with(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = text.rfind('\n', at);
  const size_t end = text.find('\n', at);
  const size_t from = start == std::string::npos ? 0 : start + 1;
  return text.substr(from, end == std::string::npos ? end : end - from);
}

// This run's log directory, from shmrun's "logs of this run go to DIR/attempt_<restart>/..."
// line ("" if it printed none).
inline std::string run_log_dir(const std::string& err) {
  const std::string marker = "shmrun: logs of this run go to ";
  const std::string line = line_with(err, marker);
  const size_t end = line.rfind("/attempt_<restart>/");
  if (line.rfind(marker, 0) != 0 || end == std::string::npos) return "";
  return line.substr(marker.size(), end - marker.size());
}

// Rank pids from shmrun -v ("rank 1: pid 1234, ...").
inline std::vector<pid_t> rank_pids(const std::string& err) {
  std::vector<pid_t> pids;
  for (const std::string& pid : tokens_after(err, ": pid "))
    pids.push_back(std::stoi(pid));
  return pids;
}

// rank -> (NAME -> value), from the "[rankN]:NAME=value" lines of `test_worker env`.
inline std::map<int, std::map<std::string, std::string>> parse_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int rank = -1, consumed = 0;
    if (std::sscanf(line.c_str(), "[rank%d]:%n", &rank, &consumed) != 1 || consumed == 0) continue;
    const size_t eq = line.find('=', static_cast<size_t>(consumed));
    if (eq == std::string::npos) continue;
    by_rank[rank][line.substr(consumed, eq - consumed)] = line.substr(eq + 1);
  }
  return by_rank;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/shmrun_test_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Job namespaces from shmrun -v ("job namespace <ns> (lock ...)").
inline std::vector<std::string> namespaces(const std::string& err) {
  return tokens_after(err, "job namespace ");
}

inline std::vector<std::string> shm_entries(const std::string& ns) {
  std::vector<std::string> names;
  const std::string prefix = "shmccl." + ns + ".";
  shmccl::detail::Directory("/dev/shm").for_each([&](const char* name) {
    if (std::strncmp(name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(name);
    return true;
  });
  return names;
}

// Fails unless no /dev/shm entry of any of the namespaces is left.
inline void expect_shm_clean(const std::vector<std::string>& all) {
  EXPECT_FALSE(all.empty()) << "no job namespace found in shmrun's output";
  for (const std::string& ns : all) {
    EXPECT_TRUE(shm_entries(ns).empty()) << "left in /dev/shm: " << shm_entries(ns).front();
  }
}

// True once `pid` has exited (waits up to `timeout`; works for non-children through a pidfd).
inline bool process_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = pidfd_open(pid);
  if (fd < 0) return errno == ESRCH;
  pollfd ready{fd, POLLIN, 0};
  const bool gone = poll(&ready, 1, static_cast<int>(timeout.count())) == 1;
  close(fd);
  return gone;
}

}  // namespace shmccl::launcher::testing
