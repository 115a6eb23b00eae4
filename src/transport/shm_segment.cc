// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/file_descriptor.h"
#include "core/huge_page_mapping.h"
#include "core/logging.h"

namespace shmccl::transport {
namespace {

constexpr size_t kMaxNameLength = 255;  // NAME_MAX of /dev/shm entries, plus the leading '/'

// fallocate that retries EINTR (a signal arriving during a large allocation).
int fallocate_no_eintr(int fd, off_t size) {
  int result;
  do {
    result = ::fallocate(fd, 0, 0, size);
  } while (result == -1 && errno == EINTR);
  return result;
}

bool is_out_of_space(int error_code) {
  return error_code == ENOSPC || error_code == ENOMEM || error_code == EFBIG;
}

// Unlinks the half-made segment `name` and throws: OutOfMemoryError when the failure means
// /dev/shm (or memory) is full, SystemError otherwise.
[[noreturn]] void fail_creation(const std::string& name, size_t size, const char* what,
                                int error_code) {
  ::shm_unlink(name.c_str());
  if (is_out_of_space(error_code)) {
    throw OutOfMemoryError(detail::concat("not enough space in /dev/shm for segment ", name, " (",
                                          size, " bytes): ", what, ": ",
                                          std::strerror(error_code)));
  }
  detail::throw_system_error(detail::concat(what, " for shm segment ", name, " (", size, " bytes)"),
                             error_code);
}

void check_page_size(const std::string& name, size_t size, PageSize pages) {
  SHMCCL_CHECK_ARG(pages != PageSize::kHuge || size % detail::kHugePageBytes == 0, "shm segment ",
                   name, " of 2 MiB pages must have a size that is a multiple of 2 MiB, got ",
                   size);
}

void* map_segment(int fd, size_t size, PageSize pages) {
  if (pages == PageSize::kHuge) return detail::map_shared_huge_aligned(fd, size);
  return ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

// Best effort: the segment works as well in 4 KiB pages, only its first touches cost more.
// Returns 0 when the kernel made 2 MiB pages, else the errno of its refusal.
int make_huge(const std::string& name, void* data, size_t size) {
  static std::atomic<bool> kernel_can{true};
  if (!kernel_can.load(std::memory_order_relaxed)) return EINVAL;
  // EAGAIN is a page the kernel found busy for a moment (locked, or in a per-CPU batch); it
  // passes, unlike ENOMEM (no free 2 MiB after reclaim and compaction).
  constexpr int kAttempts = 3;
  int error = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    error = detail::collapse_into_huge_pages(data, size);
    if (error != EAGAIN) break;
  }
  if (error == 0) return 0;
  if (error == EINVAL) {
    // A kernel before 6.1 or without transparent huge pages: do not ask again.
    if (kernel_can.exchange(false, std::memory_order_relaxed)) {
      SHMCCL_INFO(kShm,
                  "shm segments stay in 4 KiB pages (madvise MADV_COLLAPSE: ", std::strerror(error),
                  ")");
    }
    return error;
  }
  SHMCCL_TRACE(kShm, "shm segment ", name,
               " stays in 4 KiB pages (madvise MADV_COLLAPSE: ", std::strerror(error), ")");
  return error;
}

}  // namespace

void ShmSegment::validate_name(const std::string& name) {
  SHMCCL_CHECK_ARG(name.size() >= 2 && name.size() <= kMaxNameLength, "shm segment name '", name,
                   "' must have 2 to ", kMaxNameLength, " characters, got ", name.size());
  SHMCCL_CHECK_ARG(name[0] == '/', "shm segment name '", name, "' must start with '/'");
  SHMCCL_CHECK_ARG(name.find('/', 1) == std::string::npos, "shm segment name '", name,
                   "' must not contain '/' after the first character");
  SHMCCL_CHECK_ARG(name.find('\0') == std::string::npos, "shm segment name '", name,
                   "' must not contain a NUL character");
  SHMCCL_CHECK_ARG(name != "/." && name != "/..", "shm segment name '", name, "' is reserved");
}

ShmSegment::ShmSegment(std::string name, void* data, size_t size, UnlinkPolicy policy,
                       const struct stat& identity) noexcept
    : name_(std::move(name)),
      data_(data),
      size_(size),
      policy_(policy),
      device_(identity.st_dev),
      inode_(identity.st_ino) {}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      policy_(other.policy_),
      unlinked_(other.unlinked_),
      device_(other.device_),
      inode_(other.inode_),
      huge_page_error_(other.huge_page_error_) {
  other.unlinked_ = true;  // the moved-from object owns nothing, not even the name
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    policy_ = other.policy_;
    unlinked_ = std::exchange(other.unlinked_, true);
    device_ = other.device_;
    inode_ = other.inode_;
    huge_page_error_ = other.huge_page_error_;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  release();
}

void ShmSegment::release() noexcept {
  if (data_ != nullptr) {
    ::munmap(data_, size_);
    data_ = nullptr;
  }
  if (policy_ == UnlinkPolicy::kOnDestroy && !unlinked_ && !name_.empty()) {
    if (::shm_unlink(name_.c_str()) == -1 && errno != ENOENT) {
      SHMCCL_WARN(kShm, "shm_unlink(", name_, ") failed: ", std::strerror(errno));
    }
  }
  unlinked_ = true;
}

ShmSegment ShmSegment::create(const std::string& name, size_t size, UnlinkPolicy policy,
                              PageSize pages) {
  validate_name(name);
  SHMCCL_CHECK_ARG(size > 0, "shm segment ", name, " must have a size > 0");
  check_page_size(name, size, pages);
  SHMCCL_CHECK_ARG(size <= static_cast<size_t>(std::numeric_limits<off_t>::max()), "shm segment ",
                   name, " size ", size, " does not fit in off_t");

  FileDescriptor fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    const int error_code = errno;
    if (error_code == EEXIST) {
      throw SystemError(detail::concat("shm segment ", name,
                                       " already exists (created with O_EXCL; another job or a "
                                       "stale leftover holds the name): ",
                                       std::strerror(error_code)),
                        error_code);
    }
    detail::throw_system_error(detail::concat("shm_open(", name, ", O_CREAT|O_EXCL, 0600)"),
                               error_code);
  }
  // From here on the name exists: every failure must remove it again.
  auto fail = [&](const char* what, int error_code) {
    fail_creation(name, size, what, error_code);
  };
  // The umask may have cleared bits of 0600; make the mode exact so the owner can always map it.
  if (::fchmod(fd.get(), 0600) == -1) fail("fchmod(0600)", errno);
  // fallocate sets the size only once every page is committed, so openers (which check the size)
  // never map a segment whose creator is about to fail with ENOSPC.
  if (fallocate_no_eintr(fd.get(), static_cast<off_t>(size)) == -1) {
    const int error_code = errno;
    if (error_code != EOPNOTSUPP) fail("fallocate", error_code);
    // Not tmpfs (should not happen for /dev/shm): proceed with a sparse segment.
    SHMCCL_WARN(kShm, "fallocate is not supported for shm segment ", name,
                "; a full /dev/shm will show up as SIGBUS instead of an error");
    if (::ftruncate(fd.get(), static_cast<off_t>(size)) == -1) fail("ftruncate", errno);
  }
  struct stat identity {};
  if (::fstat(fd.get(), &identity) == -1) fail("fstat", errno);
  void* data = map_segment(fd.get(), size, pages);
  if (data == MAP_FAILED) fail("mmap", errno);
  const int huge_page_error =
      pages == PageSize::kHuge ? make_huge(name, data, size) : kHugePagesNotAsked;
  SHMCCL_TRACE(kShm, "created shm segment ", name, " (", size, " bytes)");
  ShmSegment segment(name, data, size, policy, identity);
  segment.huge_page_error_ = huge_page_error;
  return segment;
}

