// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// StreamTask: one unit of a stream's work, a move-only void() callable. A callable of up to
// kInlineBytes that moves without throwing is stored in place, so queueing it allocates nothing.
// std::function stores in place only trivially copyable callables of two pointers or less, and a
// stream's tasks mostly capture a shared_ptr (an asynchronous collective's Work, an event): with
// std::function, an allocation and a free per task. Not thread-safe.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace shmccl::npu::detail {

class StreamTask {
 public:
  // Room for a std::function (32 bytes) or a few captured handles.
  static constexpr std::size_t kInlineBytes = 48;

  StreamTask() = default;
  StreamTask(std::nullptr_t) {}  // NOLINT: as std::function's

  template <typename F, typename Callable = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<Callable, StreamTask> &&
                                        std::is_invocable_r_v<void, Callable&>>>
  StreamTask(F&& callable) {  // NOLINT: converts implicitly, as std::function does
    if constexpr (kStoredInPlace<Callable>) {
      ::new (static_cast<void*>(storage_)) Callable(std::forward<F>(callable));
      ops_ = &kInPlaceOps<Callable>;
    } else {
      ::new (static_cast<void*>(storage_)) Callable*(new Callable(std::forward<F>(callable)));
      ops_ = &kOnHeapOps<Callable>;
    }
  }

  StreamTask(StreamTask&& other) noexcept { take(other); }
  StreamTask& operator=(StreamTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  StreamTask& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  StreamTask(const StreamTask&) = delete;
  StreamTask& operator=(const StreamTask&) = delete;
  ~StreamTask() { reset(); }

  // Runs the callable; requires one.
  void operator()() { ops_->invoke(storage_); }
  explicit operator bool() const { return ops_ != nullptr; }

 private:
  struct Ops {
    void (*invoke)(void* storage);
    void (*relocate)(void* from, void* to) noexcept;  // move-constructs `to`, destroys `from`
    void (*destroy)(void* storage) noexcept;
  };

  template <typename Callable>
  static constexpr bool kStoredInPlace = sizeof(Callable) <= kInlineBytes &&
                                         alignof(Callable) <= alignof(std::max_align_t) &&
                                         std::is_nothrow_move_constructible_v<Callable>;

  template <typename Callable>
  static constexpr Ops kInPlaceOps = {
      [](void* storage) { (*std::launder(static_cast<Callable*>(storage)))(); },
      [](void* from, void* to) noexcept {
        Callable* source = std::launder(static_cast<Callable*>(from));
        ::new (to) Callable(std::move(*source));
        source->~Callable();
      },
      [](void* storage) noexcept { std::launder(static_cast<Callable*>(storage))->~Callable(); },
  };

  // The slot holds a Callable* (moves copy the pointer).
  template <typename Callable>
  static constexpr Ops kOnHeapOps = {
      [](void* storage) { (**std::launder(static_cast<Callable**>(storage)))(); },
      [](void* from, void* to) noexcept {
        ::new (to) Callable*(*std::launder(static_cast<Callable**>(from)));
      },
      [](void* storage) noexcept { delete *std::launder(static_cast<Callable**>(storage)); },
  };

  void take(StreamTask& other) noexcept {
    if (other.ops_ == nullptr) return;
    other.ops_->relocate(other.storage_, storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }
  void reset() noexcept {
    if (ops_ != nullptr) std::exchange(ops_, nullptr)->destroy(storage_);
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace shmccl::npu::detail
