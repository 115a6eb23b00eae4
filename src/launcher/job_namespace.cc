// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/job_namespace.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/directory.h"
#include "core/logging.h"
#include "transport/segment_names.h"

namespace shmccl::launcher {
namespace {

std::string path_of(const std::string& entry) {
  return std::string(kShmDir) + "/" + entry;
}

}  // namespace

std::string sanitize_run_id(const std::string& run_id) {
  std::string name;
  for (char c : run_id.substr(0, kMaxRunIdChars)) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-';
    name += keep ? c : '_';
  }
  return name.empty() ? "none" : name;
}

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> random(bytes);
  size_t filled = 0;
  while (filled < bytes) {
    const ssize_t n = getrandom(random.data() + filled, bytes - filled, 0);
    if (n < 0 && errno != EINTR) detail::throw_system_error("getrandom", errno);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : random) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

std::vector<std::string> list_shm_entries(const std::string& prefix) {
  std::vector<std::string> names;
  detail::Directory(kShmDir).for_each([&](const char* name) {
    if (std::strncmp(name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(name);
    return true;
  });
  std::sort(names.begin(), names.end());
  return names;
}

JobNamespace JobNamespace::create(const std::string& run_id) {
  // Lock first, publish second: the lock file is made under a private temporary name, locked,
  // and only then linked to its public name (link fails on an existing name, like O_EXCL).
  std::string temporary = std::string(kShmDir) + "/" + transport::kLockTemporaryPrefix + "XXXXXX";
  FileDescriptor lock(mkostemp(temporary.data(), O_CLOEXEC));  // mode 0600
  if (!lock) detail::throw_system_error("mkostemp(" + temporary + ")", errno);
  struct RemoveTemporary {
    const std::string& path;
    ~RemoveTemporary() { unlink(path.c_str()); }
  } remove_temporary{temporary};
  if (flock(lock.get(), LOCK_SH) != 0)
    detail::throw_system_error("flock(" + temporary + ")", errno);

  const std::string base = sanitize_run_id(run_id) + "-";
  for (int attempt = 0;; ++attempt) {
    std::string name = base + random_hex(8);
    const std::string lock_path = path_of(kShmPrefix + name + ".lock");
    if (link(temporary.c_str(), lock_path.c_str()) == 0) {
      // Reopen under the public name so the ranks' fd shows where the lock lives; the
      // temporary's LOCK_SH is held until the new one is, so the lock is never free.
      FileDescriptor public_lock(open(lock_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
      if (!public_lock || flock(public_lock.get(), LOCK_SH) != 0) {
        const int error = errno;
        unlink(lock_path.c_str());
        detail::throw_system_error("open+flock(" + lock_path + ")", error);
      }
      SHMCCL_INFO(kLaunch, "job namespace ", name, " (lock ", lock_path, ")");
      return JobNamespace(std::move(name), std::move(public_lock));
    }
    if (errno != EEXIST || attempt == 16) {
      detail::throw_system_error("link(" + temporary + ", " + lock_path + ")", errno);
    }
  }
}

JobNamespace::~JobNamespace() {
  if (lock_) remove_all();
}

std::vector<std::string> JobNamespace::remove_all() {
  const std::string lock_name = kShmPrefix + name_ + ".lock";
  std::vector<std::string> removed;
  for (const std::string& entry : list_shm_entries(kShmPrefix + name_ + ".")) {
    if (entry == lock_name) continue;
    if (unlink(path_of(entry).c_str()) == 0) removed.push_back(entry);
  }
  if (unlink(path_of(lock_name).c_str()) == 0) removed.push_back(lock_name);
  if (!removed.empty()) {
    SHMCCL_INFO(kLaunch, "removed ", removed.size(), " shared-memory entries of ", name_);
  }
  return removed;
}

}  // namespace shmccl::launcher
