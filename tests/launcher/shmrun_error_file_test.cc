// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: torch.distributed.elastic's error files. shmrun gives each rank a
// TORCHELASTIC_ERROR_FILE; a shmccl rank whose exception escapes main writes it (what, and where
// it was thrown), as does torch's @record for a Python rank; shmrun's failure report shows it as
// torchrun's does ("traceback"), and names the file when it sits in the log directory.
#include <sys/stat.h>

#include "core/file_descriptor.h"
#include "core/json.h"
#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

const std::string kShmcclWorker = SHMCCL_BINARY_DIR "/tests/launcher/launcher_shmccl_worker";

// The text of the failure report from "Root Cause" on.
std::string root_cause(const std::string& err) {
  const size_t at = err.find("Root Cause (first observed failure):");
  return at == std::string::npos ? std::string() : err.substr(at);
}

class ErrorFileTest : public ::testing::TestWithParam<int> {};

// An exception that escapes main: the report gives its type, what() and throw site; the file,
// among the attempt's shared memory objects here, is gone with them.
TEST_P(ErrorFileTest, AnExceptionEscapingMainIsTheRootCausesTraceback) {
  const int world = GetParam();
  const std::string run_id = "error_file_" + std::to_string(world);
  const RunResult result =
      run_shmrun({"-v", "--run-id", run_id, "--nproc-per-node", std::to_string(world),
                  kShmcclWorker, "throw", std::to_string(world - 1)});
  EXPECT_EQ(result.exit_code, 128 + SIGABRT) << result.err;
  const std::string cause = root_cause(result.err);
  EXPECT_NE(cause.find("rank       : " + std::to_string(world - 1)), std::string::npos) << cause;
  EXPECT_NE(cause.find("traceback  : shmccl::InvalidArgument: bad batch 7\n"), std::string::npos)
      << cause;
  EXPECT_NE(cause.find("thrown at (innermost first"), std::string::npos) << cause;
  EXPECT_EQ(cause.find("error_file"), std::string::npos)
      << "a file among the shared memory objects is gone when shmrun ends: " << cause;
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ErrorFileTest, ::testing::Values(2, 3, 4, 8));

// On a loaded machine shmrun may look only once both the rank that failed and the ranks its death
// failed have ended (here shmrun is stopped meanwhile). The root cause is the rank that failed on
// its own, not the first one shmrun happens to read: the others recorded a RemoteError about it.
TEST(ErrorFile, RanksFailedByAnothersDeathAreNotTheRootCauseWhenShmrunSeesThemEndTogether) {
  TempDir dir;
  const std::string gate = dir.path() + "/gate";
  ASSERT_EQ(mkfifo(gate.c_str(), 0600), 0);
  constexpr int kWorld = 4;
  Shmrun shmrun(
      {"-v", "--nproc-per-node", std::to_string(kWorld), kShmcclWorker, "throw", "3", gate});
  ASSERT_TRUE(shmrun.read_err_until([](const std::string& err) {
    return rank_pids(err).size() >= static_cast<size_t>(kWorld);
  })) << shmrun.err();
  std::vector<FileDescriptor> ranks;
  for (pid_t pid : rank_pids(shmrun.err())) {
    ranks.emplace_back(pidfd_open(pid));
    ASSERT_TRUE(ranks.back().valid()) << "rank pid " << pid;
  }
  shmrun.send(SIGSTOP);
  // A writer (O_RDWR does not wait for a reader): rank 3 passes its gate and throws.
  const FileDescriptor writer(open(gate.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(writer.valid());
  for (const FileDescriptor& rank : ranks) {
    pollfd ended{rank.get(), POLLIN, 0};
    ASSERT_EQ(poll(&ended, 1, std::chrono::milliseconds(kDeadline).count()), 1)
        << "a rank did not end: " << shmrun.err();
  }
  shmrun.send(SIGCONT);
  const RunResult result = shmrun.wait();
  EXPECT_EQ(result.exit_code, 128 + SIGABRT) << result.err;
  const std::string cause = root_cause(result.err);
  EXPECT_NE(cause.find("rank       : 3"), std::string::npos) << cause;
  EXPECT_NE(cause.find("traceback  : shmccl::InvalidArgument: bad batch 7\n"), std::string::npos)
      << cause;
  expect_shm_clean(namespaces(result.err));
}

// With a log directory the file stays beside the rank's log, in torch's layout, and the report
// names it.
TEST(ErrorFile, InTheLogDirectoryItIsKeptAndNamed) {
  TempDir dir;
  const RunResult result =
      run_shmrun({"--log-dir", dir.path(), "--nproc-per-node", "2", kShmcclWorker, "throw", "0"});
  EXPECT_EQ(result.exit_code, 128 + SIGABRT) << result.err;
  const std::string path = run_log_dir(result.err) + "/attempt_0/0/error.json";
  EXPECT_NE(root_cause(result.err).find("error_file : " + path), std::string::npos) << result.err;
  const std::optional<json::Value> file = json::parse(read_file(path));
  ASSERT_TRUE(file && file->is_object()) << read_file(path);
  const json::Value* message = file->find("message");
  ASSERT_TRUE(message != nullptr && message->is_object());
  ASSERT_TRUE(message->find("message") != nullptr);
  EXPECT_EQ(message->find("message")->string, "shmccl::InvalidArgument: bad batch 7");
  const json::Value* extra = message->find("extraInfo");
  ASSERT_TRUE(extra != nullptr && extra->find("timestamp") != nullptr);
  EXPECT_GT(std::stol(extra->find("timestamp")->string), 1700000000);
}

// shmccl::elastic::record (torch's @record) for a program that catches and exits.
TEST(ErrorFile, RecordWritesAnExceptionTheProgramCaught) {
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kShmcclWorker, "record"});
  EXPECT_EQ(result.exit_code, 5) << result.err;
  EXPECT_NE(root_cause(result.err).find("traceback  : shmccl::Error: boom\n"), std::string::npos)
      << result.err;
}

