// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/failure_summary.h"

#include <gtest/gtest.h>

#include <csignal>

namespace shmccl::launcher {
namespace {

RankExit exit_of(int rank, ExitStatus status, bool stopped) {
  RankExit exit;
  exit.rank = rank;
  exit.local_rank = rank;
  exit.pid = 1000 + rank;
  exit.status = status;
  exit.stopped = stopped;
  exit.time = std::chrono::system_clock::now();
  return exit;
}

std::string summary(const std::vector<RankExit>& others) {
  SummaryContext context;
  context.program = "prog";
  context.host = "host";
  return format_failure_summary(context, exit_of(0, ExitStatus{false, 3}, false), others);
}

TEST(FailureSummary, NamesTheRootCauseFirst) {
  const std::string text = summary({});
  EXPECT_NE(text.find("prog FAILED"), std::string::npos) << text;
  EXPECT_NE(text.find("Root Cause (first observed failure):\n[0]:\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  exitcode   : 3 (pid: 1000)\n  error      : exited with code 3\n"),
            std::string::npos)
      << text;
}

TEST(FailureSummary, OnlyARecordedRemoteErrorIsAFailureBecauseOfAPeer) {
  RankExit exit = exit_of(1, ExitStatus{true, SIGABRT}, false);
  EXPECT_FALSE(failed_because_of_a_peer(exit)) << "nothing recorded";
  exit.recorded = RecordedError{"shmccl::InvalidArgument: bad batch 7", "", std::nullopt};
  EXPECT_FALSE(failed_because_of_a_peer(exit));
  exit.recorded->message = "RuntimeError: shmccl::RemoteError in a Python message";
  EXPECT_FALSE(failed_because_of_a_peer(exit));
  exit.recorded->message = "shmccl::RemoteError: rank 3 (pid 42) died";
  EXPECT_TRUE(failed_because_of_a_peer(exit));
}

TEST(FailureSummary, ARecordedErrorIsShownAsTorchrunsTraceback) {
  SummaryContext context;
  context.program = "prog";
  context.host = "host";
  RankExit failed = exit_of(1, ExitStatus{false, 1}, false);
  failed.recorded = RecordedError{"E: x", "Trace:\n  frame\nE: x\n", 1};
  failed.error_file = "/logs/rank1.error.json";
  const std::string text =
      format_failure_summary(context, failed, {exit_of(0, ExitStatus{false, 1}, false)});
  EXPECT_NE(text.find("  error      : exited with code 1\n"
                      "  error_file : /logs/rank1.error.json\n"
                      "  traceback  : Trace:\n"
                      "                 frame\n"
                      "               E: x\n"
                      "===="),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("traceback"), text.rfind("traceback")) << "rank 0 recorded nothing: " << text;
}

// A rank that died of a signal shmrun sent it.
RankExit stopped_by_shmrun(int rank, int signal_number) {
  RankExit exit = exit_of(rank, ExitStatus{true, signal_number}, true);
  exit.signaled_by_shmrun = true;
  return exit;
}

TEST(FailureSummary, OnlyShmrunsSignalsReadAsStoppedByShmrun) {
  const std::string text =
      summary({stopped_by_shmrun(1, SIGTERM), stopped_by_shmrun(2, SIGKILL),
               exit_of(3, ExitStatus{true, SIGABRT}, true),
               exit_of(4, ExitStatus{true, SIGSEGV}, false), exit_of(5, ExitStatus{false, 1}, true),
               stopped_by_shmrun(6, SIGINT), exit_of(7, ExitStatus{true, SIGTERM}, true)});
  for (const char* line : {
           "Signal 15 (SIGTERM) received by PID 1001 (stopped by shmrun)\n",
           "Signal 9 (SIGKILL) received by PID 1002 (stopped by shmrun)\n",
           // A rank that aborted on its own while the group was being stopped.
           "Signal 6 (SIGABRT) received by PID 1003 while shmrun was stopping the group\n",
           "Signal 11 (SIGSEGV) received by PID 1004\n",
           "exited with code 1 while shmrun was stopping the group\n",
           // Ctrl-C, forwarded: shmrun stopped the rank with the signal it received.
           "Signal 2 (SIGINT) received by PID 1006 (stopped by shmrun)\n",
           // A SIGTERM from someone else: the rank did not end by shmrun's hand.
           "Signal 15 (SIGTERM) received by PID 1007 while shmrun was stopping the group\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "no line " << line << "in\n" << text;
  }
}

}  // namespace
}  // namespace shmccl::launcher
