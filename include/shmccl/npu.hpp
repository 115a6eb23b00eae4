// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The simulated NPU: devices, streams, events and memory statistics, spelled like torch.npu /
// torch.cuda. Device memory lives in a per-process shared-memory arena per device, so other
// processes of a job can map it (zero-copy collectives). Work on a stream runs asynchronously and
// in order on the stream's worker thread; an exception thrown by such work is kept and rethrown at
// the next synchronisation point (Stream::synchronize, Event::synchronize, npu::synchronize, or a
// blocking read of device memory by the host on that stream: Tensor::cpu(), to_vector(), item()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl::npu {

namespace detail {
class StreamImpl;
struct EventState;
}  // namespace detail

class Event;

// Number of simulated devices this process sees: the host has SHMCCL_NPU_DEVICE_COUNT (default
// 8); ASCEND_RT_VISIBLE_DEVICES="4,5" shows only those, as devices 0 and 1 (as torch_npu). A
// malformed list is an InvalidArgument naming it, from this and every device call.
int device_count();
// The host's index of `device` (-1: the current device): its entry in ASCEND_RT_VISIBLE_DEVICES,
// or `device` itself when the variable is unset.
int physical_device(int device = -1);
// Selects the calling thread's current device; out of range is an InvalidArgument.
void set_device(int device);
int current_device();
// Waits for every stream of `device` (-1: the current device); rethrows a stored stream error.
void synchronize(int device = -1);

// An in-order queue of work on one device, run by its own worker thread. Copyable handle; all
// copies refer to the same stream. Thread-safe.
class Stream {
 public:
  // A new stream on `device` (-1: the current device).
  explicit Stream(int device = -1);

  int device() const;
  uint64_t id() const;
  // True when all work queued so far has finished. Never blocks.
  bool query() const;
  // Blocks until all work queued so far has finished; rethrows the first error that work threw.
  void synchronize() const;
  // Work queued on this stream after this call starts only once `event` has completed.
  void wait_event(const Event& event) const;
  // Records a new event on this stream.
  Event record_event() const;

  bool operator==(const Stream& other) const { return impl_ == other.impl_; }
  bool operator!=(const Stream& other) const { return impl_ != other.impl_; }

  // For the library's own layers.
  const std::shared_ptr<detail::StreamImpl>& impl() const { return impl_; }
  explicit Stream(std::shared_ptr<detail::StreamImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<detail::StreamImpl> impl_;
};

// The calling thread's current stream of `device` (-1: current device); the default stream
// unless set_stream or a StreamGuard changed it.
Stream current_stream(int device = -1);
Stream default_stream(int device = -1);
// Makes `stream` the calling thread's current stream of its device, and its device the current
// device (as torch.npu.set_stream).
void set_stream(const Stream& stream);

// set_stream(stream) for the guard's scope; then the previous current device, and the previous
// current stream of the stream's device, come back (as c10::StreamGuard, torch.npu.stream()).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  int previous_device_;
};

// A marker in a stream's work. An event that was never recorded counts as completed (as CUDA's).
// Copyable handle. Thread-safe.
class Event {
 public:
  explicit Event(bool enable_timing = false);

  // Records the event at the current end of `stream`'s queue (default: current stream).
  void record();
  void record(const Stream& stream);
  bool query() const;
  void synchronize() const;
  // Makes `stream` wait for this event (torch's event.wait(stream)).
  void wait(const Stream& stream) const;
  // Milliseconds between this event's completion and `end`'s. Both must be recorded with timing
  // enabled and completed.
  float elapsed_time(const Event& end) const;

  const std::shared_ptr<detail::EventState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::EventState> state_;
};

// Memory statistics of `device` (-1: current), like torch.npu.memory_allocated() and friends.
struct MemoryStats {
  uint64_t allocated_bytes = 0;      // held by live tensors
  uint64_t reserved_bytes = 0;       // committed by the caching allocator (allocated + cached)
  uint64_t max_allocated_bytes = 0;  // peaks since start or reset_peak_memory_stats()
  uint64_t max_reserved_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_segments = 0;     // committed arena segments
  uint64_t capacity_bytes = 0;   // the device's total memory (the arena's size)
  uint64_t huge_page_bytes = 0;  // of reserved_bytes, those in 2 MiB pages (SHMCCL_NPU_HUGE_PAGES)
};
MemoryStats memory_stats(int device = -1);
uint64_t memory_allocated(int device = -1);
uint64_t memory_reserved(int device = -1);
uint64_t max_memory_allocated(int device = -1);
uint64_t max_memory_reserved(int device = -1);
void reset_peak_memory_stats(int device = -1);
// Returns cached, unused blocks to the arena (their memory is released).
void empty_cache();

}  // namespace shmccl::npu

#pragma GCC visibility pop
