// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/log_layout.h"

#include <sys/stat.h>

#include <cerrno>

#include "core/check.h"

namespace shmccl::launcher {
namespace {

const char* stream_name(StreamMask stream) {
  return stream == kStdout ? "stdout" : "stderr";
}

void make_directory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    detail::throw_system_error("cannot create log directory " + path, errno);
  }
}

}  // namespace

std::string LogLayout::attempt_dir(int attempt) const {
  return run_dir + "/attempt_" + std::to_string(attempt);
}

std::string LogLayout::rank_dir(int attempt, int local_rank) const {
  return attempt_dir(attempt) + "/" + std::to_string(local_rank);
}

std::string LogLayout::stream_file(int attempt, int local_rank, StreamMask stream) const {
  return rank_dir(attempt, local_rank) + "/" + stream_name(stream) + ".log";
}

std::string LogLayout::error_file(int attempt, int local_rank) const {
  return rank_dir(attempt, local_rank) + "/error.json";
}

std::string LogLayout::filtered_file(int attempt, StreamMask stream) const {
  return attempt_dir(attempt) + "/filtered_" + stream_name(stream) + ".log";
}

void LogLayout::make_attempt_dirs(int attempt, int local_ranks) const {
  make_directory(attempt_dir(attempt));
  for (int local_rank = 0; local_rank < local_ranks; ++local_rank)
    make_directory(rank_dir(attempt, local_rank));
}

}  // namespace shmccl::launcher
