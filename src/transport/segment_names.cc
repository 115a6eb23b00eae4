// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/segment_names.h"

#include <sys/mman.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "core/directory.h"
#include "core/fnv1a.h"
#include "core/logging.h"

namespace shmccl::transport {
namespace {

constexpr size_t kMaxComponentLength = 64;
constexpr const char* kShmDirectory = "/dev/shm";  // where glibc's shm_open keeps its names

bool is_component_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

void check_namespace(const std::string& ns) {
  SHMCCL_CHECK_ARG(!ns.empty() && ns.size() <= kMaxComponentLength, "shm namespace '", ns,
                   "' must have 1 to ", kMaxComponentLength, " characters, got ", ns.size());
  for (char c : ns) {
    SHMCCL_CHECK_ARG(is_component_char(c), "shm namespace '", ns,
                     "' may only contain [A-Za-z0-9_-] (use sanitize_name_component)");
  }
}

std::string namespace_prefix(const std::string& ns) {
  return "shmccl." + ns + ".";
}

}  // namespace

std::string sanitize_name_component(std::string component, size_t max_length) {
  constexpr size_t kHashChars = 16;
  SHMCCL_CHECK_ARG(max_length > kHashChars && max_length <= kMaxComponentLength,
                   "name component length limit ", max_length, " is outside [", kHashChars + 1,
                   ", ", kMaxComponentLength, "]");
  if (component.empty()) return "default";
  if (component.size() > max_length) {
    // A plain cut would give two long names that differ only at the end (one host name, two
    // ports) the same component: keep the start, readable, and a hash of the whole name.
    char hash[kHashChars + 1];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(detail::fnv1a(component)));
    component.resize(max_length - kHashChars - 1);
    component += '-';
    component += hash;
  }
  for (char& c : component) {
    if (!is_component_char(c)) c = '_';
  }
  return component;
}

std::string segment_name(const std::string& ns, const std::string& suffix) {
  check_namespace(ns);
  SHMCCL_CHECK_ARG(!suffix.empty(), "shm segment suffix must not be empty (namespace ", ns, ")");
  for (char c : suffix) {
    SHMCCL_CHECK_ARG(is_component_char(c) || c == '.', "shm segment suffix '", suffix,
                     "' may only contain [A-Za-z0-9_.-]");
  }
  std::string name = "/" + namespace_prefix(ns) + suffix;
  SHMCCL_CHECK_ARG(name.size() <= 255, "shm segment name '", name,
                   "' is longer than 255 characters");
  return name;
}

std::vector<std::string> list_namespace_segments(const std::string& ns) {
  check_namespace(ns);
  const std::string prefix = namespace_prefix(ns);
  detail::Directory dir(kShmDirectory);
  if (!dir.valid()) {
    detail::throw_system_error(detail::concat("opendir(", kShmDirectory, ")"), dir.error());
  }
  std::vector<std::string> names;
  dir.for_each([&](const char* name) {
    if (std::strncmp(name, prefix.c_str(), prefix.size()) == 0) {
      names.push_back(std::string("/") + name);
    }
    return true;
  });
  return names;
}

size_t remove_namespace_segments(const std::string& ns) {
  size_t removed = 0;
  for (const std::string& name : list_namespace_segments(ns)) {
    if (::shm_unlink(name.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      SHMCCL_WARN(kShm, "cannot remove shm segment ", name, ": ", std::strerror(errno));
    }
  }
  if (removed > 0) SHMCCL_INFO(kShm, "removed ", removed, " shm segments of namespace ", ns);
  return removed;
}

std::string random_token() {
  uint64_t value = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(&value);
  size_t filled = 0;
  while (filled < sizeof(value)) {
    const ssize_t got = ::getrandom(bytes + filled, sizeof(value) - filled, 0);
    if (got == -1) {
      if (errno == EINTR) continue;
      detail::throw_system_error("getrandom(8 bytes)", errno);
    }
    filled += static_cast<size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token(16, '0');
  for (int i = 0; i < 16; ++i)
    token[i] = kHex[(value >> (60 - 4 * i)) & 0xF];
  return token;
}

}  // namespace shmccl::transport
