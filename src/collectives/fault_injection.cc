// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "collectives/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"

namespace shmccl::collectives::fault {
namespace {

constexpr struct {
  Point point;
  const char* name;
} kPoints[] = {
    {Point::kBeforeArrival, "before_arrival"},
    {Point::kAfterArrival, "after_arrival"},
    {Point::kBeforeCopy, "before_copy"},
    {Point::kMidCopy, "mid_copy"},
    {Point::kAfterCopy, "after_copy"},
    {Point::kRendezvous, "rendezvous"},
    {Point::kBarrier, "barrier"},
    {Point::kTimedOut, "timed_out"},
    {Point::kGaveUp, "gave_up"},
    {Point::kAwaitsPeers, "awaits_peers"},
    {Point::kJoinsGroup, "joins_group"},
    {Point::kPublishesGroup, "publishes_group"},
    {Point::kQueues, "queues"},
    {Point::kGemm, "gemm"},
};

std::mutex g_mutex;
Spec g_spec;  // guarded by g_mutex
std::atomic<bool> g_fired{false};
std::atomic<bool> g_spec_armed{false};
std::atomic<Hook> g_hook{nullptr};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == separator) {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  return parts;
}

bool parse_number(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = value;
  return true;
}

void act(const Spec& spec) {
  switch (spec.action) {
    case Action::kKill:
      ::kill(::getpid(), SIGKILL);
      break;
    case Action::kExit:
      ::_exit(kFaultExitCode);
    case Action::kStop:
      // Every thread stops here; a SIGCONT (a test, a debugger, `kill -CONT`) lets it go on.
      ::raise(SIGSTOP);
      return;
    case Action::kBadAlloc:
      // What an allocation that fails inside a collective throws: not a shmccl::Error.
      throw std::bad_alloc();
    case Action::kStall:
      break;
  }
  // Stall: until someone kills the process (or for a day).
  for (int i = 0; i < 24 * 3600; ++i)
    ::sleep(1);
  ::_exit(kFaultExitCode);
}

}  // namespace

namespace detail {
std::atomic<bool> g_armed{false};

void reached(Point point, int rank, uint64_t sequence, bool barrier) {
  if (const Hook hook = g_hook.load(std::memory_order_acquire)) hook(point, sequence);
  if (!g_spec_armed.load(std::memory_order_acquire)) return;
  Spec spec;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    spec = g_spec;
  }
  if (spec.rank != rank) return;
  if (spec.point == Point::kBarrier) {
    if (!barrier || point != Point::kBeforeArrival) return;
  } else if (spec.point != point) {
    return;
  }
  if (spec.sequence != 0 && spec.sequence != sequence) return;
  if (g_fired.exchange(true)) return;
  SHMCCL_WARN(kColl, "fault injection: ", action_name(spec.action), " at ", point_name(spec.point),
              " (rank ", rank, ", sequence ", sequence, ")");
  act(spec);
}
}  // namespace detail

const char* point_name(Point point) {
  for (const auto& entry : kPoints) {
    if (entry.point == point) return entry.name;
  }
  return "?";
}

const char* action_name(Action action) {
  switch (action) {
    case Action::kKill:
      return "kill";
    case Action::kStall:
      return "stall";
    case Action::kExit:
      return "exit";
    case Action::kStop:
      return "stop";
    case Action::kBadAlloc:
      return "bad_alloc";
  }
  return "?";
}

Spec parse(const std::string& text) {
  const std::vector<std::string> parts = split(text, ':');
  const char* format = " (expected <point>:<rank>[:<action>][:<sequence>])";
  SHMCCL_CHECK_ARG(parts.size() >= 2 && parts.size() <= 4, "SHMCCL_FAULT='", text, "' has ",
                   parts.size(), " fields", format);
  Spec spec;
  bool known = false;
  for (const auto& entry : kPoints) {
    if (parts[0] == entry.name) {
      spec.point = entry.point;
      known = true;
    }
  }
  if (!known) {
    std::string points;
    for (const auto& entry : kPoints)
      points += std::string(points.empty() ? "" : ", ") + entry.name;
    throw InvalidArgument(shmccl::detail::concat("SHMCCL_FAULT='", text, "': unknown point '",
                                                 parts[0], "' (", points, ")"));
  }
  uint64_t rank = 0;
  SHMCCL_CHECK_ARG(parse_number(parts[1], &rank) && rank < (1u << 20), "SHMCCL_FAULT='", text,
                   "': '", parts[1], "' is not a rank");
  spec.rank = static_cast<int>(rank);
  if (parts.size() >= 3 && !parts[2].empty()) {
    if (parts[2] == "kill") {
      spec.action = Action::kKill;
    } else if (parts[2] == "stall") {
      spec.action = Action::kStall;
    } else if (parts[2] == "exit") {
      spec.action = Action::kExit;
    } else if (parts[2] == "stop") {
      spec.action = Action::kStop;
    } else if (parts[2] == "bad_alloc") {
      spec.action = Action::kBadAlloc;
    } else {
      throw InvalidArgument(shmccl::detail::concat("SHMCCL_FAULT='", text, "': unknown action '",
                                                   parts[2],
                                                   "' (kill, stall, exit, stop, bad_alloc)"));
    }
  }
  if (parts.size() == 4) {
    SHMCCL_CHECK_ARG(parse_number(parts[3], &spec.sequence) && spec.sequence > 0, "SHMCCL_FAULT='",
                     text, "': '", parts[3], "' is not a sequence number (1, 2, ...)");
  }
  return spec;
}

void configure() {
  const std::string text = config::get_string("SHMCCL_FAULT");
  if (text.empty()) {
    g_spec_armed.store(false);
    detail::g_armed.store(g_hook.load() != nullptr);
    return;
  }
  SHMCCL_CHECK_ARG(compiled_in(),
                   "SHMCCL_FAULT is set, but this build of shmccl has no fault "
                   "injection (configure with -DSHMCCL_FAULT_INJECTION=ON)");
  const Spec spec = parse(text);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_spec = spec;
  }
  g_fired.store(false);
  g_spec_armed.store(true);
  detail::g_armed.store(true);
  SHMCCL_INFO(kColl, "fault injection armed: ", action_name(spec.action), " at ",
              point_name(spec.point), " on rank ", spec.rank,
              spec.sequence ? shmccl::detail::concat(", sequence ", spec.sequence) : "");
}

void set_hook(Hook hook) {
  SHMCCL_CHECK_ARG(hook == nullptr || compiled_in(),
                   "fault::set_hook: this build of shmccl has no fault injection");
  g_hook.store(hook, std::memory_order_release);
  detail::g_armed.store(hook != nullptr || g_spec_armed.load());
}

}  // namespace shmccl::collectives::fault
