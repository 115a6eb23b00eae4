// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// PeerMonitor: learns within about 0.1 ms that a peer process has died.
//
// One process-wide monitor thread waits (epoll) on a pidfd per watch plus an eventfd. A pidfd
// becomes readable when its process exits (also for processes that are not our children, and
// for zombies), so detection needs no polling and no heartbeat. When a watched process exits,
// the watch's callback runs exactly once, on the monitor thread, and the watch is removed.
// Where pidfds are refused (Linux < 5.3, valgrind, a seccomp filter: core/peer_process.h), the
// thread reads /proc/<pid>/stat of such watches every 10 ms instead, and notices within that.
//
// Callbacks run on the monitor thread, one at a time, with no lock of the monitor held: they may
// call watch() and unwatch() (also for their own id). They must be cheap and must not block
// (set a flag, futex_wake), since every other death waits for them; an exception thrown by a
// callback is logged and dropped.
//
// Lifetime: the monitor and its thread start on the first watch() and are deliberately never
// destroyed. Tearing them down from a static destructor would race with other exit-time
// destructors that still call unwatch(), and exit() called from inside a callback would have to
// join its own thread. At exit an atexit hook only asks the thread to stop dispatching; the
// blocked thread does not keep the process alive (exit ends every thread).
//
// fork: the child of a fork gets a fresh, empty monitor (a pthread_atfork handler retires the
// parent's state in the child, closing its descriptors): watches are not inherited, and the first
// watch() in the child starts a new thread there.
//
// Pid reuse: a pid is resolved to a pidfd once, in watch(). If the process already died and its
// pid was reused before watch() ran, the new process is watched instead; the same holds for
// is_alive(). Callers that know the peer exists (it registered itself moments ago) are safe.
//
// Thread safety: all members are thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace shmccl::transport {

class PeerMonitor {
 public:
  using WatchId = uint64_t;  // never 0, never reused within a process
  using DeathCallback = std::function<void(pid_t)>;

  static PeerMonitor& instance();

  // Calls `on_death(pid)` once, from the monitor thread, when process `pid` exits. If `pid` is
  // already dead (or a zombie), the callback still runs from the monitor thread, promptly (never
  // synchronously inside watch(), so a caller may hold locks the callback takes).
  // Throws InvalidArgument for pid <= 0 or an empty callback, SystemError when no pidfd or
  // thread can be created.
  WatchId watch(pid_t pid, DeathCallback on_death);

  // Removes a watch. When it returns, the callback of `id` is not running and will never run
  // (unless called from that callback itself, which returns at once). Unknown ids (already fired,
  // already removed, from the parent of a fork) are ignored.
  void unwatch(WatchId id);

  // Number of active watches (for tests and diagnostics).
  size_t num_watches();

  // True when process `pid` exists and has not exited (a zombie counts as dead). Uses a pidfd,
  // so a process of another user is reported correctly. Throws InvalidArgument for pid <= 0.
  static bool is_alive(pid_t pid);
  // Waits up to `timeout` for process `pid` to exit; true once it has. For a process that is
  // known to be going (its memory is gone) but whose exit is not reported yet.
  static bool wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);

 private:
  struct State;

  PeerMonitor() = default;
  // The current state, created on first use (also after a fork, in the child).
  State& state();

  static void prepare_fork() noexcept;
  static void after_fork_in_parent() noexcept;
  static void after_fork_in_child() noexcept;
  static void stop_at_exit() noexcept;

  // Swapped only by the fork child handler (single-threaded at that point); acquire/release
  // publication of a state created lazily by whichever thread calls first.
  std::atomic<State*> state_{nullptr};
  // Old states of this process's ancestors, kept reachable (never freed: their mutexes may be
  // locked by threads that do not exist in this process).
  State* retired_ = nullptr;
};

}  // namespace shmccl::transport
