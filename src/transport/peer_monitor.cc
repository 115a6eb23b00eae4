// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/peer_monitor.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/deadline.h"
#include "core/file_descriptor.h"
#include "core/logging.h"
#include "core/peer_process.h"
#include "core/signal_mask.h"

namespace shmccl::transport {
namespace {

constexpr uint64_t kEventFdTag = 0;  // epoll tag of the eventfd; watch ids start at 1

std::atomic<uint64_t> g_next_watch_id{1};

// How often the monitor reads /proc for the processes it watches without a pidfd (pidfds
// refused: core/peer_process.h). Their deaths are noticed within this, not within 0.1 ms.
constexpr int kPollIntervalMs = 10;

}  // namespace

// Everything the monitor thread and its callers share. Lock order: `mutex` is a leaf lock
// (callbacks run without it).
struct PeerMonitor::State {
  struct Watch {
    pid_t pid = 0;
    DeathCallback callback;
    FileDescriptor pidfd;  // empty when the process was dead at watch() time, or polled
    bool polled = false;   // no pidfd to be had: /proc is read every kPollIntervalMs
  };

  State()
      : epoll(::epoll_create1(EPOLL_CLOEXEC)), wakeup(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!epoll.valid()) detail::throw_system_error("PeerMonitor: epoll_create1", errno);
    if (!wakeup.valid()) detail::throw_system_error("PeerMonitor: eventfd", errno);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = kEventFdTag;
    SHMCCL_SYSCALL(::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wakeup.get(), &event),
                   "PeerMonitor: epoll_ctl(ADD eventfd)");
  }

  // Wakes the monitor thread out of epoll_wait. Async-signal-safe.
  void notify() noexcept {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(wakeup.get(), &one, sizeof(one));
  }

  void run() noexcept;
  void dispatch(WatchId id) noexcept;

  std::mutex mutex;
  std::condition_variable callback_finished;   // signalled when `running` goes back to 0
  FileDescriptor epoll;                        // pidfds (tag = watch id) + `wakeup`
  FileDescriptor wakeup;                       // eventfd: "look at already_dead / stopping"
  std::unordered_map<WatchId, Watch> watches;  // guarded by mutex
  std::vector<WatchId> already_dead;           // guarded by mutex: watches with no pidfd
  size_t polled_watches = 0;                   // guarded by mutex: watches with `polled` set
  bool thread_started = false;                 // guarded by mutex
  bool stopping = false;                       // guarded by mutex
  std::thread::id thread_id;                   // guarded by mutex
  WatchId running = 0;                         // guarded by mutex: whose callback runs now
  State* previous = nullptr;                   // retired state of the parent (after fork)
};

void PeerMonitor::State::run() noexcept {
  // Signals belong to the application's threads, not to this helper.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_setname_np(pthread_self(), "shmccl-peermon");

  std::vector<WatchId> ready;
  std::vector<std::pair<WatchId, pid_t>> polled;
  for (;;) {
    int timeout_ms = -1;
    {
      std::lock_guard lock(mutex);
      if (polled_watches != 0) timeout_ms = kPollIntervalMs;
    }
    epoll_event events[32];
    const int count = ::epoll_wait(epoll.get(), events, 32, timeout_ms);
    if (count == -1) {
      if (errno == EINTR) continue;
      SHMCCL_WARN(kShm, "PeerMonitor: epoll_wait failed, peer deaths are no longer detected: ",
                  std::strerror(errno));
      return;
    }
    ready.clear();
    for (int i = 0; i < count; ++i) {
      if (events[i].data.u64 == kEventFdTag) {
        uint64_t drained;
        [[maybe_unused]] ssize_t got = ::read(wakeup.get(), &drained, sizeof(drained));
      } else {
        ready.push_back(events[i].data.u64);
      }
    }
    polled.clear();
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      ready.insert(ready.end(), already_dead.begin(), already_dead.end());
      already_dead.clear();
      if (polled_watches != 0) {
        for (const auto& [id, watch] : watches) {
          if (watch.polled) polled.emplace_back(id, watch.pid);
        }
      }
    }
    // (Outside the lock: reading /proc may take a while.)
    for (const auto& [id, pid] : polled) {
      if (detail::exited_per_proc(pid)) ready.push_back(id);
    }
    for (WatchId id : ready)
      dispatch(id);
  }
}

