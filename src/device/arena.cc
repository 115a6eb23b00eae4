// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "device/arena.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/file_descriptor.h"
#include "core/huge_page_mapping.h"
#include "core/logging.h"
#include "core/peer_process.h"
#include "core/process_id.h"
#include "shmccl/error.hpp"

namespace shmccl::device {
namespace {

using detail::concat;

// The header page's content. Layout (little-endian, at file offset 0 of the memfd):
//   0 magic, 8 token, 16 capacity, 24 owner pid, 28 device. Written once by the owner in the
// constructor, before any handle can be published, and only read afterwards: publishing the
// handle (a pipe, a socket, a release store in shared memory) orders the reads after the writes.
struct ArenaHeader {
  uint64_t magic;
  uint64_t token;
  uint64_t capacity;
  int32_t owner_pid;
  int32_t device;
};
static_assert(sizeof(ArenaHeader) == 32);
static_assert(alignof(ArenaHeader) == 8);
static_assert(std::is_trivially_copyable_v<ArenaHeader>);
static_assert(sizeof(ArenaHeader) <= Arena::kDecommitsOffset &&
              Arena::kDecommitsOffset + sizeof(uint64_t) <= Arena::kHeaderPageBytes);
static_assert(Arena::kHugePageBytes == detail::kHugePageBytes);
static_assert(Arena::kHeaderBytes % Arena::kHugePageBytes == 0 &&
              Arena::kSegmentGranularity % Arena::kHugePageBytes == 0);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The arena's size is fixed for its life: the owner seals it, and a mapper requires the seals.
constexpr int kArenaSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// The owner's decommit count in the header page of the arena mapped at `base`.
std::atomic<uint64_t>& decommits(char* base) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(base - Arena::kHeaderBytes +
                                                   Arena::kDecommitsOffset);
}

constexpr uint64_t kArenaMagic = 0x414e45524150'4e53ull;  // "SNPARENA" read as little-endian
// Far beyond any machine, and small enough that offsets and roundings cannot overflow.
constexpr uint64_t kMaxCapacity = 1ull << 50;

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A move-only owned mapping; unmapped by the destructor unless released.
class UniqueMapping {
 public:
  UniqueMapping(void* address, size_t bytes) : address_(address), bytes_(bytes) {}
  ~UniqueMapping() {
    if (address_ != nullptr) ::munmap(address_, bytes_);
  }
  UniqueMapping(const UniqueMapping&) = delete;
  UniqueMapping& operator=(const UniqueMapping&) = delete;
  char* get() const { return static_cast<char*>(address_); }
  char* release() { return static_cast<char*>(std::exchange(address_, nullptr)); }

 private:
  void* address_;
  size_t bytes_;
};

// Maps the whole memfd (header + address space) shared and read-write, without reserving swap,
// at a 2 MiB boundary, so the huge pages of its segments map with one entry each.
UniqueMapping map_shared(int fd, uint64_t bytes, const std::string& what) {
  void* address = detail::map_shared_huge_aligned(fd, bytes, MAP_NORESERVE);
  if (address == MAP_FAILED) {
    const int error = errno;  // before the message's allocation
    detail::throw_system_error(concat("mmap(", what, ", ", bytes, " bytes)"), error);
  }
  return UniqueMapping(address, bytes);
}

// fallocate that retries when a signal interrupted it (shmem undoes the partial work first).
int fallocate_retrying(int fd, int mode, uint64_t offset, uint64_t length) {
  int result;
  do {
    result = ::fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(length));
  } while (result == -1 && errno == EINTR);
  return result == -1 ? errno : 0;
}

uint64_t random_token() {
  uint64_t token = 0;
  while (token == 0) {
    ssize_t got = ::getrandom(&token, sizeof(token), 0);
    if (got == -1 && errno != EINTR) detail::throw_system_error("getrandom", errno);
    if (got != static_cast<ssize_t>(sizeof(token))) token = 0;
  }
  return token;
}

std::string hex(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016" PRIx64, value);
  return text;
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  constexpr double kKiB = 1024.0;
  char text[64];
  if (bytes < 1024) {
    std::snprintf(text, sizeof(text), "%" PRIu64 " bytes", bytes);
  } else if (bytes < (1ull << 20)) {
    std::snprintf(text, sizeof(text), "%.2f KiB", static_cast<double>(bytes) / kKiB);
  } else if (bytes < (1ull << 30)) {
    std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (kKiB * kKiB));
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB",
                  static_cast<double>(bytes) / (kKiB * kKiB * kKiB));
  }
  return text;
}

