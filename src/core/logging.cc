// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

namespace shmccl::log {
namespace {

std::atomic<int> g_rank{-1};
std::atomic<LineSink> g_line_sink{nullptr};
std::atomic<void*> g_line_sink_context{nullptr};

Level parse_level(const char* text) {
  if (text == nullptr) return Level::kWarn;
  std::string upper;
  for (const char* c = text; *c; ++c)
    upper += static_cast<char>(std::toupper(*c));
  if (upper == "NONE" || upper == "OFF") return Level::kNone;
  if (upper == "INFO") return Level::kInfo;
  if (upper == "TRACE" || upper == "ALL") return Level::kTrace;
  return Level::kWarn;
}

uint32_t subsys_bit(const std::string& name) {
  if (name == "CORE") return kCore;
  if (name == "DEVICE") return kDevice;
  if (name == "SHM") return kShm;
  if (name == "COLL") return kColl;
  if (name == "OPS") return kOps;
  if (name == "LAUNCH") return kLaunch;
  if (name == "ALL") return kAll;
  return 0;
}

uint32_t parse_subsys(const char* text) {
  if (text == nullptr || *text == '\0') return kAll;
  bool exclude = false;
  if (*text == '^') {
    exclude = true;
    ++text;
  }
  uint32_t mask = 0;
  std::string token;
  for (const char* c = text;; ++c) {
    if (*c == ',' || *c == '\0') {
      mask |= subsys_bit(token);
      token.clear();
      if (*c == '\0') break;
    } else if (!std::isspace(static_cast<unsigned char>(*c))) {  // "COLL, SHM" names SHM too
      token += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    }
  }
  return exclude ? ~mask : mask;
}

void parse_environment() {
  detail::g_subsys_mask.store(parse_subsys(std::getenv("SHMCCL_DEBUG_SUBSYS")),
                              std::memory_order_relaxed);
  detail::g_level.store(static_cast<int>(parse_level(std::getenv("SHMCCL_DEBUG"))),
                        std::memory_order_relaxed);
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kWarn:
      return "WARN";
    case Level::kInfo:
      return "INFO";
    case Level::kTrace:
      return "TRACE";
    case Level::kNone:
      break;
  }
  return "NONE";
}

const char* subsys_name(Subsys subsys) {
  switch (subsys) {
    case kCore:
      return "CORE";
    case kDevice:
      return "DEVICE";
    case kShm:
      return "SHM";
    case kColl:
      return "COLL";
    case kOps:
      return "OPS";
    case kLaunch:
      return "LAUNCH";
    case kAll:
      break;
  }
  return "ALL";
}

}  // namespace

namespace detail {

std::atomic<int> g_level{-1};
std::atomic<uint32_t> g_subsys_mask{0};

bool enabled_first_time(Level level, Subsys subsys) noexcept {
  parse_environment();
  return enabled(level, subsys);
}

}  // namespace detail

void write(Level level, Subsys subsys, const std::string& message) noexcept {
  try {
    char host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    std::string line = host;
    line += ':' + std::to_string(getpid()) + ':' + std::to_string(syscall(SYS_gettid));
    const int rank = g_rank.load(std::memory_order_relaxed);
    line += rank >= 0 ? " [" + std::to_string(rank) + "] " : " [-] ";
    line += "shmccl ";
    line += level_name(level);
    line += ' ';
    line += subsys_name(subsys);
    line += ' ';
    line += message;
    line += '\n';
    if (const LineSink sink = g_line_sink.load(std::memory_order_acquire)) {
      sink(g_line_sink_context.load(std::memory_order_relaxed), line);
      return;
    }
    // One write(2) so lines of concurrent threads and processes do not interleave.
    [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  } catch (...) {
    // Logging never throws.
  }
}

void set_line_sink(LineSink sink, void* context) noexcept {
  g_line_sink_context.store(context, std::memory_order_relaxed);
  g_line_sink.store(sink, std::memory_order_release);
}

void set_rank(int rank) noexcept {
  g_rank.store(rank, std::memory_order_relaxed);
}

int rank() noexcept {
  return g_rank.load(std::memory_order_relaxed);
}

void reload() noexcept {
  parse_environment();
}

}  // namespace shmccl::log
