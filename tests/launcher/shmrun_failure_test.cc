// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: what shmrun does when a rank fails or shmrun itself is signalled. Every case also
// checks that no rank outlives shmrun and that /dev/shm holds nothing of the job afterwards.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

constexpr auto kGone = std::chrono::milliseconds(5000);

// The summary's root-cause entry.
std::string root_cause_of(const std::string& err) {
  const size_t at = err.find("Root Cause (first observed failure):\n[0]:\n");
  return at == std::string::npos ? "" : err.substr(at);
}

void expect_ranks_gone(const std::string& err, size_t expected) {
  const std::vector<pid_t> pids = rank_pids(err);
  EXPECT_EQ(pids.size(), expected) << err;
  for (pid_t pid : pids)
    EXPECT_TRUE(process_gone(pid, kGone)) << "rank pid " << pid << " alive";
}

TEST(Failure, ARankExitingNonZeroStopsTheOthersAndSetsTheExitCode) {
  const RunResult result = run_shmrun({"-v", "--nproc-per-node", "3", kWorker, "exit", "3", "1"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  expect_ranks_gone(result.err, 3);
  EXPECT_NE(result.err.find("Root Cause (first observed failure)"), std::string::npos);
  const std::string root_cause = root_cause_of(result.err);
  EXPECT_NE(root_cause.find("  rank       : 1 (local_rank: 1)\n  exitcode   : 3 (pid: "),
            std::string::npos)
      << result.err;
  expect_shm_clean(namespaces(result.err));
}

TEST(Failure, StoppingARankStopsTheProcessesItStarted) {
  const std::string fifo = ::testing::TempDir() + "shmrun-grandchild-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const RunResult result =
      run_shmrun({"-v", "--nproc-per-node", "2", kWorker, "grandchild", "1", fifo});
  unlink(fifo.c_str());
  EXPECT_EQ(result.exit_code, 3) << result.err;
  std::vector<pid_t> grandchildren;
  for (size_t at = result.out.find("grandchild "); at != std::string::npos;
       at = result.out.find("grandchild ", at + 1)) {
    grandchildren.push_back(static_cast<pid_t>(std::stol(result.out.substr(at + 11))));
  }
  EXPECT_EQ(grandchildren.size(), 2u) << result.out;
  for (pid_t pid : grandchildren) {
    EXPECT_TRUE(process_gone(pid, kGone)) << "grandchild " << pid << " outlived its rank";
  }
  expect_shm_clean(namespaces(result.err));
}

// shmrun signals a rank's process group (the rank and what it started) also after the rank
// exited, when the job stops. A reaped rank's pid, and with it the group's id, may go to any new
// process, which such a signal would hit; so the exited rank stays a zombie of shmrun, holding
// its pid, until shmrun is done with it.
TEST(Failure, AnExitedRankKeepsItsPidUntilShmrunIsDoneWithIt) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "exit", "0", "1"});
  pid_t exited = 0;
  ASSERT_TRUE(shmrun.read_err_until([&exited](const std::string& err) {
    const size_t at = err.find("rank 1 (pid ");
    if (at == std::string::npos || err.find(") ended: ", at) == std::string::npos) return false;
    exited = static_cast<pid_t>(std::atol(err.c_str() + at + 12));
    return true;
  })) << shmrun.err();
  std::ifstream stat("/proc/" + std::to_string(exited) + "/stat");
  std::string pid, name, state, parent;
  stat >> pid >> name >> state >> parent;
  EXPECT_EQ(state, "Z") << "rank 1 (pid " << exited << ") was reaped while the job ran";
  EXPECT_EQ(parent, std::to_string(shmrun.pid()));
  shmrun.send(SIGTERM);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_TRUE(process_gone(exited, kGone)) << "rank 1 was not reaped in the end";
}