Arena::Arena(int device, uint64_t capacity, bool huge_pages)
    : device_(device), huge_pages_(huge_pages) {
  SHMCCL_CHECK_ARG(capacity > 0 && capacity <= kMaxCapacity, "NPU ", device,
                   " arena: capacity must be in (0, ", kMaxCapacity, "] bytes, got ", capacity);
  // Every allocation takes whole segments: a capacity of 1 MiB, or the last 1 MiB of 3, could
  // hold none, and allocations that fit the reported free memory would fail.
  capacity_ = round_up(capacity, kSegmentGranularity);
  const uint64_t file_bytes = kHeaderBytes + capacity_;
  const std::string name = concat("shmccl-npu", device);

  FileDescriptor fd(SHMCCL_SYSCALL(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING),
                                   "memfd_create(", name, ")"));
  SHMCCL_SYSCALL(::ftruncate(fd.get(), static_cast<off_t>(file_bytes)), "ftruncate(memfd ", name,
                 ", ", file_bytes, " bytes)");
  // Every peer that maps the arena holds its fd read-write: sealed, none can shrink it under the
  // others' mappings (a SIGBUS in every process that touches the lost pages). Hole punching, which
  // decommits freed segments, stays allowed.
  SHMCCL_SYSCALL(::fcntl(fd.get(), F_ADD_SEALS, kArenaSeals), "fcntl(memfd ", name,
                 ", F_ADD_SEALS)");
  // Commit the header page so that writing it cannot fault on a full machine.
  if (int error = fallocate_retrying(fd.get(), 0, 0, kHeaderPageBytes); error != 0) {
    detail::throw_system_error(concat("fallocate(memfd ", name, ", header page)"), error);
  }
  UniqueMapping mapping = map_shared(fd.get(), file_bytes, concat("memfd ", name));
  token_ = random_token();

  const ArenaHeader header{kArenaMagic, token_, capacity_, static_cast<int32_t>(::getpid()),
                           device_};
  std::memcpy(mapping.get(), &header, sizeof(header));
  free_ranges_.emplace(0, capacity_);

  fd_ = fd.release();
  base_ = mapping.release() + kHeaderBytes;
  SHMCCL_INFO(kDevice, "NPU ", device_, " arena: reserved ", format_bytes(capacity_), " (memfd ",
              name, ", fd ", fd_, ")");
}

Arena::~Arena() {
  ::munmap(base_ - kHeaderBytes, kHeaderBytes + capacity_);
  ::close(fd_);
}

uint64_t Arena::allocate_segment(uint64_t bytes) {
  SHMCCL_CHECK_ARG(bytes > 0, "NPU ", device_, " arena: allocate_segment of 0 bytes");
  const uint64_t length = bytes > capacity_ ? 0 : round_up(bytes, kSegmentGranularity);
  uint64_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto fit = free_ranges_.end();
    uint64_t largest = 0;
    for (auto it = free_ranges_.begin(); it != free_ranges_.end(); ++it) {
      largest = std::max(largest, it->second);
      if (length != 0 && it->second >= length) {
        fit = it;  // first fit: keeps the low addresses dense
        break;
      }
    }
    if (fit == free_ranges_.end()) {
      throw OutOfMemoryError(concat("NPU ", device_, " arena: no free range for a segment of ",
                                    format_bytes(length != 0 ? length : bytes), " (requested ",
                                    bytes, " bytes); ", format_bytes(committed_), " committed of ",
                                    format_bytes(capacity_), " capacity, largest free range ",
                                    format_bytes(largest)));
    }
    offset = fit->first;
    const uint64_t rest = fit->second - length;
    // The new entries first: a std::bad_alloc then leaves both maps as they were, the range free.
    const auto segment = segments_.emplace(offset, Segment{length, false}).first;
    if (rest > 0) {
      try {
        free_ranges_.emplace(offset + length, rest);
      } catch (...) {
        segments_.erase(segment);
        throw;
      }
    }
    free_ranges_.erase(fit);
  }

  // Commit outside the lock: zeroing a large segment takes milliseconds, and the range is ours.
  const int error = fallocate_retrying(fd_, 0, kHeaderBytes + offset, length);
  if (error != 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    segments_.erase(offset);
    return_range_locked(offset, length);
    const std::string what = concat(
        "NPU ", device_, " arena: cannot commit a segment of ", format_bytes(length),
        " (requested ", bytes, " bytes) at offset ", offset, ": fallocate: ", std::strerror(error),
        "; ", format_bytes(committed_), " committed of ", format_bytes(capacity_), " capacity");
    if (error == ENOSPC || error == ENOMEM) throw OutOfMemoryError(what);
    throw SystemError(what, error);
  }
  // Outside the lock too: the collapse copies the fresh pages into huge ones. Committing first
  // keeps a full machine an OutOfMemoryError here; a collapse that finds no memory just fails
  // and leaves the 4 KiB pages.
  const bool huge = huge_pages_.load(std::memory_order_relaxed) && make_huge(offset, length);
  std::lock_guard<std::mutex> lock(mutex_);
  committed_ += length;
  if (huge) {
    segments_.at(offset).huge = true;
    huge_committed_ += length;
  }
  SHMCCL_TRACE(kDevice, "NPU ", device_, " arena: committed ", format_bytes(length), " at offset ",
               offset, huge ? " in 2 MiB pages" : "");
  return offset;
}

