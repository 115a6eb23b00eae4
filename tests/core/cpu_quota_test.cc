// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// cpu_quota() reads the cgroup CPU limit as the kernel lays it out: trees of /proc/self/cgroup,
// /proc/self/mountinfo and cgroup files made under a temporary directory, for cgroup v2 and v1,
// with and without a cgroup namespace, limits on the process's cgroup and on its parents.
#include "core/cpu_quota.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace shmccl::detail {
namespace {

class CpuQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("cpu_quota_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Writes `text` to `path` under the fake root.
  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path file = root_ / path.substr(1);
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  double quota() const { return cpu_quota(root_.string()); }

  std::filesystem::path root_;
};

constexpr const char* kV2Mount = "30 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
constexpr const char* kV1Mounts =
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "32 30 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";

TEST_F(CpuQuotaTest, V2LimitOfTheProcessCgroup) {
  write("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  write("/proc/self/mountinfo", kV2Mount);
  write("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "200000 100000\n");
  EXPECT_DOUBLE_EQ(quota(), 2.0);
}

TEST_F(CpuQuotaTest, V2TightestLimitOnThePathUp) {
  write("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  write("/proc/self/mountinfo", kV2Mount);
  write("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
  write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000\n");
  write("/sys/fs/cgroup/kubepods/cpu.max", "400000 100000\n");
  EXPECT_DOUBLE_EQ(quota(), 1.5);
}

TEST_F(CpuQuotaTest, V2WithoutALimit) {
  write("/proc/self/cgroup", "0::/user.slice\n");
  write("/proc/self/mountinfo", kV2Mount);
  write("/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  EXPECT_EQ(quota(), 0.0);
}

// A container with its own cgroup namespace sees its cgroup as "/" and the mount's top directory.
TEST_F(CpuQuotaTest, V2InACgroupNamespace) {
  write("/proc/self/cgroup", "0::/\n");
  write("/proc/self/mountinfo", kV2Mount);
  write("/sys/fs/cgroup/cpu.max", "50000 100000\n");
  EXPECT_DOUBLE_EQ(quota(), 0.5);
}

// Without one (older Docker), /proc/self/cgroup names the full path while the mount shows only
// the container's cgroup, as its top directory.
TEST_F(CpuQuotaTest, V1ContainerWithoutACgroupNamespace) {
  write("/proc/self/cgroup",
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  write("/proc/self/mountinfo",
        "31 30 0:28 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(quota(), 3.0);
}

TEST_F(CpuQuotaTest, V1UnlimitedIsMinusOne) {
  write("/proc/self/cgroup", "4:cpu,cpuacct:/\n0::/\n");
  write("/proc/self/mountinfo", std::string(kV1Mounts) + kV2Mount);
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(quota(), 0.0);
}

// The cpu controller on v1 while v2 is mounted too (hybrid systemd hosts): v1's limit counts.
TEST_F(CpuQuotaTest, V1ControllerOfAHybridHost) {
  write("/proc/self/cgroup", "4:cpu,cpuacct:/batch/job7\n0::/batch/job7\n");
  write("/proc/self/mountinfo", std::string(kV1Mounts) + kV2Mount);
  write("/sys/fs/cgroup/cpu,cpuacct/batch/cpu.cfs_quota_us", "100000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/batch/cpu.cfs_period_us", "100000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/batch/job7/cpu.cfs_quota_us", "-1\n");
  write("/sys/fs/cgroup/cpu,cpuacct/batch/job7/cpu.cfs_period_us", "100000\n");
  write("/sys/fs/cgroup/batch/job7/cpu.max", "800000 100000\n");  // no cpu controller here
  EXPECT_DOUBLE_EQ(quota(), 1.0);
}

TEST_F(CpuQuotaTest, MountPointsWithEscapedSpaces) {
  write("/proc/self/cgroup", "0::/a\n");
  write("/proc/self/mountinfo", "30 22 0:27 / /cg\\040root rw - cgroup2 cgroup2 rw\n");
  write("/cg root/a/cpu.max", "250000 100000\n");
  EXPECT_DOUBLE_EQ(quota(), 2.5);
}

TEST_F(CpuQuotaTest, NothingToReadIsNoLimit) {
  EXPECT_EQ(quota(), 0.0);
  write("/proc/self/cgroup", "0::/a\n");  // no mount of the hierarchy
  EXPECT_EQ(quota(), 0.0);
}

}  // namespace
}  // namespace shmccl::detail