std::optional<ShmSegment> ShmSegment::open_impl(const std::string& name, size_t expected_size,
                                                UnlinkPolicy policy, PageSize pages,
                                                bool missing_ok) {
  validate_name(name);
  SHMCCL_CHECK_ARG(expected_size > 0, "shm segment ", name, " must have an expected size > 0");
  check_page_size(name, expected_size, pages);
  FileDescriptor fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    if (errno == ENOENT && missing_ok) return std::nullopt;
    detail::throw_system_error(detail::concat("shm_open(", name, ", O_RDWR)"), errno);
  }
  struct stat info {};
  SHMCCL_SYSCALL(::fstat(fd.get(), &info), "fstat(shm segment ", name, ")");
  if (info.st_size < 0 || static_cast<size_t>(info.st_size) != expected_size) {
    throw RemoteError(detail::concat("shm segment ", name, " has size ", info.st_size,
                                     " bytes, expected ", expected_size, " bytes"));
  }
  void* data = map_segment(fd.get(), expected_size, pages);
  if (data == MAP_FAILED) {
    detail::throw_system_error(
        detail::concat("mmap of shm segment ", name, " (", expected_size, " bytes)"), errno);
  }
  SHMCCL_TRACE(kShm, "opened shm segment ", name, " (", expected_size, " bytes)");
  return ShmSegment(name, data, expected_size, policy, info);
}

ShmSegment ShmSegment::open(const std::string& name, size_t expected_size, UnlinkPolicy policy,
                            PageSize pages) {
  return std::move(*open_impl(name, expected_size, policy, pages, /*missing_ok=*/false));
}

std::optional<ShmSegment> ShmSegment::try_open(const std::string& name, size_t expected_size,
                                               UnlinkPolicy policy, PageSize pages) {
  return open_impl(name, expected_size, policy, pages, /*missing_ok=*/true);
}

std::optional<size_t> ShmSegment::size_of(const std::string& name) {
  const std::optional<Identity> identity = identity_of(name);
  if (!identity) return std::nullopt;
  return identity->size;
}

std::optional<ShmSegment::Identity> ShmSegment::identity_of(const std::string& name) {
  validate_name(name);
  FileDescriptor fd(::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    detail::throw_system_error(detail::concat("shm_open(", name, ", O_RDONLY)"), errno);
  }
  struct stat info {};
  SHMCCL_SYSCALL(::fstat(fd.get(), &info), "fstat(shm segment ", name, ")");
  return Identity{static_cast<size_t>(info.st_size), static_cast<uint64_t>(info.st_dev),
                  static_cast<uint64_t>(info.st_ino)};
}

bool ShmSegment::unlink_if_same(const std::string& name, const Identity& identity) {
  const std::optional<Identity> now = identity_of(name);
  if (!now || now->device != identity.device || now->inode != identity.inode) return false;
  return unlink_name(name);
}

bool ShmSegment::unlink_name(const std::string& name) {
  validate_name(name);
  if (::shm_unlink(name.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  detail::throw_system_error(detail::concat("shm_unlink(", name, ")"), errno);
}

void ShmSegment::unlink() {
  if (unlinked_ || name_.empty()) return;
  unlinked_ = true;
  // Only if the name still refers to this segment: after someone else removed it, the same name
  // may already belong to a new segment (the next init of the same job), which must survive.
  if (still_named()) unlink_name(name_);
}

bool ShmSegment::still_named() const {
  if (name_.empty()) return false;
  struct stat current {};
  if (::stat(("/dev/shm" + name_).c_str(), &current) == -1) return false;
  return current.st_dev == device_ && current.st_ino == inode_;
}

}  // namespace shmccl::transport