bool Arena::make_huge(uint64_t offset, uint64_t length) {
  const int error = detail::collapse_into_huge_pages(base_ + offset, length);
  if (error == 0) return true;
  // No 2 MiB of free contiguous memory, or the cgroup's limit, for now: a later segment may
  // find some.
  if (error == EAGAIN || error == ENOMEM || error == EBUSY) {
    SHMCCL_TRACE(kDevice, "NPU ", device_, " arena: segment at offset ", offset,
                 " stays in 4 KiB pages (MADV_COLLAPSE: ", std::strerror(error), ")");
    return false;
  }
  // EINVAL: a kernel before 6.1 or without transparent huge pages. Do not ask again.
  if (huge_pages_.exchange(false, std::memory_order_relaxed)) {
    SHMCCL_INFO(kDevice, "NPU ", device_,
                " arena: 4 KiB pages (madvise MADV_COLLAPSE: ", std::strerror(error), ")");
  }
  return false;
}

void Arena::free_segment(uint64_t offset, uint64_t bytes) {
  const uint64_t length = bytes > capacity_ ? 0 : round_up(bytes, kSegmentGranularity);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = segments_.find(offset);
    if (it == segments_.end() || it->second.length != length || length == 0) {
      throw Error(concat("NPU ", device_, " arena: free_segment(offset ", offset, ", ", bytes,
                         " bytes) does not match a segment",
                         it == segments_.end()
                             ? std::string(" (none starts there)")
                             : concat(" (the one there has ", it->second.length, " bytes)")));
    }
    if (it->second.huge) huge_committed_ -= length;
    segments_.erase(it);
  }

  // Decommit outside the lock; nobody else can hand out the range until it is returned below.
  const int error = fallocate_retrying(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                       kHeaderBytes + offset, length);
  // Before the range can be handed out again (and reach a peer in a new tensor's descriptor,
  // whose publication orders this before the peer's populate()).
  decommits(base_).fetch_add(1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    committed_ -= length;
    return_range_locked(offset, length);
  }
  if (error != 0) {
    detail::throw_system_error(concat("NPU ", device_, " arena: fallocate(PUNCH_HOLE, offset ",
                                      offset, ", ", length, " bytes)"),
                               error);
  }
  SHMCCL_TRACE(kDevice, "NPU ", device_, " arena: released ", format_bytes(length), " at offset ",
               offset);
}

void Arena::return_range_locked(uint64_t offset, uint64_t length) {
  auto it = free_ranges_.emplace(offset, length).first;
  if (auto next = std::next(it); next != free_ranges_.end() && offset + length == next->first) {
    it->second += next->second;
    free_ranges_.erase(next);
  }
  if (it != free_ranges_.begin()) {
    if (auto prev = std::prev(it); prev->first + prev->second == offset) {
      prev->second += it->second;
      free_ranges_.erase(it);
    }
  }
}

uint64_t Arena::committed_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return committed_;
}

uint64_t Arena::huge_page_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return huge_committed_;
}

ArenaHandle Arena::handle() const {
  ArenaHandle handle;
  handle.pid = static_cast<int32_t>(::shmccl::detail::current_pid());
  handle.fd = fd_;
  handle.device = device_;
  handle.capacity = capacity_;
  handle.token = token_;
  return handle;
}