TEST(Failure, ARankKilledBySigkillIsNamedInTheSummary) {
  const RunResult result = run_shmrun({"-v", "--nproc-per-node=2", kWorker, "signal", "9", "1"});
  EXPECT_EQ(result.exit_code, 128 + 9) << result.err;
  expect_ranks_gone(result.err, 2);
  const std::string root_cause = root_cause_of(result.err);
  EXPECT_NE(root_cause.find("  rank       : 1 (local_rank: 1)\n  exitcode   : -9 (pid: "),
            std::string::npos)
      << result.err;
  EXPECT_NE(root_cause.find("  error      : Signal 9 (SIGKILL) received by PID "),
            std::string::npos)
      << result.err;
  expect_shm_clean(namespaces(result.err));
}

TEST(Failure, TheSummaryNamesLogAndTraceFiles) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("shmrun_summary_" + std::to_string(getpid()));
  const RunResult result =
      run_shmrun({"--log-dir", dir, "--nproc-per-node=2", kWorker, "exit", "5", "0"},
                 {"SHMCCL_TRACE_FILE=/tmp/flight"});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(result.exit_code, 5) << result.err;
  const std::string rank_dir = run_log_dir(result.err) + "/attempt_0/0";
  EXPECT_NE(
      result.err.find("log_file   : " + rank_dir + "/stdout.log, " + rank_dir + "/stderr.log\n"),
      std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("trace_file : /tmp/flight.0"), std::string::npos) << result.err;
}

// `shmrun ... | head`: once the reader of shmrun's stdout is gone, shmrun stops the ranks and
// exits as a pipeline's writer does (128 + SIGPIPE), instead of running on with nowhere to write.
TEST(Failure, AReaderOfTheOutputThatGoesAwayEndsTheJob) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "flood", "-1"});
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) { return out.size() > 1000; }))
      << shmrun.err();
  shmrun.close_stdout();
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGPIPE) << result.err;
  EXPECT_NE(result.err.find("shmrun: received SIGPIPE: stopped all 2 ranks"), std::string::npos)
      << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

// A rank that writes without pause does not hold up the supervisor: the other rank's failure
// ends the job at once (one drain of a pipe used to read until the pipe was empty, which a rank
// writing without pause never lets it be).
TEST(Failure, ARankWritingWithoutPauseDoesNotDelayAFailure) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult result = run_shmrun({"-v", "--nproc-per-node", "2", kWorker, "flood", "1"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

// A reader of shmrun's stdout that stops reading without going away (a pager left unscrolled):
// shmrun keeps what the console does not take and stops reading the ranks' output, but it still
// hears signals and failures (a blocking write to the console used to hold it, signals blocked,
// until the reader read again).
bool console_paused(const std::string& err) {
  return err.find("the console's reader is behind") != std::string::npos;
}

TEST(Failure, ASignalEndsAJobWhoseOutputReaderStalled) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "flood", "-1"});
  shmrun.stall_stdout();
  ASSERT_TRUE(shmrun.read_err_until(console_paused)) << shmrun.err();
  shmrun.send(SIGTERM);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_NE(result.err.find("shmrun: received SIGTERM: stopped all 2 ranks"), std::string::npos)
      << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

// Both streams stalled: shmrun's own last line ("received SIGTERM: ...") cannot be written
// either; it waits for the reader a moment at most (a blocking write used to hold shmrun there
// for good, its job already stopped).
TEST(Failure, ASignalEndsAJobWhoseStdoutAndStderrReadersStalled) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "flood-both"});
  shmrun.stall_stdout();
  shmrun.stall_stderr();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(shmrun.pipe_full(false) && shmrun.pipe_full(true))) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "shmrun's pipes did not fill";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polls a condition
  }
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(SIGTERM);
  ASSERT_EQ(shmrun.read_until([](const std::string&) { return false; }), false);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "shmrun did not exit while its readers stalled";
  shmrun.resume_stdout();
  shmrun.resume_stderr();
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err.substr(0, 2000);
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

