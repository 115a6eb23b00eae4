// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/output_mux.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace shmccl::launcher {
namespace {

constexpr size_t kLots = 1 << 20;  // a drain budget no test reaches

// A pipe the test feeds, and two memory files standing in for the console and the log file.
struct Pipes {
  int source[2];
  int console = memfd_create("console", MFD_CLOEXEC);
  int file = memfd_create("file", MFD_CLOEXEC);
  Pipes() {
    EXPECT_EQ(pipe2(source, O_CLOEXEC), 0);
    fcntl(source[0], F_SETFL, O_NONBLOCK);
  }
  ~Pipes() {
    for (int fd : {source[0], source[1], console, file})
      close(fd);
  }
  void write(const std::string& text) {
    ASSERT_EQ(::write(source[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Everything written to `fd` since the last call.
  static std::string take(int fd) {
    std::string out;
    char buffer[4096];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0)
      out.append(buffer, static_cast<size_t>(n));
    EXPECT_EQ(ftruncate(fd, 0), 0);
    lseek(fd, 0, SEEK_SET);
    return out;
  }
};

TEST(RankStream, PrefixesCompleteLinesAndHoldsPartialOnes) {
  Pipes pipes;
  ConsoleSink console(pipes.console);
  RankStream stream(&console, "[rank3]:", pipes.file);
  pipes.write("one\ntw");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(pipes.console), "[rank3]:one\n");
  pipes.write("o\nthree");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  close(pipes.source[1]);
  pipes.source[1] = -1;
  EXPECT_FALSE(stream.drain(pipes.source[0], kLots)) << "end of file";
  stream.finish();
  EXPECT_EQ(Pipes::take(pipes.console), "[rank3]:two\n[rank3]:three\n");
  EXPECT_EQ(Pipes::take(pipes.file), "one\ntwo\nthree\n") << "files get bare lines";
}

TEST(RankStream, CopiesTheLinesThatContainAFilterWithTheConsolePrefix) {
  Pipes pipes;
  const int filtered = memfd_create("filtered", MFD_CLOEXEC);
  ConsoleSink console(pipes.console);
  const DuplicateSink duplicate{{"loss", "NaN"}, filtered};
  RankStream stream(&console, "[rank1]:", pipes.file, &duplicate);
  pipes.write("step 1 loss 0.5\nstep 1 lr 3\ngrad NaN\nlo");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(filtered), "[rank1]:step 1 loss 0.5\n[rank1]:grad NaN\n");
  pipes.write("ss split across reads\nnothing\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(filtered), "[rank1]:loss split across reads\n")
      << "a line is matched whole, however it arrived";
  EXPECT_EQ(Pipes::take(pipes.file),
            "step 1 loss 0.5\nstep 1 lr 3\ngrad NaN\nloss split across reads\nnothing\n")
      << "the rank's own log keeps every line";
  EXPECT_EQ(Pipes::take(pipes.console),
            "[rank1]:step 1 loss 0.5\n[rank1]:step 1 lr 3\n[rank1]:grad NaN\n"
            "[rank1]:loss split across reads\n[rank1]:nothing\n");
  close(filtered);
}

// A line longer than 64 KiB is printed in pieces of 64 KiB, each as a line, however the rank's
// writes fall; a line that ends exactly at a cut gets no empty line after it.
TEST(RankStream, CutsOverlongLinesInto64KiBPieces) {
  constexpr size_t kPiece = 64 * 1024;
  Pipes pipes;
  ConsoleSink console(pipes.console);
  RankStream stream(&console, "[r]:", -1);
  const std::string chunk(40 * 1024, 'x');
  pipes.write(chunk);
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(pipes.console), "");
  pipes.write(chunk);
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(pipes.console), "[r]:" + std::string(kPiece, 'x') + "\n");
  pipes.write("\nnext\n");  // the rest of the line (16 KiB), then a short line
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(pipes.console), "[r]:" + std::string(16 * 1024, 'x') + "\n[r]:next\n");

  // 240,000 bytes in writes of 60,000, then the newline alone: three whole pieces and the rest.
  const std::string part(60000, 'y');
  for (int i = 0; i < 4; ++i) {
    pipes.write(part);
    EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  }
  pipes.write("\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  const std::string piece = "[r]:" + std::string(kPiece, 'y') + "\n";
  EXPECT_EQ(Pipes::take(pipes.console),
            piece + piece + piece + "[r]:" + std::string(240000 - 3 * kPiece, 'y') + "\n");

  // A line of exactly two pieces, its newline in a later write: no empty third line.
  pipes.write(std::string(kPiece, 'z'));
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  pipes.write(std::string(kPiece, 'z'));
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  pipes.write("\nlast\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  const std::string z = "[r]:" + std::string(kPiece, 'z') + "\n";
  EXPECT_EQ(Pipes::take(pipes.console), z + z + "[r]:last\n");
}

// A drain stops after its budget, with the rest still in the pipe for the next one: a rank that
// writes without pause must not hold the supervisor's loop.
TEST(RankStream, ADrainReadsNoMoreThanItsBudget) {
  Pipes pipes;
  ConsoleSink console(pipes.console);
  RankStream stream(&console, "", -1);
  pipes.write(std::string(3000, 'a') + "\n" + std::string(3000, 'b') + "\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], 4000));
  EXPECT_EQ(Pipes::take(pipes.console), std::string(3000, 'a') + "\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], 4000));
  EXPECT_EQ(Pipes::take(pipes.console), std::string(3000, 'b') + "\n");
}

// A console whose reader is gone (EPIPE) is given up: the stream says so and writes it no more,
// while the log file still gets every line.
TEST(RankStream, AConsoleWhoseReaderIsGoneIsGivenUp) {
  Pipes pipes;
  int console[2];
  ASSERT_EQ(pipe2(console, O_CLOEXEC), 0);
  close(console[0]);  // the reader goes (shmrun ignores SIGPIPE: EPIPE instead)
  signal(SIGPIPE, SIG_IGN);
  ConsoleSink sink(console[1]);
  RankStream stream(&sink, "[rank0]:", pipes.file);
  EXPECT_FALSE(stream.console_gone());
  pipes.write("one\ntwo\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_TRUE(stream.console_gone());
  pipes.write("three\n");
  EXPECT_TRUE(stream.drain(pipes.source[0], kLots));
  EXPECT_EQ(Pipes::take(pipes.file), "one\ntwo\nthree\n");
  close(console[1]);
}

TEST(RouteOutput, CombinesRedirectsTeeLogDirAndFilter) {
  Options options;
  EXPECT_EQ(route_output(options, 0).console, kBothStreams);
  EXPECT_EQ(route_output(options, 0).file, kNoStream);

  options.log_dir = "/tmp/x";
  EXPECT_EQ(route_output(options, 0).file, kBothStreams) << "--log-dir alone tees everything";

  options = parse_options({"--log-dir=/d", "--redirects=0:2", "--tee=1:1", "p"});
  EXPECT_EQ(route_output(options, 0).console, kStdout);
  EXPECT_EQ(route_output(options, 0).file, kStderr);
  EXPECT_EQ(route_output(options, 1).console, kBothStreams);
  EXPECT_EQ(route_output(options, 1).file, kStdout);
  EXPECT_EQ(route_output(options, 2).file, kNoStream);

  options = parse_options({"--local-ranks-filter=1", "p"});
  EXPECT_EQ(route_output(options, 0).console, kNoStream);
  EXPECT_EQ(route_output(options, 1).console, kBothStreams);
}

}  // namespace
}  // namespace shmccl::launcher