std::shared_ptr<ArenaMapping> ArenaMapping::open(const ArenaHandle& handle) {
  SHMCCL_CHECK_ARG(
      handle.pid > 0 && handle.fd >= 0 && handle.capacity > 0 && handle.capacity <= kMaxCapacity,
      "invalid ArenaHandle: pid ", handle.pid, ", fd ", handle.fd, ", capacity ", handle.capacity);
  const std::string peer = concat("ArenaMapping: process ", handle.pid);
  const std::string arena = concat(" (NPU ", handle.device, " arena, fd ", handle.fd, ")");

  // pidfd_getfd, or /proc/<pid>/fd/<n> where that is refused (Yama, sandboxes: peer_process.h).
  detail::PeerFile peer_file = detail::open_peer_file(handle.pid, handle.fd);
  if (!peer_file.file) {
    if (peer_file.error == ESRCH) throw RemoteError(concat(peer, " is gone", arena));
    if (peer_file.error == EBADF)
      throw RemoteError(concat(peer, " has no open fd ", handle.fd, arena));
    throw SystemError(concat(peer, arena, ": cannot open its memory (", peer_file.failure,
                             "); the ranks of a job must run as one user"),
                      peer_file.error);
  }
  FileDescriptor fd = std::move(peer_file.file);

  struct stat status {};
  SHMCCL_SYSCALL(::fstat(fd.get(), &status), peer, arena, ": fstat");
  const uint64_t file_bytes = Arena::kHeaderBytes + handle.capacity;
  if (!S_ISREG(status.st_mode) || static_cast<uint64_t>(status.st_size) != file_bytes) {
    throw RemoteError(concat(peer, arena, ": fd is not the arena: size ", status.st_size,
                             " bytes, expected ", file_bytes, " (header page + capacity ",
                             handle.capacity, ")"));
  }
  // Sealed, its size cannot change after this check (Arena's constructor seals it).
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & kArenaSeals) != kArenaSeals) {
    throw RemoteError(concat(peer, arena, ": fd is not the arena: not sealed against resizing"));
  }
  UniqueMapping mapping = map_shared(fd.get(), file_bytes, concat(peer, arena));

  ArenaHeader header;
  std::memcpy(&header, mapping.get(), sizeof(header));
  auto mismatch = [&](const char* field, const std::string& want, const std::string& got) {
    return RemoteError(concat(peer, arena, ": ", field, " mismatch: handle has ", want,
                              ", arena header has ", got));
  };
  if (header.magic != kArenaMagic) throw mismatch("magic", hex(kArenaMagic), hex(header.magic));
  if (header.capacity != handle.capacity) {
    throw mismatch("capacity", std::to_string(handle.capacity), std::to_string(header.capacity));
  }
  if (header.device != handle.device) {
    throw mismatch("device", std::to_string(handle.device), std::to_string(header.device));
  }
  if (header.token != handle.token) throw mismatch("token", hex(handle.token), hex(header.token));

  std::shared_ptr<ArenaMapping> result(new ArenaMapping());
  result->handle_ = handle;
  result->capacity_ = handle.capacity;
  result->fd_ = fd.release();
  result->base_ = mapping.release() + Arena::kHeaderBytes;
  SHMCCL_INFO(kDevice, "mapped NPU ", handle.device, " arena of process ", handle.pid, " (",
              format_bytes(handle.capacity), ")");
  return result;
}

bool ArenaMapping::PageRanges::covers(uint64_t start, uint64_t end) const {
  // The range that starts at or before `start` must reach `end`.
  auto next = ranges_.upper_bound(start);
  return next != ranges_.begin() && std::prev(next)->second >= end;
}

void ArenaMapping::PageRanges::add(uint64_t start, uint64_t end) {
  // Merge with the ranges it touches or overlaps.
  auto first = ranges_.upper_bound(start);
  if (first != ranges_.begin() && std::prev(first)->second >= start) --first;
  auto last = first;
  while (last != ranges_.end() && last->first <= end) {
    start = std::min(start, last->first);
    end = std::max(end, last->second);
    ++last;
  }
  ranges_.erase(first, last);
  ranges_.emplace(start, end);
}

void ArenaMapping::populate(uint64_t offset, uint64_t bytes, bool touch) {
  constexpr uint64_t kPage = 4096;
  if (bytes == 0 || offset > capacity_ || capacity_ - offset < bytes) return;
  const uint64_t start = offset / kPage * kPage;
  const uint64_t end = std::min(capacity_, (offset + bytes + kPage - 1) / kPage * kPage);
  std::lock_guard<std::mutex> lock(populated_mutex_);
  const uint64_t owner_decommits = decommits(base_).load(std::memory_order_acquire);
  if (owner_decommits != populated_decommits_) {
    populated_.clear();
    touched_.clear();
    populated_decommits_ = owner_decommits;
  }
  if (!populated_.covers(start, end)) {
#ifdef MADV_POPULATE_WRITE
    if (::madvise(base_ + start, end - start, MADV_POPULATE_WRITE) != 0) return;  // old kernel
#else
    return;
#endif
    populated_.add(start, end);
  }
  if (touch && !touched_.covers(start, end)) {
    // A read is enough: the page table entry the populate made is writable already.
    for (uint64_t page = start; page < end; page += kPage) {
      (void)__atomic_load_n(base_ + page, __ATOMIC_RELAXED);
    }
    touched_.add(start, end);
  }
}

uint64_t ArenaMapping::owner_decommits() const {
  return decommits(base_).load(std::memory_order_acquire);
}

ArenaMapping::~ArenaMapping() {
  if (base_ != nullptr) ::munmap(base_ - Arena::kHeaderBytes, Arena::kHeaderBytes + capacity_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace shmccl::device
