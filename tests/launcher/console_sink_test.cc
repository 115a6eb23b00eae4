// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A console whose reader stops reading must not block shmrun: writes take what fits and keep the
// rest, in order, for later; the console's own file status flags stay as they were. A write that
// blocked would hang the test until CTest's timeout.
#include "launcher/console_sink.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <string>

namespace shmccl::launcher {
namespace {

// Numbered lines, so that a lost, repeated or reordered piece shows.
std::string numbered_lines(int count) {
  std::string text;
  for (int i = 0; i < count; ++i)
    text += "line " + std::to_string(i) + " of the console test\n";
  return text;
}

// Reads what `fd` has now (non-blocking read end).
std::string read_available(int fd) {
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0)
    out.append(buffer, static_cast<size_t>(n));
  return out;
}

// Flushes `sink` while reading `reader` until the backlog is gone; returns what was read.
std::string drain_through(ConsoleSink& sink, int reader) {
  std::string out = read_available(reader);
  while (sink.backlog() > 0) {
    sink.flush();
    pollfd readable{reader, POLLIN, 0};
    EXPECT_EQ(poll(&readable, 1, 5000), 1) << "the sink wrote nothing more";
    out += read_available(reader);
  }
  return out + read_available(reader);
}

class ConsoleSinkTest : public ::testing::Test {
 protected:
  void SetUp() override { signal(SIGPIPE, SIG_IGN); }  // as shmrun: EPIPE instead
};

TEST_F(ConsoleSinkTest, AFullPipeKeepsTheRestInOrderWithoutBlocking) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  ASSERT_GT(fcntl(fds[1], F_SETPIPE_SZ, 4096), 0);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  const int flags_before = fcntl(fds[1], F_GETFL);
  ASSERT_EQ(flags_before & O_NONBLOCK, 0);
  {
    ConsoleSink sink(fds[1]);
    const std::string text = numbered_lines(4000);  // ~130 KB into a 4 KiB pipe
    sink.write(text.substr(0, 50000));
    sink.write(text.substr(50000));
    EXPECT_GT(sink.backlog(), text.size() - 8192) << "a full pipe takes no more";
    EXPECT_FALSE(sink.gone());
    EXPECT_EQ(fcntl(fds[1], F_GETFL), flags_before) << "the console's own flags are untouched";
    EXPECT_EQ(drain_through(sink, fds[0]), text);
  }
  close(fds[0]);
  close(fds[1]);
}

// A signal drops the backlog mid-line: the line is still ended before anything written next, also
// when the full console cannot take the '\n' at once (it used to be lost, gluing shmrun's next
// line onto the cut one).
TEST_F(ConsoleSinkTest, AbandoningACutLineEndsItBeforeTheNextLineEvenWhenTheConsoleIsFull) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  ASSERT_GT(fcntl(fds[1], F_SETPIPE_SZ, 4096), 0);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  {
    ConsoleSink sink(fds[1]);
    std::string text;
    for (int i = 0; i < 1000; ++i)
      text += std::string(29, static_cast<char>('a' + i % 26)) + "\n";  // 4096 is no line end
    sink.write(text);
    ASSERT_GT(sink.backlog(), 0u);
    sink.abandon();
    EXPECT_EQ(sink.backlog(), 0u) << "nothing waits for the console: the '\\n' is owed, no backlog";
    const std::string taken = read_available(fds[0]);
    ASSERT_FALSE(taken.empty());
    ASSERT_NE(taken.back(), '\n') << "the console took whole lines; the test needs a cut one";
    EXPECT_EQ(taken, text.substr(0, taken.size()));
    sink.write("shmrun: next line\n");
    EXPECT_EQ(drain_through(sink, fds[0]), "\nshmrun: next line\n");
  }
  close(fds[0]);
  close(fds[1]);
}

TEST_F(ConsoleSinkTest, AReaderThatIsGoneMakesTheSinkGone) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  ConsoleSink sink(fds[1]);
  sink.write("seen\n");
  EXPECT_FALSE(sink.gone());
  close(fds[0]);
  sink.write("not seen\n");
  EXPECT_TRUE(sink.gone());
  EXPECT_EQ(sink.backlog(), 0u);
  close(fds[1]);
}

// A pipe without a reader cannot be reopened (ENXIO): the sink falls back to polled writes and
// still reports the reader gone.
TEST_F(ConsoleSinkTest, APipeWhoseReaderIsGoneBeforehandIsGoneAtTheFirstWrite) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  close(fds[0]);
  ConsoleSink sink(fds[1]);
  sink.write("lost\n");
  EXPECT_TRUE(sink.gone());
  close(fds[1]);
}

TEST_F(ConsoleSinkTest, AFullSocketKeepsTheRestWithoutBlocking) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  const int small = 4096;
  setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  {
    ConsoleSink sink(fds[1]);
    const std::string text = numbered_lines(4000);
    sink.write(text);
    EXPECT_GT(sink.backlog(), 0u);
    EXPECT_EQ(fcntl(fds[1], F_GETFL) & O_NONBLOCK, 0);
    EXPECT_EQ(drain_through(sink, fds[0]), text);
  }
  close(fds[0]);
  close(fds[1]);
}

// A terminal nobody reads (a stopped pager, Ctrl-S): writes stop at the terminal's buffer.
TEST_F(ConsoleSinkTest, AFullTerminalKeepsTheRestWithoutBlocking) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) GTEST_SKIP() << "no pseudo-terminals here";
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const int terminal = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(terminal, 0);
  termios raw{};
  ASSERT_EQ(tcgetattr(terminal, &raw), 0);
  cfmakeraw(&raw);  // no "\n" -> "\r\n": what is read is what was written
  ASSERT_EQ(tcsetattr(terminal, TCSANOW, &raw), 0);
  fcntl(master, F_SETFL, O_NONBLOCK);
  {
    ConsoleSink sink(terminal);
    const std::string text = numbered_lines(40000);  // ~1.3 MB: more than any terminal buffers
    sink.write(text);
    EXPECT_GT(sink.backlog(), 0u);
    EXPECT_EQ(fcntl(terminal, F_GETFL) & O_NONBLOCK, 0) << "the terminal's own flags are untouched";
    EXPECT_EQ(drain_through(sink, master), text);
  }
  close(terminal);
  close(master);
}

TEST_F(ConsoleSinkTest, ARegularFileTakesEverythingAtOnce) {
  const int file = memfd_create("console", MFD_CLOEXEC);
  ASSERT_GE(file, 0);
  ConsoleSink sink(file);
  const std::string text = numbered_lines(4000);
  sink.write(text);
  EXPECT_EQ(sink.backlog(), 0u);
  std::string written(text.size(), '\0');
  ASSERT_EQ(pread(file, written.data(), written.size(), 0), static_cast<ssize_t>(text.size()));
  EXPECT_EQ(written, text);
  close(file);
}

}  // namespace
}  // namespace shmccl::launcher
