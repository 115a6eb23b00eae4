// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Process-wide device state and the npu:: functions that are about devices rather than one stream.
#include "device/device_context.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"
#include "device/visible_devices.h"
#include "shmccl/npu.hpp"

namespace shmccl::device {
namespace {

// The state of one device, created on first use and never destroyed: tensors and streams may
// outlive static destruction at exit, so their allocator must too.
struct DeviceState {
  std::once_flag created;
  std::atomic<bool> ready{false};  // set (release) once arena and allocator exist
  std::unique_ptr<Arena> arena;
  std::unique_ptr<CachingAllocator> allocator;
  std::shared_ptr<npu::detail::StreamImpl> default_stream;
  std::mutex streams_mutex;
  std::vector<std::weak_ptr<npu::detail::StreamImpl>> streams;  // every stream, for synchronize
};

struct ProcessState {
  std::array<DeviceState, kMaxDevices> devices;
  std::atomic<uint64_t> next_stream_id{1};
  // Streams whose work may touch any device (new_shared_stream): every device's synchronize
  // waits for them.
  std::mutex shared_streams_mutex;
  std::vector<std::weak_ptr<npu::detail::StreamImpl>> shared_streams;
};

std::atomic<ProcessState*> g_state{nullptr};

ProcessState& process_state() {
  ProcessState* state = g_state.load(std::memory_order_acquire);
  if (state != nullptr) return *state;
  auto* fresh = new ProcessState();  // deliberately never freed, see DeviceState
  if (g_state.compare_exchange_strong(state, fresh, std::memory_order_acq_rel)) {
    // A forked child must not use its parent's worker threads or allocator locks: give it a
    // fresh state (the parent's stays mapped but unused).
    static std::once_flag atfork_once;
    std::call_once(atfork_once, [] {
      pthread_atfork(nullptr, nullptr, [] { g_state.store(nullptr, std::memory_order_release); });
    });
    return *fresh;
  }
  delete fresh;
  return *state;
}

thread_local int t_current_device = 0;
// The calling thread's current stream per device; empty means the default stream. One
// thread_local object: each access to one costs a call in a shared library.
struct ThreadStreams {
  ProcessState* owner = nullptr;  // `streams` and `current` belong to this state
  std::array<std::shared_ptr<npu::detail::StreamImpl>, kMaxDevices> streams;
  // The stream every collective and copy looks up: streams[d], or d's default stream; nullptr
  // until looked up once (which also checked d), or after streams[d] changed.
  std::array<npu::detail::StreamImpl*, kMaxDevices> current{};
};
thread_local ThreadStreams t_streams;
// Out of line, so that a caller looks the thread_local up once (see stream_impl.cc).
[[gnu::noinline]] ThreadStreams& thread_streams() {
  return t_streams;
}

DeviceState& device_state(int device) {
  ProcessState& state = process_state();
  DeviceState& entry = state.devices[static_cast<size_t>(device)];
  // The common case without std::call_once, whose fast path still sets thread-local state.
  if (entry.ready.load(std::memory_order_acquire)) [[likely]]
    return entry;
  std::call_once(entry.created, [&] {
    const uint64_t capacity = config::get_bytes("SHMCCL_NPU_MEMORY");
    entry.arena =
        std::make_unique<Arena>(device, capacity, config::get_bool("SHMCCL_NPU_HUGE_PAGES"));
    entry.allocator = std::make_unique<CachingAllocator>(
        *entry.arena, config::get_bool("SHMCCL_NPU_CACHING_ALLOCATOR"));
    entry.default_stream = std::make_shared<npu::detail::StreamImpl>(
        device, state.next_stream_id.fetch_add(1, std::memory_order_relaxed));
    entry.streams.push_back(entry.default_stream);
    entry.ready.store(true, std::memory_order_release);
    SHMCCL_INFO(kDevice, "npu:", device, " created: arena of ", capacity, " bytes");
  });
  return entry;
}

ThreadStreams& owned_thread_streams() {
  ProcessState* state = &process_state();
  ThreadStreams& mine = thread_streams();
  if (mine.owner != state) {
    mine.streams = {};
    mine.current = {};
    mine.owner = state;
  }
  return mine;
}

// The calling thread's current stream of `device` (already resolved): its own, or the default.
const std::shared_ptr<npu::detail::StreamImpl>& thread_current_stream(int device) {
  const auto& own = owned_thread_streams().streams[static_cast<size_t>(device)];
  return own ? own : device_state(device).default_stream;
}

void set_thread_stream(int device, std::shared_ptr<npu::detail::StreamImpl> stream) {
  ThreadStreams& mine = owned_thread_streams();
  mine.streams[static_cast<size_t>(device)] = std::move(stream);
  mine.current[static_cast<size_t>(device)] = nullptr;
}

}  // namespace

int resolve_device(int device) {
  const int resolved = device == -1 ? t_current_device : device;
  const int count = npu::device_count();
  if (resolved >= 0 && resolved < count) [[likely]]
    return resolved;
  const char* visible = std::getenv(kVisibleDevicesVariable);
  throw InvalidArgument(::shmccl::detail::concat(
      "invalid NPU device ", resolved, ": ", count, " devices are available (",
      visible != nullptr ? ::shmccl::detail::concat(kVisibleDevicesVariable, "=", visible)
                         : std::string("SHMCCL_NPU_DEVICE_COUNT"),
      ")"));
}

std::shared_ptr<npu::detail::StreamImpl> new_stream(int device) {
  const int resolved = resolve_device(device);
  DeviceState& entry = device_state(resolved);
  auto stream = std::make_shared<npu::detail::StreamImpl>(
      resolved, process_state().next_stream_id.fetch_add(1, std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(entry.streams_mutex);
  std::erase_if(entry.streams, [](const auto& weak) { return weak.expired(); });
  entry.streams.push_back(stream);
  return stream;
}

std::shared_ptr<npu::detail::StreamImpl> new_shared_stream(int device) {
  const int resolved = resolve_device(device);
  ProcessState& state = process_state();
  auto stream = std::make_shared<npu::detail::StreamImpl>(
      resolved, state.next_stream_id.fetch_add(1, std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(state.shared_streams_mutex);
  std::erase_if(state.shared_streams, [](const auto& weak) { return weak.expired(); });
  state.shared_streams.push_back(stream);
  return stream;
}

Arena& arena(int device) {
  return *device_state(resolve_device(device)).arena;
}

Arena* existing_arena(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  DeviceState& entry = process_state().devices[static_cast<size_t>(device)];
  return entry.ready.load(std::memory_order_acquire) ? entry.arena.get() : nullptr;
}

CachingAllocator& allocator(int device) {
  return *device_state(resolve_device(device)).allocator;
}

int device_of_pointer(const void* pointer) {
  ProcessState& state = process_state();
  for (int device = 0; device < kMaxDevices; ++device) {
    DeviceState& entry = state.devices[static_cast<size_t>(device)];
    // Only devices already created can own memory.
    if (entry.ready.load(std::memory_order_acquire) && entry.arena->contains(pointer)) {
      return device;
    }
  }
  return -1;
}

}  // namespace shmccl::device

namespace shmccl::npu {

namespace {

// The physical index of each device this process sees. Read once: device indices are checked on
// every tensor operation. A malformed ASCEND_RT_VISIBLE_DEVICES throws, here and at every later
// call (a static whose initialisation threw is tried again).
const std::vector<int>& visible_devices() {
  static const std::vector<int> devices = device::visible_devices_from_environment();
  return devices;
}

}  // namespace

int device_count() {
  static const int count = static_cast<int>(visible_devices().size());
  return count;
}

int physical_device(int device) {
  return visible_devices()[static_cast<size_t>(device::resolve_device(device))];
}

void set_device(int device) {
  SHMCCL_CHECK_ARG(device >= 0, "invalid NPU device ", device, ": must be >= 0");
  device::t_current_device = device::resolve_device(device);
}

int current_device() {
  return device::t_current_device;
}

Stream default_stream(int device) {
  return Stream(device::device_state(device::resolve_device(device)).default_stream);
}

}  // namespace shmccl::npu

namespace shmccl::device {

namespace {

[[gnu::noinline]] npu::detail::StreamImpl& look_up_current_stream(int device) {
  const int resolved = resolve_device(device);
  npu::detail::StreamImpl* stream = thread_current_stream(resolved).get();
  // The thread's own stream (held by its slot until set_thread_stream clears this) or the
  // immortal default stream: both outlive the cached pointer.
  owned_thread_streams().current[static_cast<size_t>(resolved)] = stream;
  return *stream;
}

}  // namespace

// Once per call of every collective: a cached pointer (a lookup costs ~120 instructions).
npu::detail::StreamImpl& current_stream_impl(int device) {
  const ThreadStreams& mine = thread_streams();
  const auto index = static_cast<size_t>(device);  // -1 (the current device) is out of range
  if (index < kMaxDevices && mine.owner == g_state.load(std::memory_order_acquire)) [[likely]] {
    if (npu::detail::StreamImpl* cached = mine.current[index]) [[likely]]
      return *cached;
  }
  return look_up_current_stream(device);
}

npu::detail::StreamImpl* current_stream_impl_if_used() noexcept {
  const int device = t_current_device;
  ProcessState* state = g_state.load(std::memory_order_acquire);
  if (device < 0 || device >= kMaxDevices || state == nullptr) return nullptr;
  const auto index = static_cast<size_t>(device);
  const ThreadStreams& mine = thread_streams();
  if (mine.owner == state) {  // not a state of the parent of a fork
    if (npu::detail::StreamImpl* cached = mine.current[index]) return cached;
    if (mine.streams[index]) return mine.streams[index].get();
  }
  const DeviceState& entry = state->devices[index];
  return entry.ready.load(std::memory_order_acquire) ? entry.default_stream.get() : nullptr;
}

}  // namespace shmccl::device

namespace shmccl::npu {

Stream current_stream(int device) {
  return Stream(device::thread_current_stream(device::resolve_device(device)));
}

// As torch.npu.set_stream (and torch.cuda's): the stream's device becomes the current device too,
// so that what follows (factories, .npu(), Event::record()) lands where the stream runs.
void set_stream(const Stream& stream) {
  SHMCCL_CHECK_ARG(stream.impl() != nullptr, "set_stream() of an empty stream");
  device::set_thread_stream(stream.device(), stream.impl());
  device::t_current_device = stream.device();
}

// As c10's StreamGuard: the previous device, and the previous stream of the stream's device,
// come back at the end of the scope.
StreamGuard::StreamGuard(const Stream& stream)
    : previous_(current_stream(stream.device())), previous_device_(current_device()) {
  set_stream(stream);
}

StreamGuard::~StreamGuard() {
  device::set_thread_stream(previous_.device(), previous_.impl());
  device::t_current_device = previous_device_;
}

void synchronize(int device) {
  const int resolved = device::resolve_device(device);
  device::DeviceState& entry = device::device_state(resolved);
  std::vector<std::shared_ptr<detail::StreamImpl>> streams;
  {
    std::lock_guard<std::mutex> lock(entry.streams_mutex);
    for (const auto& weak : entry.streams) {
      if (auto stream = weak.lock()) streams.push_back(std::move(stream));
    }
  }
  {
    device::ProcessState& state = device::process_state();
    std::lock_guard<std::mutex> lock(state.shared_streams_mutex);
    for (const auto& weak : state.shared_streams) {
      if (auto stream = weak.lock()) streams.push_back(std::move(stream));
    }
  }
  // Every stream, also past one whose work failed: the caller may free or reuse tensors once
  // this returns or throws. Then one stream's error is thrown (and cleared); the others stay
  // stored, for their stream's next synchronize() or this function's next call: never lost.
  std::exception_ptr refused;  // a wait that cannot be (called from one of the streams' tasks)
  for (const auto& stream : streams) {
    try {
      stream->wait_idle();
    } catch (...) {
      if (!refused) refused = std::current_exception();
    }
  }
  if (refused) std::rethrow_exception(refused);
  for (const auto& stream : streams) {
    if (std::exception_ptr error = stream->take_error()) std::rethrow_exception(error);
  }
}

MemoryStats memory_stats(int device) {
  return device::allocator(device).stats();
}
uint64_t memory_allocated(int device) {
  return memory_stats(device).allocated_bytes;
}
uint64_t memory_reserved(int device) {
  return memory_stats(device).reserved_bytes;
}
uint64_t max_memory_allocated(int device) {
  return memory_stats(device).max_allocated_bytes;
}
uint64_t max_memory_reserved(int device) {
  return memory_stats(device).max_reserved_bytes;
}
void reset_peak_memory_stats(int device) {
  device::allocator(device).reset_peak_stats();
}

void empty_cache() {
  device::ProcessState& state = device::process_state();
  for (device::DeviceState& entry : state.devices) {
    if (entry.ready.load(std::memory_order_acquire)) entry.allocator->empty_cache();
  }
}

}  // namespace shmccl::npu
