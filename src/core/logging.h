// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Leveled, per-subsystem logging to stderr, in the manner of NCCL_DEBUG / NCCL_DEBUG_SUBSYS:
//   SHMCCL_DEBUG=WARN|INFO|TRACE (default WARN), SHMCCL_DEBUG_SUBSYS=ALL or DEVICE,SHM,COLL,...
// The level is checked before any argument is formatted. Each line starts
// "host:pid:tid [rank] shmccl LEVEL SUBSYS". Thread-safe: one write(2) per line.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"

namespace shmccl::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum Subsys : uint32_t {
  kCore = 1u << 0,
  kDevice = 1u << 1,
  kShm = 1u << 2,
  kColl = 1u << 3,
  kOps = 1u << 4,
  kLaunch = 1u << 5,
  kAll = 0xFFFFFFFFu,
};

namespace detail {
// -1: not parsed yet. Relaxed is enough: every thread parses the same environment to the same
// value, so a race only parses twice.
extern std::atomic<int> g_level;
extern std::atomic<uint32_t> g_subsys_mask;
[[gnu::cold]] bool enabled_first_time(Level level, Subsys subsys) noexcept;
}  // namespace detail

// Cheap: inline, a relaxed load or two after the first call (the collectives' hot path traces).
inline bool enabled(Level level, Subsys subsys) noexcept {
  const int current = detail::g_level.load(std::memory_order_relaxed);
  if (current < 0) [[unlikely]]
    return detail::enabled_first_time(level, subsys);
  return static_cast<int>(level) <= current &&
         (detail::g_subsys_mask.load(std::memory_order_relaxed) & subsys) != 0;
}
void write(Level level, Subsys subsys, const std::string& message) noexcept;

// The rank printed in the prefix (-1: none yet).
void set_rank(int rank) noexcept;
int rank() noexcept;
// Re-reads SHMCCL_DEBUG / SHMCCL_DEBUG_SUBSYS (for tests).
void reload() noexcept;

// Where lines go instead of stderr (null: stderr). For shmrun, whose stderr also carries the
// ranks' lines through a queue of its own: its log lines take the same queue, or they would cut
// into a rank's line that the console took only part of. Set it while one thread logs.
using LineSink = void (*)(void* context, std::string_view line);
void set_line_sink(LineSink sink, void* context) noexcept;

}  // namespace shmccl::log

#define SHMCCL_LOG(level, subsys, ...)                                            \
  do {                                                                            \
    if (::shmccl::log::enabled(level, subsys)) [[unlikely]] {                     \
      ::shmccl::log::write(level, subsys, ::shmccl::detail::concat(__VA_ARGS__)); \
    }                                                                             \
  } while (0)

#define SHMCCL_WARN(subsys, ...) \
  SHMCCL_LOG(::shmccl::log::Level::kWarn, ::shmccl::log::subsys, __VA_ARGS__)
#define SHMCCL_INFO(subsys, ...) \
  SHMCCL_LOG(::shmccl::log::Level::kInfo, ::shmccl::log::subsys, __VA_ARGS__)
#define SHMCCL_TRACE(subsys, ...) \
  SHMCCL_LOG(::shmccl::log::Level::kTrace, ::shmccl::log::subsys, __VA_ARGS__)
