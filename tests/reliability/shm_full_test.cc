// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// A /dev/shm too small for the job (docker's default is 64 MB) must be a clear error when a group
// is created, on every rank, never a SIGBUS later. Each test runs its ranks in a private mount
// namespace whose /dev/shm is a tmpfs of a chosen size (unshare(CLONE_NEWNS) as root, else with a
// user namespace, as `unshare -rm` does); where neither is allowed, the tests are skipped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "multiprocess.h"
#include "transport/control_block.h"
#include "transport/shm_store.h"

namespace shmccl {
namespace {

using testing::require;
using testing::str;

constexpr int kSkip = 77;

size_t page_round(size_t bytes) {
  return (bytes + 4095) / 4096 * 4096;
}

bool write_text(const char* path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out.flush());
}

// In the calling (forked) process: a private mount namespace with a tmpfs of `bytes` on /dev/shm.
bool enter_small_shm(size_t bytes) {
  if (unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    write_text("/proc/self/setgroups", "deny");
    if (!write_text("/proc/self/uid_map", str(uid, " ", uid, " 1\n")) ||
        !write_text("/proc/self/gid_map", str(gid, " ", gid, " 1\n"))) {
      return false;
    }
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  return mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
               str("size=", bytes, ",mode=1777").c_str()) == 0;
}

// Runs `world` ranks of `body` with a /dev/shm of `bytes`. Returns the failures ("" when every
// rank succeeded), or skips the test.
std::string run_with_small_shm(size_t bytes, int world,
                               const std::function<void(const testing::RankContext&)>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (!enter_small_shm(bytes)) _exit(kSkip);
    const auto results = testing::run_ranks(world, body, std::chrono::seconds(60));
    std::string failures;
    for (const testing::RankResult& result : results) {
      if (result.exit_code == 0 && result.signal == 0) continue;
      failures +=
          str("\n  rank ", result.rank, ": exit ", result.exit_code, ", signal ", result.signal,
              result.signal ? str(" (", strsignal(result.signal), ")") : "", ": ", result.message);
    }
    if (!testing::shm_entries("shmccl.").empty()) {
      failures += "\n  left in /dev/shm: " + testing::shm_entries("shmccl.").front();
    }
    [[maybe_unused]] ssize_t n = write(fds[1], failures.data(), failures.size());
    _exit(0);
  }
  close(fds[1]);
  std::string failures;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0)
    failures.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kSkip) return "skip";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the namespace process failed";
  return failures;
}

// Runs `call`, requires an OutOfMemoryError that names /dev/shm.
template <typename Call>
void require_shm_full_error(Call&& call, const std::string& also) {
  try {
    call();
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    require(text.find("/dev/shm") != std::string::npos, "error does not name /dev/shm: " + text);
    require(text.find(also) != std::string::npos, "error lacks '" + also + "': " + text);
    return;
  } catch (const std::exception& error) {
    throw testing::RequirementFailed(str("not an OutOfMemoryError: ", error.what()));
  }
  throw testing::RequirementFailed("no error with a full /dev/shm");
}

TEST(ShmFull, ATinyDevShmFailsInitOnEveryRankWithAClearError) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    const std::string failures =
        run_with_small_shm(256 * 1024, world, [](const testing::RankContext& ctx) {
          require_shm_full_error([&] { ctx.init(/*timeout_ms=*/5000); }, "No space left on device");
          require(!is_initialized(), "initialized anyway");
        });
    if (failures == "skip")
      GTEST_SKIP() << "no private mount namespace here (needs root or userns)";
    EXPECT_EQ(failures, "");
  }
}

TEST(ShmFull, ASubGroupThatDoesNotFitFailsOnEveryMemberAndTheWorldGoesOn) {
  for (int world : {2, 3, 4, 8}) {
    SCOPED_TRACE(str(world, " ranks"));
    // Room for the job's store and the default group's control block, not for a second block.
    const size_t bytes = page_round(transport::ShmStore::segment_size()) +
                         transport::control_block_segment_bytes(world) + 16 * 1024;
    const std::string failures =
        run_with_small_shm(bytes, world, [](const testing::RankContext& ctx) {
          ctx.init(/*timeout_ms=*/5000);
          Tensor t = ones({1000}, kFloat32);
          all_reduce(t);
          std::vector<int> everyone;
          for (int r = 0; r < ctx.world; ++r)
            everyone.push_back(r);
          // Rank 0 cannot create the block; the others hear it from the store at once (no
          // timeout).
          const auto start = std::chrono::steady_clock::now();
          require_shm_full_error([&] { new_group(everyone); }, ctx.rank == 0
                                                                   ? "No space left on device"
                                                                   : "rank 0 could not create");
          require(std::chrono::steady_clock::now() - start < std::chrono::seconds(3),
                  "the error took a timeout to arrive");
          all_reduce(t);  // the default group is unaffected
          require(t.to_vector<float>()[0] == static_cast<float>(ctx.world * ctx.world),
                  "wrong result after the failed new_group");
        });
    if (failures == "skip")
      GTEST_SKIP() << "no private mount namespace here (needs root or userns)";
    EXPECT_EQ(failures, "");
  }
}

}  // namespace
}  // namespace shmccl
