// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/failure_summary.h"

#include <csignal>
#include <ctime>
#include <exception>

#include "core/error_file.h"
#include "shmccl/error.hpp"

namespace shmccl::launcher {
namespace {

const std::string kHeavyRule(60, '=');
const std::string kLightRule(60, '-');

void append_entry(std::string& out, int index, const RankExit& exit,
                  const SummaryContext& context) {
  auto field = [&out](const char* name, const std::string& value) {
    out += "  ";
    out += name;
    out.append(11 - std::string(name).size(), ' ');
    out += ": " + value + "\n";
  };
  out += "[" + std::to_string(index) + "]:\n";
  field("time", format_time(exit.time));
  field("host", context.host);
  field("rank",
        std::to_string(exit.rank) + " (local_rank: " + std::to_string(exit.local_rank) + ")");
  // torchrun's convention: a negative exit code is the signal number.
  const int code = exit.status.signaled ? -exit.status.code : exit.status.code;
  field("exitcode", std::to_string(code) + " (pid: " + std::to_string(exit.pid) + ")");
  if (exit.status.signaled) {
    // shmrun stops ranks with SIGTERM (or the signal it received, forwarded), then SIGKILL: any
    // other signal (an abort, a crash) the rank brought on itself, even while the group was
    // being stopped.
    const char* when = exit.signaled_by_shmrun ? " (stopped by shmrun)"
                       : exit.stopped          ? " while shmrun was stopping the group"
                                               : "";
    field("error", "Signal " + std::to_string(exit.status.code) + " (" +
                       signal_name(exit.status.code) + ") received by PID " +
                       std::to_string(exit.pid) + when);
  } else {
    field("error", "exited with code " + std::to_string(exit.status.code) +
                       (exit.stopped ? " while shmrun was stopping the group" : ""));
  }
  const size_t rank = static_cast<size_t>(exit.rank);
  if (exit.recorded) {
    if (!exit.error_file.empty()) field("error_file", exit.error_file);
    // torch's "traceback" field; continuation lines lined up under the first.
    std::string traceback = exit.recorded->traceback;
    while (!traceback.empty() && (traceback.back() == '\n' || traceback.back() == ' '))
      traceback.pop_back();
    for (size_t at = traceback.find('\n'); at != std::string::npos;
         at = traceback.find('\n', at + 1)) {
      traceback.insert(at + 1, std::string(15, ' '));
    }
    field("traceback", traceback);
  }
  if (rank < context.log_files.size() && !context.log_files[rank].empty()) {
    field("log_file", context.log_files[rank]);
  }
  if (!context.trace_file.empty()) {
    const bool written = rank < context.trace_written.size() && context.trace_written[rank];
    field("trace_file",
          context.trace_file + "." + std::to_string(exit.rank) + (written ? "" : " (not written)"));
  }
}

}  // namespace

std::string format_time(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d_%H:%M:%S", &local);
  return text;
}

bool failed_because_of_a_peer(const RankExit& exit) {
  // What a rank's error file begins with for a RemoteError, as the writer spells it.
  static const std::string prefix =
      elastic::detail::describe(std::make_exception_ptr(RemoteError("")));
  return exit.recorded && exit.recorded->message.starts_with(prefix);
}

std::string format_failure_summary(const SummaryContext& context, const RankExit& root_cause,
                                   const std::vector<RankExit>& others) {
  std::string out = kHeavyRule + "\n" + context.program + " FAILED\n" + kLightRule + "\n";
  out += "Failures:\n";
  if (others.empty()) out += "  <NO_OTHER_FAILURES>\n";
  for (size_t i = 0; i < others.size(); ++i) {
    append_entry(out, static_cast<int>(i) + 1, others[i], context);
  }
  out += kLightRule + "\nRoot Cause (first observed failure):\n";
  append_entry(out, 0, root_cause, context);
  out += kHeavyRule + "\n";
  return out;
}

}  // namespace shmccl::launcher
