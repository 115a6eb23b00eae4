// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// How rank output reaches the console and the log files. Each rank's stdout and stderr come
// through their own pipe; a RankStream splits what it reads into lines and writes every complete
// line at once, prefixed "[rankN]:" on the console (the file gets the bare line), so lines of
// different ranks never interleave mid-line. A line longer than 64 KiB is cut, and a last line
// without '\n' is completed with one when the stream ends. Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/console_sink.h"
#include "launcher/options.h"

namespace shmccl::launcher {

// Where one local rank's two streams go (masks of StreamMask bits).
struct OutputRouting {
  unsigned console = kBothStreams;
  unsigned file = kNoStream;
};

// From --redirects, --tee, --log-dir and --local-ranks-filter: redirected streams go to the log
// file only, teed ones to both; --log-dir alone tees both streams; the filter hides the ranks it
// does not name from the console (their log files are still written).
OutputRouting route_output(const Options& options, int local_rank);

// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: the lines that contain any
// of `filters` are also written to `fd` (one file for every rank), prefixed as on the console.
struct DuplicateSink {
  std::vector<std::string> filters;
  int fd = -1;  // not owned
  bool matches(std::string_view line) const;
};

class RankStream {
 public:
  // `console` null: not shown; `file_fd` -1: not logged; `duplicate` null: no line copied.
  // None is owned.
  RankStream(ConsoleSink* console, std::string prefix, int file_fd,
             const DuplicateSink* duplicate = nullptr)
      : console_(console), prefix_(std::move(prefix)), file_fd_(file_fd), duplicate_(duplicate) {}

  // Reads `fd` (non-blocking) until it would block or `budget` bytes were read (a rank that
  // writes without pause must not keep the supervisor from its other events); false once it
  // reached end of file.
  bool drain(int fd, size_t budget);
  // A write to the console failed with EPIPE: whoever read shmrun's output is gone (`shmrun ... |
  // head`). The console gets nothing more.
  bool console_gone() const { return console_ != nullptr && console_->gone(); }
  ConsoleSink* console() const { return console_; }
  // Writes the last partial line, if any, with a '\n'.
  void finish();

 private:
  void feed(std::string_view data);
  // Emits partial_'s whole pieces of kMaxLine bytes, each as a line, and keeps the rest.
  void cut_overlong();
  void emit(std::string_view lines_with_newlines);

  ConsoleSink* console_;
  std::string prefix_;
  int file_fd_;
  const DuplicateSink* duplicate_;
  std::string partial_;  // the start of a line whose '\n' has not arrived yet
  // The last piece emitted ended a cut exactly where the line it belongs to may end: a '\n' that
  // comes next ends that line, not another (empty) one.
  bool after_cut_ = false;
};

// write(2) until everything is written, for log files; waits out EAGAIN on a non-blocking fd.
// Returns 0, or the errno of a write that failed (the rest of the data is dropped: rank output
// must never stop the supervisor).
int write_all(int fd, std::string_view data) noexcept;

}  // namespace shmccl::launcher