// A file in torch's layout, as a Python rank's @record writes it: the report shows its
// py_callstack, continuation lines aligned.
TEST(ErrorFile, ATorchErrorFileShowsItsPythonTraceback) {
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kWorker, "error-file", "1"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(root_cause(result.err)
                .find("  traceback  : Traceback (most recent call last):\n"
                      "                 File \"train.py\", line 3, in <module>\n"
                      "               RuntimeError: loss is NaN\n"),
            std::string::npos)
      << result.err;
}

// A file an earlier job left in a reused log directory is not taken for this one's (each run
// has a directory of its own), and a rank that wrote nothing gets no traceback.
TEST(ErrorFile, AnEarlierRunsFileIsNotReported) {
  TempDir dir;
  const RunResult earlier =
      run_shmrun({"--log-dir", dir.path(), "--nproc-per-node", "2", kWorker, "error-file", "0"});
  EXPECT_EQ(earlier.exit_code, 1) << earlier.err;
  EXPECT_NE(earlier.err.find("loss is NaN"), std::string::npos) << earlier.err;
  const RunResult result =
      run_shmrun({"--log-dir", dir.path(), "--nproc-per-node", "2", kWorker, "exit", "3", "0"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_EQ(result.err.find("loss is NaN"), std::string::npos) << result.err;
  EXPECT_EQ(root_cause(result.err).find("traceback"), std::string::npos) << result.err;
}

// What torchelastic's error file at `path` says: message.message, message.errorCode and
// message.extraInfo.py_callstack ("" and -1 where missing); `valid` when it parses as one.
struct ElasticErrorFile {
  bool valid = false;
  std::string message;
  double error_code = -1;
  std::string py_callstack;
};

ElasticErrorFile read_elastic_error_file(const std::string& path) {
  ElasticErrorFile result;
  const std::optional<json::Value> file = json::parse(read_file(path));
  const json::Value* message = file && file->is_object() ? file->find("message") : nullptr;
  if (message == nullptr || !message->is_object()) return result;
  result.valid = true;
  if (const json::Value* text = message->find("message")) result.message = text->string;
  if (const json::Value* code = message->find("errorCode")) result.error_code = code->number;
  const json::Value* extra = message->find("extraInfo");
  if (const json::Value* stack = extra ? extra->find("py_callstack") : nullptr) {
    result.py_callstack = stack->string;
  }
  return result;
}

// shmrun given a TORCHELASTIC_ERROR_FILE of its own (a scheduler, an outer agent) puts the root
// cause there, as torch's @record around torchrun's main does: the rank's recorded error with
// its exit code as errorCode, or a message of shmrun's when the rank recorded nothing, or
// shmrun's own error.
TEST(ErrorFile, TheRootCauseGoesToShmrunsOwnErrorFile) {
  TempDir dir;
  const std::string mine = dir.path() + "/launcher_error.json";
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kWorker, "error-file", "1"},
                                      {"TORCHELASTIC_ERROR_FILE=" + mine});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  ElasticErrorFile file = read_elastic_error_file(mine);
  ASSERT_TRUE(file.valid) << read_file(mine);
  EXPECT_EQ(file.message, "RuntimeError: loss is NaN") << read_file(mine);
  EXPECT_EQ(file.error_code, 1) << read_file(mine);
  EXPECT_NE(file.py_callstack.find("File \"train.py\", line 3"), std::string::npos)
      << read_file(mine);

  const RunResult silent = run_shmrun({"--nproc-per-node", "2", kWorker, "exit", "3", "0"},
                                      {"TORCHELASTIC_ERROR_FILE=" + mine});
  EXPECT_EQ(silent.exit_code, 3) << silent.err;
  file = read_elastic_error_file(mine);
  ASSERT_TRUE(file.valid) << read_file(mine);
  EXPECT_NE(file.message.find("shmrun: rank 0 (pid "), std::string::npos) << file.message;
  EXPECT_NE(file.message.find("exit code 3"), std::string::npos) << file.message;
  EXPECT_EQ(file.error_code, 3);

  // An error of shmrun's own, before any rank: a bad option.
  const RunResult usage = run_shmrun({"--nproc-per-node", "two", kWorker, "exit", "0", "0"},
                                     {"TORCHELASTIC_ERROR_FILE=" + mine});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  file = read_elastic_error_file(mine);
  ASSERT_TRUE(file.valid) << read_file(mine);
  EXPECT_NE(file.message.find("shmrun: option --nproc-per-node: invalid value"), std::string::npos)
      << file.message;
  EXPECT_EQ(file.error_code, 2);
}

// The restart notice says why the rank failed.
TEST(ErrorFile, TheRestartNoticeQuotesTheRecordedError) {
  const RunResult result =
      run_shmrun({"--max-restarts", "1", "--nproc-per-node", "2", kShmcclWorker, "record"});
  EXPECT_EQ(result.exit_code, 5) << result.err;
  EXPECT_NE(result.err.find("failed with exit code 5 (shmccl::Error: boom); restarting all 2 "
                            "ranks (restart 1 of 1)"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace shmccl::launcher::testing
