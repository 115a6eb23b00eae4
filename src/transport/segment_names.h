// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Naming of the shared-memory segments of a job. Every segment of a job lives under one
// namespace: /dev/shm/shmccl.<ns>.<suffix>. The namespace is a sanitised component that cannot
// contain '.', so "shmccl.<ns>." prefixes of two namespaces never overlap and
// remove_namespace_segments(ns) removes exactly the segments of ns. The launcher picks the
// namespace (with a random token, so two jobs on one host never collide) and removes it at exit.
//
// Thread safety: all functions are thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace shmccl::transport {

// Maps any string to a valid name component: [A-Za-z0-9_-] are kept, every other byte becomes
// '_', and an empty input gives "default". A string longer than `max_length` (17 to 64) keeps
// its first max_length - 17 characters, then '-' and 16 hex digits of a hash of the whole
// string, so long names that differ anywhere give different components.
std::string sanitize_name_component(std::string component, size_t max_length = 64);

// A namespace's lock file (/dev/shm/shmccl.<ns>.lock) is made under a temporary name with this
// prefix in /dev/shm, locked, then linked to its public name, so that a cleaner never finds it
// unlocked. A process killed between making and unlinking the temporary leaves it:
// `shmrun --cleanup` removes those nobody holds after a minute.
inline constexpr const char* kLockTemporaryPrefix = ".shmccl-lock-";

// "/shmccl.<ns>.<suffix>". `ns` must be a sanitised component (non-empty, [A-Za-z0-9_-] only,
// at most 64 characters); `suffix` must be non-empty and made of [A-Za-z0-9_.-]. Throws
// InvalidArgument otherwise, and when the result is not a valid shm name (too long).
std::string segment_name(const std::string& ns, const std::string& suffix);

// The names ("/shmccl.<ns>.<...>") of every segment of namespace `ns` now in /dev/shm.
std::vector<std::string> list_namespace_segments(const std::string& ns);

// Unlinks every /dev/shm/shmccl.<ns>.* entry; returns how many were removed. Entries that
// vanish meanwhile are fine; other failures (EACCES...) are logged and skipped.
size_t remove_namespace_segments(const std::string& ns);

// 16 lowercase hex characters (64 bits) from getrandom(2): unique job and segment tokens.
std::string random_token();

}  // namespace shmccl::transport
