// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Store: the key-value rendezvous interface, shaped like PyTorch c10d's Store. Ranks publish
// what peers need (segment names, pids, addresses) with set() and collect it with get()/wait(),
// which block until the keys exist or the timeout passes. ShmStore (shared memory, one host) is
// the default implementation; a PyTorch backend or a multi-host launcher plugs in its own.
//
// Values are binary-safe std::strings. add() keeps a counter as the decimal string of an int64
// (as c10d does), so get() of a counter key returns e.g. "8".
//
// Timeouts: every blocking call has one; the default is timeout() (set_timeout changes it). A
// timeout is a shmccl::TimeoutError naming the key(s) still missing.
//
// Thread safety: implementations must make every member thread-safe and multi-process-safe.
//
// Overloads: implementations override the virtual set(key, string) and wait(keys, timeout); they
// add `using Store::set; using Store::wait;` so the convenience overloads stay visible.
//
// Plugging one in: InitOptions::store makes init_process_group meet its peers through that store
// instead of the job's own store in /dev/shm (as torch hands a backend its c10d Store). A store
// shared by several jobs must be wrapped per job (c10d's PrefixStore): init claims keys "g<n>/...".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shmccl/error.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};  // c10d's 5 minutes

  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets `key` to `value`, replacing any previous value, and wakes the waiters of the key.
  virtual void set(const std::string& key, const std::string& value) = 0;
  void set(const std::string& key, const std::vector<uint8_t>& value) {
    set(key, std::string(value.begin(), value.end()));
  }

  // The value of `key`, waiting up to timeout() for it to be set. Throws TimeoutError.
  virtual std::string get(const std::string& key) = 0;

  // Adds `delta` to the integer counter `key` (a missing key counts as 0) and returns the new
  // value, atomically across processes. Throws InvalidArgument if the key holds a non-integer.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // True when every key in `keys` is set now. Never blocks on a missing key.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Waits until every key in `keys` is set; TimeoutError names the missing ones.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Removes `key`; true when it existed.
  virtual bool delete_key(const std::string& key) = 0;

  // How many keys are set.
  virtual int64_t num_keys() = 0;

  // The default timeout of get() and wait(); must be > 0.
  void set_timeout(std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) {
      throw InvalidArgument("store timeout must be > 0 ms, got " + std::to_string(timeout.count()) +
                            " ms");
    }
    timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  }
  std::chrono::milliseconds timeout() const {
    // Relaxed: the timeout is a standalone value; no other data is published with it.
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }

 protected:
  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) { set_timeout(timeout); }

  // now + timeout on the steady clock, saturating instead of overflowing for huge timeouts.
  static std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
    const auto now = std::chrono::steady_clock::now();
    const auto limit = std::chrono::steady_clock::time_point::max() - now;
    if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(limit)) {
      return std::chrono::steady_clock::time_point::max();
    }
    return now + timeout;
  }

 private:
  std::atomic<int64_t> timeout_ms_{kDefaultTimeout.count()};
};

}  // namespace shmccl

#pragma GCC visibility pop