// shmrun's own log lines before the ranks run (-v: the job namespace, each rank's pid) go into
// the same non-blocking queue as everything else: a stderr whose reader is behind from the start
// neither keeps the ranks from starting nor a signal from stopping them. (They were written with a
// blocking write(2) while the stop signals were blocked: shmrun hung there, deaf to Ctrl-C.)
TEST(Failure, AStderrFullBeforeTheStartDelaysNeitherTheRanksNorASignal) {
  const std::string run_id = "stderr-full-" + std::to_string(getpid());
  Shmrun shmrun({"-v", "--run-id", run_id, "--nproc-per-node", "2", kWorker, "sleep"}, {},
                /*stderr_to_stdout=*/false, /*stderr_full=*/true);
  ASSERT_TRUE(shmrun.pipe_full(/*err=*/true));
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << "the ranks did not start while shmrun's stderr was full\nstdout:\n"
      << shmrun.out();
  const std::vector<pid_t> pids = Shmrun::ready_pids(shmrun.out());
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(SIGTERM);
  ASSERT_EQ(shmrun.read_until([](const std::string&) { return false; }), false);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "shmrun did not exit while its stderr was full";
  for (pid_t pid : pids)
    EXPECT_TRUE(process_gone(pid, kGone)) << "rank pid " << pid << " alive";
  shmrun.resume_stderr();
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM)
      << result.err.substr(result.err.find_first_not_of('.'));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().starts_with("shmccl." + run_id + "-"))
      left.push_back(entry.path().filename().string());
  }
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

// A rank failing while the reader is stalled: shmrun stops the other ranks and removes the job's
// shared memory at once; the ranks' last lines (why one failed) and the summary then wait for the
// reader, as a pipeline's writer waits for a pager.
TEST(Failure, ARankFailingWhileTheOutputReaderStalledStopsTheJobAndKeepsItsOutput) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "flood-until-usr2", "1"});
  shmrun.stall_stdout();
  ASSERT_TRUE(shmrun.read_err_until([](const std::string& err) {
    return console_paused(err) && err.find("waiting for SIGUSR2 rank=1") != std::string::npos;
  })) << shmrun.err();
  const std::vector<std::string> pid =
      tokens_after(shmrun.err(), "waiting for SIGUSR2 rank=1 pid=");
  ASSERT_EQ(pid.size(), 1u);
  ASSERT_EQ(kill(std::stoi(pid[0]), SIGUSR2), 0);
  ASSERT_TRUE(shmrun.read_err_until([](const std::string& err) {
    return err.find("every rank ended; waiting for the console's reader") != std::string::npos;
  })) << shmrun.err();
  expect_ranks_gone(shmrun.err(), 2);
  expect_shm_clean(namespaces(shmrun.err()));
  shmrun.resume_stdout();
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_NE(result.err.find("rank       : 1"), std::string::npos) << result.err;
  EXPECT_GT(result.out.size(), size_t{1} << 20) << "the output held back reached the reader";
}

// A rank that dies of the stop signal at once (a wrapper script) leaves what it started in its
// own handler: shmrun reads its output and waits for it within the grace period (5 s here), as
// torchrun does, instead of killing it with the rank's group as soon as the rank is gone.
TEST(Failure, WhatAStoppedRankStartedGetsTheGracePeriodToEnd) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", "--grace-period", "5", kWorker, "wrapper"});
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << shmrun.out()
      << shmrun.err();
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(SIGTERM);
  const RunResult result = shmrun.wait();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(result.out.find("rank " + std::to_string(rank) + "'s child saved its state"),
              std::string::npos)
        << result.out << result.err;
  }
  EXPECT_LT(seconds, 4.0) << "shmrun waited out the grace period: " << result.err;
  expect_shm_clean(namespaces(result.err));
}

class SignalToShmrun : public ::testing::TestWithParam<int> {};

