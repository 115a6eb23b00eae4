// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Storage: one contiguous allocation that tensors view. Owns its memory through a deleter chosen
// by whoever allocated it (host heap, a device's caching allocator), so the core layer does not
// depend on the device layer. Immutable after construction (but for its write counter); shared by
// shared_ptr between tensors and the stream tasks that use it, so memory stays alive until the last
// queued use has run.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "shmccl/device.hpp"

namespace shmccl::detail {

class Storage {
 public:
  using Deleter = void (*)(void* data, void* context);

  Storage(void* data, size_t nbytes, Device device, Deleter deleter, void* context)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), context_(context) {}
  ~Storage() {
    if (deleter_ != nullptr) deleter_(data_, context_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }

  // Counts the library's writes to this memory (torch's tensor._version): caches of derived data
  // (reordered GEMM weights) compare it to notice a change. Raw writes through data_ptr() are
  // invisible, as in torch.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // A load and a store, not a read-modify-write: a locked instruction cost every synchronous
  // collective 4-5 ns (a tenth of a small broadcast). Two threads that write one storage at once
  // race on its bytes anyway; if they also lose one of their counts, the version still moves.
  void bump_version() const {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
  void* context_;
  mutable std::atomic<uint64_t> version_{0};
};

}  // namespace shmccl::detail
