// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/stale_cleanup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>

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

}  // namespace

CleanupReport cleanup_stale_namespaces(const std::vector<std::string>& only, bool launched_only) {
  std::map<std::string, std::vector<std::string>> by_namespace;
  for (const std::string& entry : list_shm_entries(kShmPrefix)) {
    const std::string ns = namespace_of(entry);
    if (ns.empty()) continue;
    if (!only.empty() && std::find(only.begin(), only.end(), ns) == only.end()) continue;
    by_namespace[ns].push_back(entry);
  }

  CleanupReport report;
  for (const auto& [ns, entries] : by_namespace) {
    const std::string lock_path = path_of(kShmPrefix + ns + ".lock");
    FileDescriptor lock(open(lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock && errno == ENOENT && launched_only) continue;
    if (!lock && errno != ENOENT) {
      report.errors.push_back("cannot open " + lock_path + ": " + std::strerror(errno));
      continue;
    }
    // Held until the namespace is removed: a job cannot come back to life meanwhile.
    if (lock && flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        report.live.push_back(ns);
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