TEST_P(SignalToShmrun, StopsEveryRankAndExitsWith128PlusTheSignal) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << shmrun.out()
      << shmrun.err();
  shmrun.send(GetParam());
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + GetParam()) << result.err;
  // After its clean-up, shmrun dies of a SIGINT itself: a shell running it in a loop learns of
  // the interrupt and stops (bash goes on after a child that exited with 130).
  EXPECT_EQ(result.ended_by_signal, GetParam() == SIGINT ? SIGINT : 0) << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(IntAndTerm, SignalToShmrun, ::testing::Values(SIGINT, SIGTERM));

// Any other signal whose default action would end shmrun, listed in --signals-to-handle or not,
// stops the job the same way: shmrun never ends without stopping its ranks and removing the
// job's shared memory.
class UnlistedSignalToShmrun : public ::testing::TestWithParam<int> {};

TEST_P(UnlistedSignalToShmrun, StopsTheJobAsAListedOneDoes) {
  const int signal_number = GetParam();
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << shmrun.out()
      << shmrun.err();
  shmrun.send(signal_number);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + signal_number) << result.err;
  const char* abbreviation = sigabbrev_np(signal_number);  // as shmrun names it
  const std::string name = abbreviation != nullptr ? std::string("SIG") + abbreviation
                                                   : "SIG" + std::to_string(signal_number);
  EXPECT_NE(result.err.find("shmrun: received " + name + ": stopped all 2 ranks"),
            std::string::npos)
      << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(EndingSignals, UnlistedSignalToShmrun,
                         ::testing::Values(SIGUSR2, SIGALRM, SIGXCPU, SIGPWR, SIGIO, SIGRTMIN + 3));

// As torchrun does, shmrun stops the ranks with the signal it received (a rank that handles
// SIGINT differently from SIGTERM sees which it was); --signals-to-handle adds signals to the
// four it handles (SLURM sends SIGUSR1 or SIGUSR2 ahead of a preemption). A listed SIGUSR1 stops
// the job instead of asking for a flight recorder dump.
struct ForwardedSignal {
  std::vector<std::string> options;
  int signal_number;
  const char* name;
};

class ForwardedSignalTest : public ::testing::TestWithParam<ForwardedSignal> {};

TEST_P(ForwardedSignalTest, StopsTheRanksWithTheSignalShmrunReceived) {
  std::vector<std::string> args = GetParam().options;
  for (const std::string& arg : {std::string("-v"), std::string("--nproc-per-node"),
                                 std::string("2"), kWorker, std::string("report-signals")})
    args.push_back(arg);
  Shmrun shmrun(args);
  ASSERT_TRUE(shmrun.read_until([](const std::string& out) {
    return Shmrun::has_ready_lines(out, 2);
  })) << shmrun.err();
  shmrun.send(GetParam().signal_number);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + GetParam().signal_number) << result.err;
  EXPECT_NE(
      result.err.find(std::string("shmrun: received ") + GetParam().name + ": stopped all 2 ranks"),
      std::string::npos)
      << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    // Once: a program that takes a second Ctrl-C as "quit now" must not see one.
    const std::string got = "[rank" + std::to_string(rank) + "]:got " + GetParam().name + "\n";
    size_t times = 0;
    for (size_t at = result.out.find(got); at != std::string::npos;
         at = result.out.find(got, at + 1))
      ++times;
    EXPECT_EQ(times, 1u) << result.out;
  }
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(
    Signals, ForwardedSignalTest,
    ::testing::Values(ForwardedSignal{{}, SIGINT, "SIGINT"}, ForwardedSignal{{}, SIGHUP, "SIGHUP"},
                      ForwardedSignal{{"--signals-to-handle=SIGTERM,SIGUSR2"}, SIGUSR2, "SIGUSR2"},
                      ForwardedSignal{{"--signals_to_handle", "usr1"}, SIGUSR1, "SIGUSR1"}),
    [](const ::testing::TestParamInfo<ForwardedSignal>& info) {
      return std::string(info.param.name + 3) + (info.param.options.empty() ? "" : "Listed");
    });

