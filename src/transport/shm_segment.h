// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ShmSegment: a named POSIX shared-memory segment (/dev/shm/<name>), mapped read-write and shared.
//
// Ownership: the object owns the mapping (unmapped in the destructor) and, according to its
// UnlinkPolicy, the name. The file descriptor is closed as soon as the segment is mapped: a
// mapping keeps the memory alive by itself, and peers find the segment by name.
//
// Safety: segments are created with O_CREAT|O_EXCL and mode 0600, so a name that already exists
// (another job, a squatter, a stale leftover) is an error rather than silently shared, and other
// users cannot open it. The whole size is committed with fallocate at creation, so a full
// /dev/shm is an OutOfMemoryError from create() instead of a SIGBUS on first touch.
//
// Thread safety: const accessors may be called concurrently; unlink() and moves need external
// synchronisation. The mapped memory itself is shared with other processes: whoever lays out
// data in it documents its own synchronisation.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <optional>
#include <string>

namespace shmccl::transport {

// Who removes the segment's name.
enum class UnlinkPolicy {
  kOnDestroy,  // the destructor unlinks the name (the default for create(): the creator owns it)
  kManual,     // the name stays until unlink() is called here, by a peer, or by namespace cleanup
};

// The pages a segment is made of.
enum class PageSize {
  k4KiB,  // the default
  // 2 MiB pages where the kernel can make them (best effort: 4 KiB pages otherwise), for a
  // segment every process of a group touches all over: one page fault per 2 MiB in each. The
  // size must be a multiple of 2 MiB; every process maps the segment at a 2 MiB boundary.
  kHuge,
};

class ShmSegment {
 public:
  // Creates the segment `name` of exactly `size` bytes (> 0), zero-filled and committed.
  // Throws InvalidArgument for a bad name or size 0, SystemError (errno EEXIST, naming the
  // segment) when the name exists, OutOfMemoryError when /dev/shm cannot hold `size` bytes (the
  // half-made segment is unlinked), SystemError for any other failure.
  static ShmSegment create(const std::string& name, size_t size,
                           UnlinkPolicy policy = UnlinkPolicy::kOnDestroy,
                           PageSize pages = PageSize::k4KiB);

  // Opens and maps an existing segment, which must be exactly `expected_size` bytes.
  // Throws SystemError (ENOENT, EACCES...) naming the segment, RemoteError naming both sizes when
  // the segment's size differs (it was made by someone with another idea of its layout).
  static ShmSegment open(const std::string& name, size_t expected_size,
                         UnlinkPolicy policy = UnlinkPolicy::kManual,
                         PageSize pages = PageSize::k4KiB);

  // Like open(), but returns nullopt when the segment does not exist (ENOENT).
  static std::optional<ShmSegment> try_open(const std::string& name, size_t expected_size,
                                            UnlinkPolicy policy = UnlinkPolicy::kManual,
                                            PageSize pages = PageSize::k4KiB);

  // The current size of segment `name` without mapping it, or nullopt when it does not exist.
  // A segment being created by another process reports 0 until create() has committed all of it.
  static std::optional<size_t> size_of(const std::string& name);
  // The same with the file's identity, to tell one segment of a name from a later one.
  struct Identity {
    size_t size = 0;
    uint64_t device = 0;
    uint64_t inode = 0;
  };
  static std::optional<Identity> identity_of(const std::string& name);
  // Removes `name` if it still is the file `identity` names (a stat, then the unlink: what a
  // process creates under the name in between is removed too, a race the callers make harmless).
  static bool unlink_if_same(const std::string& name, const Identity& identity);

  // Removes `name` from /dev/shm; true when it existed. ENOENT is not an error.
  static bool unlink_name(const std::string& name);

  // Throws InvalidArgument unless `name` is a valid POSIX shm name for Linux: a leading '/', no
  // other '/', 2 to 255 characters, and not "/." or "/..".
  static void validate_name(const std::string& name);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  // Unmaps; unlinks the name too under UnlinkPolicy::kOnDestroy (unless unlink() already ran).
  ~ShmSegment();

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }
  UnlinkPolicy unlink_policy() const noexcept { return policy_; }
  // For a segment this process created with PageSize::kHuge: 0 when the kernel made it of 2 MiB
  // pages, else the errno of its refusal (EINVAL: no transparent huge pages here; ENOMEM, EAGAIN:
  // none to be had now). kHugePagesNotAsked for 4 KiB segments and for segments opened here.
  static constexpr int kHugePagesNotAsked = -1;
  int huge_page_error() const noexcept { return huge_page_error_; }

  // Removes the name now if it still names this segment (idempotent: later calls, and a name
  // someone else already removed or reused for a new segment, are fine). The mapping stays
  // valid until destruction; peers that mapped the segment keep it.
  void unlink();
  // Whether `name` in /dev/shm still refers to this segment (not removed, not replaced). A peer
  // waiting on a segment's contents checks it: a creator that failed unlinks and never writes.
  bool still_named() const;
  // Switches to UnlinkPolicy::kManual: the destructor will leave the name in place.
  void keep() noexcept { policy_ = UnlinkPolicy::kManual; }
  void set_unlink_policy(UnlinkPolicy policy) noexcept { policy_ = policy; }

 private:
  ShmSegment(std::string name, void* data, size_t size, UnlinkPolicy policy,
             const struct stat& identity) noexcept;
  static std::optional<ShmSegment> open_impl(const std::string& name, size_t expected_size,
                                             UnlinkPolicy policy, PageSize pages, bool missing_ok);
  void release() noexcept;

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  UnlinkPolicy policy_ = UnlinkPolicy::kManual;
  bool unlinked_ = false;
  dev_t device_ = 0;  // identity of the segment, to unlink() its name only while it is ours
  ino_t inode_ = 0;
  int huge_page_error_ = kHugePagesNotAsked;
};

}  // namespace shmccl::transport
