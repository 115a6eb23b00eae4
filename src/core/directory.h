// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Directory: the one owner of a DIR stream (opendir/closedir), as FileDescriptor is of an fd.
// Every listing of /dev/shm and /proc goes through it, so none leaks its stream on an exception
// thrown while visiting.
//
// Thread safety: none of its own. Distinct objects may be used from distinct threads (glibc's
// readdir is safe on distinct streams).
#pragma once

#include <dirent.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace shmccl::detail {

class Directory {
 public:
  // Opens `path`. A directory that cannot be opened is empty: valid() is false and error() holds
  // opendir's errno.
  explicit Directory(const std::string& path) : stream_(::opendir(path.c_str())) {
    if (stream_ == nullptr) error_ = errno;
  }
  ~Directory() {
    if (stream_ != nullptr) ::closedir(stream_);
  }
  Directory(Directory&& other) noexcept
      : stream_(std::exchange(other.stream_, nullptr)), error_(other.error_) {}
  Directory& operator=(Directory&&) = delete;
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  bool valid() const noexcept { return stream_ != nullptr; }
  int error() const noexcept { return error_; }
  // The stream's own descriptor (for *at() calls relative to it), -1 when not open.
  int fd() const noexcept { return stream_ != nullptr ? ::dirfd(stream_) : -1; }

  // Calls visit(name) for every entry but "." and "..", in readdir's order, until visit returns
  // false. Visits nothing when the directory could not be opened.
  template <typename Visit>
  void for_each(Visit&& visit) {
    if (stream_ == nullptr) return;
    while (const dirent* entry = ::readdir(stream_)) {
      const char* name = entry->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      if (!visit(static_cast<const char*>(name))) return;
    }
  }

 private:
  DIR* stream_;
  int error_ = 0;
};

// The value of an entry name made of decimal digits only (a pid in /proc, an fd in
// /proc/self/fd); nullopt for any other name.
inline std::optional<long> numeric_entry(const char* name) {
  if (name[0] < '0' || name[0] > '9') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(name, &end, 10);
  if (*end != '\0') return std::nullopt;
  return value;
}

// Calls visit(pid) for every process /proc lists, until visit returns false.
template <typename Visit>
void for_each_process(Visit&& visit) {
  Directory("/proc").for_each([&](const char* name) {
    const std::optional<long> pid = numeric_entry(name);
    return !pid || visit(*pid);
  });
}

}  // namespace shmccl::detail