void PeerMonitor::State::dispatch(WatchId id) noexcept {
  DeathCallback callback;
  pid_t pid;
  {
    std::lock_guard lock(mutex);
    if (stopping) return;
    auto it = watches.find(id);
    if (it == watches.end()) return;  // unwatched after the event was collected
    callback = std::move(it->second.callback);
    pid = it->second.pid;
    if (it->second.pidfd.valid()) {
      ::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
    }
    if (it->second.polled) --polled_watches;
    watches.erase(it);  // closes the pidfd: the watch can never fire again
    running = id;
  }
  SHMCCL_TRACE(kShm, "PeerMonitor: process ", pid, " exited (watch ", id, ")");
  try {
    callback(pid);
  } catch (const std::exception& error) {
    SHMCCL_WARN(kShm, "PeerMonitor: death callback for process ", pid, " threw: ", error.what());
  } catch (...) {
    SHMCCL_WARN(kShm, "PeerMonitor: death callback for process ", pid, " threw");
  }
  {
    std::lock_guard lock(mutex);
    running = 0;
  }
  callback_finished.notify_all();
}

PeerMonitor& PeerMonitor::instance() {
  // Leaked on purpose (see the header): never destroyed, so usable during exit.
  static PeerMonitor* const monitor = [] {
    auto* created = new PeerMonitor();
    pthread_atfork(&PeerMonitor::prepare_fork, &PeerMonitor::after_fork_in_parent,
                   &PeerMonitor::after_fork_in_child);
    std::atexit(&PeerMonitor::stop_at_exit);
    return created;
  }();
  return *monitor;
}

PeerMonitor::State& PeerMonitor::state() {
  // Acquire pairs with the release of the creating thread's compare_exchange: a state seen here
  // is fully constructed.
  State* current = state_.load(std::memory_order_acquire);
  if (current != nullptr) return *current;
  auto fresh = std::make_unique<State>();
  fresh->previous = retired_;
  if (state_.compare_exchange_strong(current, fresh.get(), std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
    return *fresh.release();
  }
  return *current;  // another thread won; ours is destroyed
}

PeerMonitor::WatchId PeerMonitor::watch(pid_t pid, DeathCallback on_death) {
  SHMCCL_CHECK_ARG(pid > 0, "PeerMonitor::watch: pid must be > 0, got ", pid);
  SHMCCL_CHECK_ARG(static_cast<bool>(on_death), "PeerMonitor::watch(", pid,
                   "): the callback is empty");
  State& s = state();
  FileDescriptor pidfd = detail::open_pidfd(pid);
  const int pidfd_error = pidfd ? 0 : errno;
  // Without pidfds (an old kernel, valgrind, a seccomp filter), the monitor reads /proc instead.
  const bool polled = !pidfd && detail::pidfds_refused(pidfd_error);
  if (!pidfd && pidfd_error != ESRCH && !polled) {
    detail::throw_system_error(detail::concat("PeerMonitor: pidfd_open(", pid, ")"), pidfd_error);
  }
  const bool dead = !pidfd && (!polled || detail::exited_per_proc(pid));

  std::lock_guard lock(s.mutex);
  if (!s.thread_started) {
    // Detached: nothing ever joins it (see the header); it only touches the leaked state.
    std::thread thread;
    try {
      const detail::ScopedSignalBlock no_signals;  // the application's signals are not ours
      thread = std::thread([&s] { s.run(); });
    } catch (const std::system_error& error) {
      throw SystemError(
          detail::concat("PeerMonitor: cannot start the monitor thread: ", error.what()),
          error.code().value());
    }
    s.thread_id = thread.get_id();
    thread.detach();
    s.thread_started = true;
  }
  const WatchId id = g_next_watch_id.fetch_add(1, std::memory_order_relaxed);
  if (pidfd.valid()) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = id;
    SHMCCL_SYSCALL(::epoll_ctl(s.epoll.get(), EPOLL_CTL_ADD, pidfd.get(), &event),
                   "PeerMonitor: epoll_ctl(ADD pidfd of process ", pid, ")");
  } else if (dead) {
    s.already_dead.push_back(id);
    s.notify();
  } else {
    ++s.polled_watches;
    s.notify();  // the thread's wait takes a timeout from now on
  }
  s.watches.emplace(id, State::Watch{pid, std::move(on_death), std::move(pidfd), !dead && polled});
  SHMCCL_TRACE(kShm, "PeerMonitor: watching process ", pid, " (watch ", id, ")");
  return id;
}