TEST(Failure, CtrlCIsAnInterruptNotARankFailure) {
  for (int i = 0; i < 3; ++i) {  // the ranks and shmrun race to see the signal
    Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
    ASSERT_TRUE(
        shmrun.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
    shmrun.send_to_group(SIGINT);
    const RunResult result = shmrun.wait();
    EXPECT_EQ(result.exit_code, 130) << result.err;
    EXPECT_EQ(result.err.find("FAILED"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("shmrun: received SIGINT: stopped all 2 ranks"), std::string::npos);
    expect_ranks_gone(result.err, 2);
    expect_shm_clean(namespaces(result.err));
  }
}

// Two ranks that ignore the stop signals; once both are ready, shmrun (started with `options`
// and `env`) gets `signal`. It must SIGKILL them after `grace` from the signal: not sooner, and
// not after the 5 s default (nor a unit off). Nothing is left behind.
void expect_killed_after_grace(std::vector<std::string> options,
                               const std::vector<std::string>& env, int signal,
                               std::chrono::milliseconds grace) {
  for (const char* arg : {"-v", "--nproc-per-node", "2"})
    options.emplace_back(arg);
  options.push_back(kWorker);
  options.emplace_back("ignore-stop");
  Shmrun shmrun(options, env);
  ASSERT_TRUE(
      shmrun.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(signal);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + signal) << result.err;
  EXPECT_GE(std::chrono::steady_clock::now() - start, grace);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
  EXPECT_NE(result.err.find("grace period over: SIGKILL to 2 ranks"), std::string::npos)
      << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

// torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT sets the grace period when no option does.
TEST(Failure, TheShutdownTimeoutOfTheEnvironmentIsTheDefaultGracePeriod) {
  for (const auto& [args, expected] :
       {std::pair{std::vector<std::string>{}, "SIGKILL after 0.25 s"},
        std::pair{std::vector<std::string>{"--shutdown-timeout", "0.5"}, "SIGKILL after 0.5 s"}}) {
    std::vector<std::string> command = args;
    for (const char* arg : {"-v", "--nproc-per-node", "2"})
      command.emplace_back(arg);
    for (const std::string& arg :
         {kWorker, std::string("exit"), std::string("3"), std::string("1")})
      command.push_back(arg);
    const RunResult result = run_shmrun(command, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=250ms"});
    EXPECT_EQ(result.exit_code, 3) << result.err;
    EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
  }
  // The grace period it sets is the one kept: ranks that ignore the stop die after 250 ms.
  expect_killed_after_grace({}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=250ms"}, SIGTERM,
                            std::chrono::milliseconds(250));
  const RunResult bad =
      run_shmrun({kWorker, "exit", "0", "0"}, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT='soon' is not a duration"),
            std::string::npos)
      << bad.err;
}

TEST(Failure, ARankIgnoringTheStopSignalIsKilledAfterTheGracePeriod) {
  expect_killed_after_grace({"--grace-period", "300ms"}, {}, SIGINT,
                            std::chrono::milliseconds(300));
}

// After a failure shmrun waits for the ranks' flight recorders (SHMCCL_TRACE_WAIT, 60 s here,
// with a trace file no rank writes). A signal to shmrun then ends the wait at once, and the ranks
// get that signal, as they would at any other time, not the SIGTERM of a failure.
TEST(Failure, ASignalDuringTheFlightRecorderWaitReachesTheRanksAsItCame) {
  const std::string prefix =
      std::filesystem::temp_directory_path() / ("shmrun_no_trace_" + std::to_string(getpid()));
  Shmrun shmrun({"-v", "--nproc-per-node", "3", kWorker, "fail-and-report", "2"},
                {"SHMCCL_TRACE_FILE=" + prefix, "SHMCCL_TRACE_WAIT=60s"});
  ASSERT_TRUE(shmrun.read_err_until([](const std::string& err) {
    return err.find("rank 2 (pid ") != std::string::npos &&
           err.find(") ended: exit code 3") != std::string::npos;
  })) << shmrun.err();
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(SIGINT);
  const RunResult result = shmrun.wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << result.err;
  for (int rank : {0, 1}) {
    const std::string line = "[rank" + std::to_string(rank) + "]:got SIG";
    EXPECT_NE(result.out.find(line + "INT\n"), std::string::npos) << result.out << result.err;
    EXPECT_EQ(result.out.find(line + "TERM"), std::string::npos) << result.out;
  }
  EXPECT_NE(result.err.find("stopping 2 ranks: SIGINT"), std::string::npos) << result.err;
  expect_ranks_gone(result.err, 3);
  expect_shm_clean(namespaces(result.err));
}

// A failure began the stop (SIGTERM, a 60 s grace period, ranks that go on). The first signal to
// shmrun then reaches the ranks, as torchrun forwards it, and does not cut the grace period: their
// handlers may be saving state. It used to SIGKILL them at once, as a second signal does.
TEST(Failure, TheFirstSignalDuringAFailuresStopIsForwardedWithinTheGracePeriod) {
  Shmrun shmrun({"-v", "--grace-period", "60", "--nproc-per-node", "3", kWorker,
                 "fail-and-keep-reporting", "2"});
  const auto both_got = [](const std::string& signal) {
    return [signal](const std::string& out) {
      return out.find("[rank0]:got " + signal + "\n") != std::string::npos &&
             out.find("[rank1]:got " + signal + "\n") != std::string::npos;
    };
  };
  ASSERT_TRUE(shmrun.read_until(both_got("SIGTERM"))) << shmrun.err();  // the failure's stop
  shmrun.send(SIGINT);
  ASSERT_TRUE(shmrun.read_until(both_got("SIGINT"))) << shmrun.err();  // alive: forwarded
  const auto start = std::chrono::steady_clock::now();
  shmrun.send(SIGINT);  // the second: no more grace
  const RunResult result = shmrun.wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << result.err;
  EXPECT_NE(result.err.find(") ended: exit code 3"), std::string::npos) << result.err;
  expect_ranks_gone(result.err, 3);
  expect_shm_clean(namespaces(result.err));
}

TEST(Failure, ASecondSignalKillsAtOnce) {
  Shmrun shmrun({"-v", "--grace-period", "60", "--nproc-per-node", "2", kWorker, "ignore-stop"});
  ASSERT_TRUE(
      shmrun.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  shmrun.send(SIGTERM);
  shmrun.send(SIGINT);
  const RunResult result = shmrun.wait();  // well before the 60 s grace period
  // Both may be pending at once; the kernel then hands out the lower number (SIGINT) first.
  EXPECT_TRUE(result.exit_code == 130 || result.exit_code == 143) << result.exit_code << result.err;
  expect_ranks_gone(result.err, 2);
  expect_shm_clean(namespaces(result.err));
}

TEST(Failure, RestartsTheGroupUntilItSucceeds) {
  const std::string counter =
      std::filesystem::temp_directory_path() / ("shmrun_attempts_" + std::to_string(getpid()));
  std::filesystem::remove(counter);
  const RunResult result = run_shmrun(
      {"-v", "--max-restarts", "2", "--nproc-per-node", "2", kWorker, "attempts", counter, "2"});
  std::ifstream in(counter);
  int attempts = 0;
  for (std::string line; std::getline(in, line);)
    ++attempts;
  std::filesystem::remove(counter);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(attempts, 3);
  for (const char* line :
       {"[rank0]:restart=0", "[rank0]:restart=1", "[rank0]:restart=2", "[rank1]:restart=2"}) {
    EXPECT_NE(result.out.find(line), std::string::npos) << line << "\n" << result.out;
  }
  EXPECT_NE(result.err.find("restarting all 2 ranks (restart 2 of 2)"), std::string::npos);
  const std::vector<std::string> all = namespaces(result.err);
  EXPECT_EQ(all.size(), 3u) << "one namespace per attempt";
  expect_shm_clean(all);
}

TEST(Failure, GivesUpAfterMaxRestarts) {
  const std::string counter =
      std::filesystem::temp_directory_path() / ("shmrun_attempts_" + std::to_string(getpid()));
  std::filesystem::remove(counter);
  const RunResult result = run_shmrun(
      {"-v", "--max-restarts=1", "--nproc-per-node", "2", kWorker, "attempts", counter, "5"});
  std::filesystem::remove(counter);
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(namespaces(result.err).size(), 2u);
  EXPECT_NE(result.err.find("Root Cause"), std::string::npos);
  expect_shm_clean(namespaces(result.err));
}

// As torchrun: every attempt writes its own attempt_<restart> directory, and the summary names
// the last attempt's files.
TEST(Failure, EachAttemptLogsToADirectoryOfItsOwn) {
  TempDir dir;
  const std::string counter = dir.path() + "/attempts";
  const RunResult result = run_shmrun({"--log-dir", dir.path() + "/logs", "--max-restarts=1",
                                       "--nproc-per-node", "2", kWorker, "attempts", counter, "5"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  const std::string run_dir = run_log_dir(result.err);
  ASSERT_FALSE(run_dir.empty()) << result.err;
  for (const std::string attempt : {"0", "1"}) {
    // Rank 0 fails once it has printed; rank 1 may be stopped before it prints.
    EXPECT_EQ(read_file(run_dir + "/attempt_" + attempt + "/0/stdout.log"),
              "restart=" + attempt + "\n");
    EXPECT_TRUE(std::filesystem::exists(run_dir + "/attempt_" + attempt + "/1/stdout.log"));
  }
  const std::string rank_dir = run_dir + "/attempt_1/0";
  EXPECT_NE(
      result.err.find("log_file   : " + rank_dir + "/stdout.log, " + rank_dir + "/stderr.log\n"),
      std::string::npos)
      << result.err;
}

TEST(Failure, RanksDieWithAKilledShmrun) {
  Shmrun shmrun({"-v", "--nproc-per-node", "2", kWorker, "sleep"});
  ASSERT_TRUE(
      shmrun.read_until([](const std::string& out) { return Shmrun::has_ready_lines(out, 2); }));
  // The ranks' entries exist while shmrun lives (its lock keeps other shmruns off them).
  ASSERT_TRUE(
      shmrun.read_err_until([](const std::string& err) { return namespaces(err).size() == 1; }));
  const std::string job_namespace = namespaces(shmrun.err())[0];
  EXPECT_EQ(shm_entries(job_namespace).size(), 3u)  // the lock and a segment per rank
      << "the job made no segments to leave";
  shmrun.send(SIGKILL);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGKILL);
  expect_ranks_gone(result.err, 2);  // PR_SET_PDEATHSIG
  // A SIGKILLed shmrun cannot clean up: that is what --cleanup is for. (Any shmrun that starts
  // meanwhile, another test's under ctest -j, removes what a killed launcher left, so the
  // entries may already be gone; either way none may stay.)
  const std::vector<std::string> all = namespaces(result.err);
  ASSERT_EQ(all, std::vector<std::string>{job_namespace});
  const RunResult cleanup = run_shmrun({"--cleanup", all[0]});
  EXPECT_EQ(cleanup.exit_code, 0) << cleanup.err;
  EXPECT_TRUE(shm_entries(all[0]).empty()) << cleanup.out;
}

}  // namespace
}  // namespace shmccl::launcher::testing
