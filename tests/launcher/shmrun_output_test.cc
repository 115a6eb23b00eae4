// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: rank output on the console ("[rankN]:" prefixes, --no-prefix, the ranks filter)
// and in log files (--log-dir, --redirects, --tee, the duplicate filters).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

// Lines that come from ranks (shmrun's own log lines, warnings and notes on stderr are skipped).
std::vector<std::string> rank_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (const std::string& line : lines_of(text)) {
    if (line.find("shmccl INFO") == std::string::npos && line.rfind("shmrun: ", 0) != 0) {
      lines.push_back(line);
    }
  }
  return lines;
}

// Every "[rankR]:rank R <kind> I" line of `kRanks` ranks, whole, prefixed right, in order per rank.
void expect_every_line(const std::string& text, const std::string& kind, int ranks, int lines) {
  std::vector<int> next(ranks, 0);  // each rank's lines arrive in order
  const std::string format = "[rank%d]:rank %d " + kind + " %d%n";
  for (const std::string& text_line : rank_lines(text)) {
    int prefix_rank = -1, rank = -1, index = -1, consumed = 0;
    ASSERT_EQ(
        std::sscanf(text_line.c_str(), format.c_str(), &prefix_rank, &rank, &index, &consumed), 3)
        << "garbled line: " << text_line;
    ASSERT_EQ(static_cast<size_t>(consumed), text_line.size()) << "garbled line: " << text_line;
    ASSERT_TRUE(rank >= 0 && rank < ranks) << text_line;
    EXPECT_EQ(prefix_rank, rank) << "prefix names the wrong rank: " << text_line;
    ASSERT_EQ(index, next[rank]++) << text_line;
  }
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_EQ(next[rank], lines) << kind;
}

TEST(Output, EveryLineOfEveryRankArrivesWholeAndPrefixed) {
  constexpr int kRanks = 4, kLines = 2000;
  const RunResult result = run_shmrun(
      {"-v", "--nproc-per-node", std::to_string(kRanks), kWorker, "lines", std::to_string(kLines)});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_every_line(result.out, "line", kRanks, kLines);
  expect_every_line(result.err, "err", kRanks, kLines);
  expect_shm_clean(namespaces(result.err));
}

// A reader that stops reading for a while (a pager left unscrolled) holds the ranks up, not
// shmrun's loop, and loses nothing: once it reads again every line arrives, whole and in order.
TEST(Output, AStalledReaderGetsEveryLineOnceItReadsAgain) {
  constexpr int kRanks = 2, kLines = 60000;  // ~2 MB on stdout: more than shmrun holds back
  Shmrun shmrun(
      {"-v", "--nproc-per-node", std::to_string(kRanks), kWorker, "lines", std::to_string(kLines)});
  shmrun.stall_stdout();
  ASSERT_TRUE(shmrun.read_err_until([](const std::string& err) {
    return err.find("the console's reader is behind") != std::string::npos;
  })) << shmrun.err();
  shmrun.resume_stdout();
  const RunResult result = shmrun.wait();
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_every_line(result.out, "line", kRanks, kLines);
  expect_every_line(result.err, "err", kRanks, kLines);
  expect_shm_clean(namespaces(result.err));
}

// `shmrun ... 2>&1 | reader`, with a reader that falls behind again and again: shmrun's stdout
// and stderr are one pipe, and no line of either stream may cut into a line of the other (each
// stream's lines, whole and in order).
TEST(Output, StdoutAndStderrOnOnePipeNeverCutIntoEachOther) {
  constexpr int kRanks = 2, kLines = 40000;  // ~1.7 MB through the one pipe
  Shmrun shmrun(
      {"--nproc-per-node", std::to_string(kRanks), kWorker, "lines", std::to_string(kLines)}, {},
      /*stderr_to_stdout=*/true);
  // Each round: stop reading until the pipe is full (shmrun's writes then stop midway through a
  // line and keep the rest), then read 64 KiB more.
  for (size_t target = 0; target < 1500000; target = shmrun.out().size() + 64 * 1024) {
    shmrun.stall_stdout();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!shmrun.pipe_full(/*err=*/false) && std::chrono::steady_clock::now() < deadline)
      usleep(200);  // polling a condition, bounded: nothing here waits for a race to settle
    shmrun.resume_stdout();
    if (!shmrun.read_until([target](const std::string& out) { return out.size() >= target; }))
      break;  // shmrun is done
  }
  const RunResult result = shmrun.wait();
  ASSERT_EQ(result.exit_code, 0) << result.out;
  std::string lines, errs;
  for (const std::string& line : rank_lines(result.out))
    (line.find(" err ") != std::string::npos ? errs : lines) += line + "\n";
  expect_every_line(lines, "line", kRanks, kLines);
  expect_every_line(errs, "err", kRanks, kLines);
}

