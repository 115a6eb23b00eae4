// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/output_mux.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace shmccl::launcher {
namespace {

constexpr size_t kMaxLine = 64 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
static_assert(kReadChunk <= kMaxLine, "feed() cuts only the line a read continues");

}  // namespace

OutputRouting route_output(const Options& options, int local_rank) {
  const unsigned redirected = options.redirects.mask_for(local_rank);
  OutputRouting routing;
  routing.file = redirected | options.tee.mask_for(local_rank);
  if (options.log_dir && !options.redirects.given && !options.tee.given)
    routing.file = kBothStreams;
  routing.console = kBothStreams & ~redirected;
  if (options.local_ranks_filter) {
    const auto& shown = *options.local_ranks_filter;
    if (std::find(shown.begin(), shown.end(), local_rank) == shown.end()) {
      routing.console = kNoStream;
    }
  }
  return routing;
}

int write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};
      poll(&writable, 1, -1);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 ? errno : EIO;
    }
  }
  return 0;
}

bool RankStream::drain(int fd, size_t budget) {
  static thread_local char buffer[kReadChunk];
  size_t read_so_far = 0;
  while (read_so_far < budget) {
    const ssize_t n = ::read(fd, buffer, std::min(sizeof(buffer), budget - read_so_far));
    if (n > 0) {
      read_so_far += static_cast<size_t>(n);
      feed(std::string_view(buffer, static_cast<size_t>(n)));
    } else if (n == 0) {
      return false;
    } else if (errno == EINTR) {
      continue;
    } else {
      return errno == EAGAIN;  // any other error ends the stream too
    }
  }
  return true;  // more may be there: the caller polls again
}

void RankStream::feed(std::string_view data) {
  if (after_cut_ && !data.empty()) {
    after_cut_ = false;
    if (data.front() == '\n') data.remove_prefix(1);
  }
  const size_t first_newline = data.find('\n');
  if (first_newline != std::string_view::npos && partial_.size() + first_newline > kMaxLine) {
    // The line that partial_ began ends here, too long: its pieces, then what is left of it.
    partial_.append(data.substr(0, first_newline));
    data.remove_prefix(first_newline + 1);
    cut_overlong();
    after_cut_ = false;
    if (!partial_.empty()) {
      partial_ += '\n';
      emit(partial_);
      partial_.clear();
    }
  }
  // From here each complete line is shorter than kMaxLine: a read is at most kReadChunk bytes.
  const size_t last_newline = data.rfind('\n');
  if (last_newline == std::string_view::npos) {
    partial_.append(data);
  } else {
    // Everything up to the last '\n' is complete lines; emit them in one go.
    std::string complete = std::move(partial_);
    complete.append(data.substr(0, last_newline + 1));
    partial_.assign(data.substr(last_newline + 1));
    emit(complete);
  }
  cut_overlong();
}

void RankStream::cut_overlong() {
  if (partial_.size() < kMaxLine) return;
  std::string pieces;
  size_t at = 0;
  for (; partial_.size() - at >= kMaxLine; at += kMaxLine) {
    pieces.append(partial_, at, kMaxLine);
    pieces += '\n';
  }
  partial_.erase(0, at);
  after_cut_ = partial_.empty();
  emit(pieces);
}

void RankStream::finish() {
  if (partial_.empty()) return;
  partial_ += '\n';
  emit(partial_);
  partial_.clear();
}

bool DuplicateSink::matches(std::string_view line) const {
  return std::any_of(filters.begin(), filters.end(),
                     [line](const std::string& filter) { return line.find(filter) != line.npos; });
}

void RankStream::emit(std::string_view lines) {
  if (file_fd_ >= 0) write_all(file_fd_, lines);
  const bool prefixed = console_ != nullptr && !prefix_.empty();
  if (!prefixed && duplicate_ == nullptr) {
    if (console_ != nullptr) console_->write(lines);
    return;
  }
  // One pass over the lines for both: the console's copy gets the prefix on every line, the
  // duplicate file (with the same prefix) the lines that contain a filter.
  std::string out, copied;
  if (prefixed) out.reserve(lines.size() + prefix_.size() * 4);
  for (size_t start = 0; start < lines.size();) {
    const size_t end = lines.find('\n', start);  // every chunk ends with '\n'
    const std::string_view line = lines.substr(start, end - start + 1);
    if (prefixed) out.append(prefix_).append(line);
    if (duplicate_ != nullptr && duplicate_->matches(line.substr(0, line.size() - 1))) {
      copied.append(prefix_).append(line);
    }
    start = end + 1;
  }
  // One write per chunk of lines: O_APPEND keeps each whole even next to other ranks' writes.
  if (!copied.empty()) write_all(duplicate_->fd, copied);
  if (console_ != nullptr) console_->write(prefixed ? std::string_view(out) : lines);
}

}  // namespace shmccl::launcher