void PeerMonitor::unwatch(WatchId id) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  auto it = s.watches.find(id);
  if (it != s.watches.end()) {
    if (it->second.pidfd.valid()) {
      ::epoll_ctl(s.epoll.get(), EPOLL_CTL_DEL, it->second.pidfd.get(), nullptr);
    }
    if (it->second.polled) --s.polled_watches;
    s.watches.erase(it);
    return;
  }
  // Its callback may be running right now: wait for it, unless we are that callback.
  if (std::this_thread::get_id() != s.thread_id) {
    s.callback_finished.wait(lock, [&] { return s.running != id; });
  }
}

size_t PeerMonitor::num_watches() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.watches.size();
}

bool PeerMonitor::is_alive(pid_t pid) {
  SHMCCL_CHECK_ARG(pid > 0, "PeerMonitor::is_alive: pid must be > 0, got ", pid);
  FileDescriptor pidfd = detail::open_pidfd(pid);
  if (!pidfd.valid()) {
    if (errno == ESRCH) return false;
    if (detail::pidfds_refused(errno)) return !detail::exited_per_proc(pid);
    // EINVAL (a thread id rather than a process), EMFILE...: ask kill(2), which cannot tell a
    // zombie from a live process but needs no descriptor.
    return ::kill(pid, 0) == 0 || errno == EPERM;
  }
  pollfd entry{pidfd.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&entry, 1, 0);
  } while (ready == -1 && errno == EINTR);
  SHMCCL_SYSCALL(ready, "PeerMonitor: poll(pidfd of process ", pid, ")");
  return ready == 0;  // readable = exited
}

bool PeerMonitor::wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  SHMCCL_CHECK_ARG(pid > 0, "PeerMonitor::wait_for_exit: pid must be > 0, got ", pid);
  const auto deadline = shmccl::detail::deadline_after(timeout);
  FileDescriptor pidfd = detail::open_pidfd(pid);
  if (!pidfd.valid()) {
    if (!detail::pidfds_refused(errno)) return errno == ESRCH;
    while (!detail::exited_per_proc(pid)) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      ::usleep(1000);
    }
    return true;
  }
  pollfd entry{pidfd.get(), POLLIN, 0};
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int ready = ::poll(&entry, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready == -1 && errno == EINTR) continue;
    return ready == 1;
  }
}

void PeerMonitor::prepare_fork() noexcept {
  // Hold the state's mutex across fork(), so the child's copy of the state is consistent.
  State* s = instance().state_.load(std::memory_order_acquire);
  if (s != nullptr) s->mutex.lock();
}

void PeerMonitor::after_fork_in_parent() noexcept {
  State* s = instance().state_.load(std::memory_order_acquire);
  if (s != nullptr) s->mutex.unlock();
}

void PeerMonitor::after_fork_in_child() noexcept {
  // Single-threaded here. The parent's monitor thread does not exist in the child: retire the
  // state (its copy of the mutex stays locked forever) after closing the descriptors it holds.
  // The epoll instance is shared with the parent, so the child must never touch it again.
  PeerMonitor& monitor = instance();
  State* s = monitor.state_.load(std::memory_order_relaxed);
  if (s == nullptr) return;
  s->epoll.reset();
  s->wakeup.reset();
  for (auto& [id, watch] : s->watches)
    watch.pidfd.reset();
  monitor.retired_ = s;
  monitor.state_.store(nullptr, std::memory_order_release);
}

void PeerMonitor::stop_at_exit() noexcept {
  State* s = instance().state_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  {
    std::lock_guard lock(s->mutex);
    s->stopping = true;
  }
  s->notify();
}

}  // namespace shmccl::transport