TEST(Output, NoPrefixPrintsLinesAsTheyAre) {
  const RunResult result = run_shmrun({"--no-prefix", "--nproc-per-node=2", kWorker, "lines", "3"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines = lines_of(result.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"rank 0 line 0", "rank 0 line 1", "rank 0 line 2",
                                             "rank 1 line 0", "rank 1 line 1", "rank 1 line 2"}));
}

TEST(Output, ALastLineWithoutNewlineIsCompleted) {
  const RunResult result = run_shmrun({"--nproc-per-node=2", kWorker, "partial"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::vector<std::string> lines = lines_of(result.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines,
            (std::vector<std::string>{"[rank0]:rank 0 no newline", "[rank1]:rank 1 no newline"}));
}

TEST(Output, LocalRanksFilterShowsOnlyTheNamedRanks) {
  const RunResult result =
      run_shmrun({"--local-ranks-filter", "0,2", "--nproc-per-node", "3", kWorker, "lines", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.find("[rank1]"), std::string::npos) << result.out;
  EXPECT_EQ(result.err.find("[rank1]"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("[rank0]:rank 0 line 1"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("[rank2]:rank 2 line 1"), std::string::npos) << result.out;
}

// A filter that names ranks the job does not have is warned about: else `--local-ranks-filter 5`
// on two ranks would hide every line without a word.
TEST(Output, LocalRanksFilterWarnsAboutRanksOutOfRange) {
  // shmrun's stderr (without the ranks' lines) for a 2-rank job with this filter.
  const auto shmrun_lines = [](const std::string& filter) {
    const RunResult result = run_shmrun(
        {"--local-ranks-filter", filter, "--nproc-per-node", "2", kWorker, "lines", "1"});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    std::string lines;
    for (const std::string& line : lines_of(result.err)) {
      if (line.rfind("[rank", 0) != 0) lines += line + "\n";
    }
    return lines;
  };
  const std::string none_shown = shmrun_lines("5");
  EXPECT_NE(none_shown.find("shmrun: warning: --local-ranks-filter names local rank(s) 5, but the "
                            "2 ranks are 0-1: no rank's output is shown on the console\n"),
            std::string::npos)
      << none_shown;
  const std::string some_shown = shmrun_lines("1,7,2");
  EXPECT_NE(some_shown.find("shmrun: warning: --local-ranks-filter names local rank(s) 7,2, but "
                            "the 2 ranks are 0-1\n"),
            std::string::npos)
      << some_shown;
  EXPECT_EQ(shmrun_lines("1").find("--local-ranks-filter"), std::string::npos);
}

// torchrun's layout: a new directory per run, <log dir>/<run id>_XXXXXX, and in it
// attempt_<restart>/<local rank>/stdout.log and stderr.log; the console shows the lines too.
TEST(Output, LogDirWritesEachRanksStreamsToFilesOfTheirOwn) {
  TempDir dir;
  const std::string log_dir = dir.path() + "/logs/nested";
  const RunResult result =
      run_shmrun({"--log-dir", log_dir + "/", "--nproc-per-node", "2", kWorker, "lines", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string run_dir = run_log_dir(result.err);
  ASSERT_EQ(run_dir.rfind(log_dir + "/none_", 0), 0u) << result.err;
  EXPECT_EQ(run_dir.size(), log_dir.size() + 6 + 6) << "<run id>_ and 6 random characters";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    const std::string rank_dir = run_dir + "/attempt_0/" + r;
    EXPECT_EQ(read_file(rank_dir + "/stdout.log"),
              "rank " + r + " line 0\nrank " + r + " line 1\n");
    EXPECT_EQ(read_file(rank_dir + "/stderr.log"), "rank " + r + " err 0\nrank " + r + " err 1\n");
    EXPECT_NE(result.out.find("[rank" + r + "]:rank " + r + " line 1"), std::string::npos);
  }
}

// Each run gets a directory of its own: a second run with the same --log-dir leaves the first
// run's logs as they were.
TEST(Output, ARunNeverOverwritesAnEarlierRunsLogs) {
  TempDir dir;
  const RunResult first =
      run_shmrun({"--log-dir", dir.path(), "--run-id", "job", kWorker, "lines", "1"});
  const RunResult second =
      run_shmrun({"--log-dir", dir.path(), "--run-id", "job", kWorker, "lines", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const std::string first_dir = run_log_dir(first.err), second_dir = run_log_dir(second.err);
  EXPECT_EQ(first_dir.rfind(dir.path() + "/job_", 0), 0u) << first.err;
  EXPECT_NE(first_dir, second_dir);
  EXPECT_EQ(read_file(first_dir + "/attempt_0/0/stdout.log"), "rank 0 line 0\n");
  EXPECT_EQ(read_file(second_dir + "/attempt_0/0/stdout.log"), "rank 0 line 0\nrank 0 line 1\n");
}

TEST(Output, RedirectsSendStreamsToTheFileOnly) {
  TempDir dir;
  const RunResult result = run_shmrun(
      {"--log_dir=" + dir.path(), "-r", "3", "--nproc-per-node", "2", kWorker, "lines", "2"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(rank_lines(result.out).empty()) << result.out;
  EXPECT_TRUE(rank_lines(result.err).empty()) << result.err;
  EXPECT_NE(read_file(run_log_dir(result.err) + "/attempt_0/1/stdout.log").find("rank 1 line 1"),
            std::string::npos);
}

// torchrun's behaviour: --redirects or --tee without --log-dir log to a new temporary directory.
TEST(Output, RedirectsWithoutALogDirUseATemporaryOne) {
  const RunResult result = run_shmrun({"-r", "1", "--run-id", "tmp_logs", kWorker, "lines", "1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string run_dir = run_log_dir(result.err);
  EXPECT_EQ(run_dir.rfind("/tmp/shmrun-tmp_logs-", 0), 0u) << result.err;
  EXPECT_EQ(read_file(run_dir + "/attempt_0/0/stdout.log"), "rank 0 line 0\n");
  EXPECT_FALSE(std::filesystem::exists(run_dir + "/attempt_0/0/stderr.log"))
      << "stderr goes to the console only";
  std::filesystem::remove_all(run_dir);
}

TEST(Output, TeeAndRedirectsPerLocalRank) {
  TempDir dir;
  // Rank 0: stdout to file and console. Rank 1: stderr to the file only.
  const RunResult result = run_shmrun({"--log-dir", dir.path(), "--tee", "0:1", "--redirects=1:2",
                                       "--nproc-per-node", "2", kWorker, "lines", "1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string attempt = run_log_dir(result.err) + "/attempt_0";
  EXPECT_EQ(read_file(attempt + "/0/stdout.log"), "rank 0 line 0\n");
  EXPECT_FALSE(std::filesystem::exists(attempt + "/0/stderr.log"));
  EXPECT_EQ(read_file(attempt + "/1/stderr.log"), "rank 1 err 0\n");
  EXPECT_FALSE(std::filesystem::exists(attempt + "/1/stdout.log"));
  EXPECT_NE(result.out.find("[rank0]:rank 0 line 0"), std::string::npos);
  EXPECT_NE(result.err.find("[rank0]:rank 0 err 0"), std::string::npos);
  EXPECT_NE(result.out.find("[rank1]:rank 1 line 0"), std::string::npos);
  EXPECT_EQ(result.err.find("[rank1]:rank 1 err 0"), std::string::npos) << result.err;
}

// torchrun's duplicate filters: the teed lines that contain a filter, of every rank, in one file
// per stream; the console and the ranks' own logs are unchanged.
TEST(Output, DuplicateFiltersCopyMatchingTeedLinesOfEveryRankToOneFile) {
  TempDir dir;
  const RunResult result = run_shmrun(
      {"--log-dir", dir.path(), "--tee", "3", "--duplicate-stdout-filters", "line 1,line 3",
       "--duplicate-stderr-filters", "err 2", "--nproc-per-node", "3", kWorker, "lines", "4"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string attempt = run_log_dir(result.err) + "/attempt_0";
  std::vector<std::string> out = lines_of(read_file(attempt + "/filtered_stdout.log"));
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank0]:rank 0 line 1", "[rank0]:rank 0 line 3",
                                           "[rank1]:rank 1 line 1", "[rank1]:rank 1 line 3",
                                           "[rank2]:rank 2 line 1", "[rank2]:rank 2 line 3"}));
  std::vector<std::string> err = lines_of(read_file(attempt + "/filtered_stderr.log"));
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[rank0]:rank 0 err 2", "[rank1]:rank 1 err 2",
                                           "[rank2]:rank 2 err 2"}));
  expect_every_line(result.out, "line", 3, 4);
  EXPECT_EQ(lines_of(read_file(attempt + "/2/stdout.log")).size(), 4u);
}

// As torchrun: only teed streams are copied (a rank the console filter hides, or a stream sent
// to the file only, is not), and filters that can copy nothing are said to.
TEST(Output, DuplicateFiltersSeeOnlyTeedStreams) {
  TempDir dir;
  const RunResult result =
      run_shmrun({"--log-dir", dir.path(), "--tee", "1", "--redirects", "2", "--local-ranks-filter",
                  "1", "--duplicate-stdout-filters", "line", "--duplicate-stderr-filters", "err",
                  "--nproc-per-node", "2", kWorker, "lines", "1"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string attempt = run_log_dir(result.err) + "/attempt_0";
  EXPECT_EQ(read_file(attempt + "/filtered_stdout.log"), "[rank1]:rank 1 line 0\n");
  EXPECT_FALSE(std::filesystem::exists(attempt + "/filtered_stderr.log"));
  EXPECT_NE(result.err.find("--duplicate-stderr-filters copies nothing: no rank's stderr is teed"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace shmccl::launcher::testing
