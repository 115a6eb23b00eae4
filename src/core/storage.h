// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Storage: one contiguous allocation that tensors view. Owns its memory through a deleter chosen
// by whoever allocated it (host heap, a device's caching allocator), so the core layer does not
// depend on the device layer. Immutable after construction; shared by shared_ptr between tensors
// and the stream tasks that use it, so memory stays alive until the last queued use has run.
#pragma once

#include <cstddef>
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

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
  void* context_;
};

}  // namespace shmccl::detail
