// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The typed registry of every SHMCCL_* environment variable. Each setting is declared once (in
// config.cc) with its type, default and help text; values are parsed once, on first use, and a bad
// value is warned about and replaced by the default. `shmrun --dump-config` prints the table.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

namespace shmccl::config {

enum class Kind { kBool, kInt, kBytes, kSeconds, kString };

struct Setting {
  const char* name;  // "SHMCCL_TIMEOUT"
  Kind kind;
  const char* default_value;  // as text, in the variable's own syntax
  const char* help;
};

std::span<const Setting> all_settings() noexcept;
const char* kind_name(Kind kind) noexcept;

// The value in force (environment or default), as text.
std::string get_string(const char* name);
bool get_bool(const char* name);
int64_t get_int(const char* name);
uint64_t get_bytes(const char* name);  // accepts K, M, G, T suffixes (powers of 1024)
double get_seconds(const char* name);  // accepts s, ms, us, m suffixes; plain number = seconds

// Parsers shared with the launcher's command line; false on a malformed value (and, for seconds,
// on more than 1e9 s, which would overflow a deadline).
bool parse_bytes(const std::string& text, uint64_t* out) noexcept;
bool parse_seconds(const std::string& text, double* out) noexcept;

// Forgets parsed values so the next get_* reads the environment again (tests).
void reload() noexcept;

// How many times reload() ran, plus one: a value kept outside the registry is stale once this
// changes.
uint64_t generation() noexcept;

// A setting kept for hot paths, where get_*'s lock and lookup would show: read again only after a
// reload(). `Read` is one of the get_* functions above. Constant-initialized, so a function-local
// static of this type costs no guard.
template <typename T, T (*Read)(const char*)>
class CachedSetting {
 public:
  explicit constexpr CachedSetting(const char* name) noexcept : name_(name) {}

  T get() {
    const uint64_t current = generation();
    if (generation_seen_.load(std::memory_order_acquire) == current) {
      return value_.load(std::memory_order_relaxed);
    }
    const T value = Read(name_);
    value_.store(value, std::memory_order_relaxed);
    generation_seen_.store(current, std::memory_order_release);
    return value;
  }

 private:
  const char* name_;
  std::atomic<T> value_{};
  std::atomic<uint64_t> generation_seen_{0};  // 0: never read
};

}  // namespace shmccl::config
