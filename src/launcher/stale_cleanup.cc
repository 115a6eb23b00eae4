// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/stale_cleanup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>

#include "core/directory.h"
#include "core/file_descriptor.h"
#include "launcher/job_namespace.h"
#include "transport/segment_names.h"

namespace shmccl::launcher {
namespace {

std::string path_of(const std::string& entry) {
  return std::string(kShmDir) + "/" + entry;
}

// shmccl.<namespace>.<suffix> -> <namespace>; "" for names of another shape.
std::string namespace_of(const std::string& entry) {
  const size_t start = std::strlen(kShmPrefix);
  const size_t dot = entry.find('.', start);
  if (dot == std::string::npos || dot == start || dot + 1 == entry.size()) return "";
  return entry.substr(start, dot - start);
}

void remove_namespace(const std::string& ns, const std::vector<std::string>& entries,
                      CleanupReport& report) {
  const std::string lock_name = kShmPrefix + ns + ".lock";
  auto remove = [&](const std::string& entry) {
    if (unlink(path_of(entry).c_str()) == 0) {
      report.removed.push_back(entry);
    } else if (errno != ENOENT) {
      report.errors.push_back("cannot remove " + path_of(entry) + ": " + std::strerror(errno));
    }
  };
  for (const std::string& entry : entries) {
    if (entry != lock_name) remove(entry);
  }
  if (std::find(entries.begin(), entries.end(), lock_name) != entries.end()) remove(lock_name);
}

// Lock files' temporaries that a process killed while making one left (segment_names.h). A
// younger one may be about to be locked by a starting job, and one that is held is being made
// into a lock now.
constexpr time_t kAbandonedAfterSeconds = 60;

void remove_abandoned_lock_temporaries(CleanupReport& report) {
  const time_t now = time(nullptr);
  for (const std::string& entry : list_shm_entries(transport::kLockTemporaryPrefix)) {
    const std::string path = path_of(entry);
    FileDescriptor file(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat info;
    if (!file || fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    if (now - info.st_mtime < kAbandonedAfterSeconds) continue;
    if (flock(file.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (unlink(path.c_str()) == 0) {
      report.removed.push_back(entry);
    } else if (errno != ENOENT) {
      report.errors.push_back("cannot remove " + path + ": " + std::strerror(errno));
    }
  }
}

// The shmccl entries of /dev/shm that a process maps or holds open, each with one such pid, as far
// as /proc shows them (another user's processes it does not: their 0600 entries cannot be removed
// by this user anyway).
std::map<std::string, long> entries_in_use() {
  std::map<std::string, long> in_use;
  const std::string prefix = std::string(kShmDir) + "/" + kShmPrefix;
  auto note = [&](std::string path, long pid) {
    if (path.rfind(prefix, 0) != 0) return;
    constexpr std::string_view kDeleted = " (deleted)";
    if (path.ends_with(kDeleted)) path.resize(path.size() - kDeleted.size());
    in_use.emplace(path.substr(std::strlen(kShmDir) + 1), pid);
  };
  detail::for_each_process([&](long pid) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream maps(dir + "/maps");
    for (std::string line; std::getline(maps, line);) {
      const size_t at = line.find(prefix);
      if (at != std::string::npos) note(line.substr(at), pid);
    }
    detail::Directory fds(dir + "/fd");
    fds.for_each([&](const char* fd) {
      char target[512];
      const ssize_t n = readlinkat(fds.fd(), fd, target, sizeof(target) - 1);
      if (n > 0) note(std::string(target, static_cast<size_t>(n)), pid);
      return true;
    });
    return true;
  });
  return in_use;
}

// See lockless_namespace_sign_of_life; `in_use`: entries_in_use().
std::string sign_of_life(const std::vector<std::string>& entries,
                         const std::map<std::string, long>& in_use, bool named) {
  for (const std::string& entry : entries) {
    const auto user = in_use.find(entry);
    if (user != in_use.end()) {
      return "no lock file, but pid " + std::to_string(user->second) + " has " + path_of(entry) +
             " mapped or open";
    }
  }
  if (named) return "";
  const time_t now = time(nullptr);
  for (const std::string& entry : entries) {
    struct stat info;
    if (stat(path_of(entry).c_str(), &info) == 0 && now - info.st_mtime < kAbandonedAfterSeconds) {
      return "no lock file, and " + path_of(entry) +
             " is younger than a minute (name the namespace to remove it)";
    }
  }
  return "";
}

}  // namespace

std::string lockless_namespace_sign_of_life(const std::vector<std::string>& entries, bool named) {
  return sign_of_life(entries, entries_in_use(), named);
}

CleanupReport cleanup_stale_namespaces(const std::vector<std::string>& only, bool launched_only) {
  std::map<std::string, std::vector<std::string>> by_namespace;
  for (const std::string& entry : list_shm_entries(kShmPrefix)) {
    const std::string ns = namespace_of(entry);
    if (ns.empty()) continue;
    if (!only.empty() && std::find(only.begin(), only.end(), ns) == only.end()) continue;
    by_namespace[ns].push_back(entry);
  }

  CleanupReport report;
  std::optional<std::map<std::string, long>> in_use;  // read once, if a namespace needs it
  for (const auto& [ns, entries] : by_namespace) {
    const std::string lock_path = path_of(kShmPrefix + ns + ".lock");
    FileDescriptor lock(open(lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock && errno == ENOENT && launched_only) continue;
    if (!lock && errno != ENOENT) {
      report.errors.push_back("cannot open " + lock_path + ": " + std::strerror(errno));
      continue;
    }
    if (!lock) {
      if (!in_use) in_use = entries_in_use();
      std::string why = sign_of_life(entries, *in_use, !only.empty());
      if (!why.empty()) {
        report.live.push_back(KeptNamespace{ns, std::move(why)});
        continue;
      }
    }
    // Held until the namespace is removed: a job cannot come back to life meanwhile.
    if (lock && flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        report.live.push_back(KeptNamespace{ns, "its job is still running (lock held)"});
      } else {
        report.errors.push_back("cannot lock " + lock_path + ": " + std::strerror(errno));
      }
      continue;
    }
    remove_namespace(ns, entries, report);
  }
  if (only.empty()) remove_abandoned_lock_temporaries(report);
  return report;
}

}  // namespace shmccl::launcher
