// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// End to end: which simulated NPUs each rank sees. ASCEND_RT_VISIBLE_DEVICES as the device layer
// reads it (device_count, physical_device, a malformed list), and shmrun's --virtual-local-rank,
// which gives each rank one device as device 0 with LOCAL_RANK=0. Real shmccl ranks run
// collectives on NPU tensors under both.
#include <cstdio>
#include <map>
#include <sstream>

#include "shmrun_harness.h"

namespace shmccl::launcher::testing {
namespace {

const std::string kShmcclWorker = SHMCCL_BINARY_DIR "/tests/launcher/launcher_shmccl_worker";

struct SeenDevices {
  int local_rank = -1;
  int count = -1;
  int physical = -1;
  bool collectives_ok = false;
};

// rank -> what `shmccl_worker devices` printed.
std::map<int, SeenDevices> parse_devices(const std::string& out) {
  std::map<int, SeenDevices> by_rank;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int prefix = -1, rank = -1;
    SeenDevices seen;
    if (std::sscanf(line.c_str(), "[rank%d]:devices rank=%d local_rank=%d count=%d physical=%d",
                    &prefix, &rank, &seen.local_rank, &seen.count, &seen.physical) == 5) {
      seen.collectives_ok = by_rank[rank].collectives_ok;
      by_rank[rank] = seen;
    } else if (std::sscanf(line.c_str(), "[rank%d]:ok rank=%d", &prefix, &rank) == 2) {
      by_rank[rank].collectives_ok = true;
    }
  }
  return by_rank;
}

// shmrun refused the launch (exit 2) with `message` on stderr, before any rank started.
void expect_refused(const std::vector<std::string>& args, const std::string& visible_devices,
                    const std::string& message) {
  const RunResult result = run_shmrun(args, {"ASCEND_RT_VISIBLE_DEVICES=" + visible_devices});
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  EXPECT_EQ(result.out.find("[rank"), std::string::npos) << result.out;
}

// Each rank's ASCEND_RT_VISIBLE_DEVICES, from the "[rankN]:NAME=value" lines of `test_worker env`.
std::vector<std::string> visible_devices_by_rank(const RunResult& result) {
  std::vector<std::string> devices;
  for (const auto& [rank, vars] : parse_env(result.out))
    devices.push_back(vars.at("ASCEND_RT_VISIBLE_DEVICES"));
  return devices;
}

class VirtualLocalRankTest : public ::testing::TestWithParam<int> {};

// Each rank sees one NPU, its own, as device 0, and the collectives between them (zero-copy,
// each rank reading its peers' device memory) work as with every device visible.
TEST_P(VirtualLocalRankTest, EachRankSeesItsOwnDeviceAsDeviceZero) {
  const int world = GetParam();
  const RunResult result = run_shmrun({"-v", "--virtual-local-rank", "--nproc-per-node",
                                       std::to_string(world), kShmcclWorker, "devices"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto seen = parse_devices(result.out);
  ASSERT_EQ(seen.size(), static_cast<size_t>(world)) << result.out;
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(seen.at(rank).local_rank, 0) << "rank " << rank;
    EXPECT_EQ(seen.at(rank).count, 1) << "rank " << rank;
    EXPECT_EQ(seen.at(rank).physical, rank) << "rank " << rank;
    EXPECT_TRUE(seen.at(rank).collectives_ok) << "rank " << rank << "\n" << result.out;
  }
  expect_shm_clean(namespaces(result.err));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, VirtualLocalRankTest, ::testing::Values(2, 3, 4, 8));

// As torchrun maps CUDA_VISIBLE_DEVICES: rank r gets the r-th entry of the inherited list; the
// other variables are those of any launch.
TEST(VirtualLocalRank, RanksTakeTheirEntryOfTheInheritedList) {
  const RunResult result =
      run_shmrun({"--virtual-local-rank", "--nproc-per-node", "3", kWorker, "env"},
                 {"ASCEND_RT_VISIBLE_DEVICES=6, 4,2,7"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(visible_devices_by_rank(result), (std::vector<std::string>{"6", "4", "2"}))
      << result.out;
  const auto env = parse_env(result.out);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(env.at(rank).at("LOCAL_RANK"), "0");
    EXPECT_EQ(env.at(rank).at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at(rank).at("LOCAL_WORLD_SIZE"), "3");
  }
}

// More ranks than the host's simulated devices share them, as `rank % device_count()` does.
TEST(VirtualLocalRank, MoreRanksThanDevicesShareThem) {
  const RunResult result =
      run_shmrun({"--virtual-local-rank", "--nproc-per-node", "3", kShmcclWorker, "devices"},
                 {"SHMCCL_NPU_DEVICE_COUNT=2"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto seen = parse_devices(result.out);
  ASSERT_EQ(seen.size(), 3u) << result.out;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(seen.at(rank).physical, rank % 2) << "rank " << rank;
    EXPECT_TRUE(seen.at(rank).collectives_ok) << "rank " << rank;
  }
}

// A list that cannot give every rank a device stops the launch before any rank starts.
TEST(VirtualLocalRank, AListThatCannotServeEveryRankIsRefusedBeforeAnyRankStarts) {
  expect_refused({"--virtual-local-rank", "--nproc-per-node", "3", kWorker, "env"}, "0,1",
                 "--virtual-local-rank: local rank 2 has no device: "
                 "ASCEND_RT_VISIBLE_DEVICES=0,1 lists 2 for 3 ranks");
  expect_refused({"--virtual-local-rank", kWorker, "env"}, "0,x",
                 "--virtual-local-rank: ASCEND_RT_VISIBLE_DEVICES='0,x': 'x' is not a device "
                 "index");
}

// `--nproc-per-node npu`: one rank per simulated NPU that shmrun sees, which with
// --virtual-local-rank gives each NPU its rank.
TEST(NprocPerNodeNpu, StartsOneRankPerVisibleDevice) {
  const RunResult all =
      run_shmrun({"--nproc-per-node", "npu", kWorker, "env"}, {"SHMCCL_NPU_DEVICE_COUNT=3"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(parse_env(all.out).size(), 3u) << all.out;
  const RunResult listed =
      run_shmrun({"--nproc-per-node", "npu", "--virtual-local-rank", kWorker, "env"},
                 {"ASCEND_RT_VISIBLE_DEVICES=4,1"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(visible_devices_by_rank(listed), (std::vector<std::string>{"4", "1"})) << listed.out;
  expect_refused({"--nproc-per-node", "npu", kWorker, "env"}, "2,2",
                 "--nproc-per-node npu: ASCEND_RT_VISIBLE_DEVICES='2,2': device 2 is listed "
                 "twice");
}

// Without --virtual-local-rank the list passes to every rank unchanged, and each sees the listed
// devices in order.
TEST(VisibleDevices, EveryRankSeesTheListedDevicesInOrder) {
  const RunResult result = run_shmrun({"--nproc-per-node", "2", kShmcclWorker, "devices"},
                                      {"ASCEND_RT_VISIBLE_DEVICES=5,3"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto seen = parse_devices(result.out);
  ASSERT_EQ(seen.size(), 2u) << result.out;
  EXPECT_EQ(seen.at(0).local_rank, 0);
  EXPECT_EQ(seen.at(1).local_rank, 1);
  EXPECT_EQ(seen.at(0).count, 2);
  EXPECT_EQ(seen.at(0).physical, 5);
  EXPECT_EQ(seen.at(1).physical, 3);
  EXPECT_TRUE(seen.at(0).collectives_ok && seen.at(1).collectives_ok) << result.out;
}

// A malformed list is an error at the rank's first device call, naming the variable and entry.
TEST(VisibleDevices, AMalformedListIsAnErrorAtTheFirstDeviceCall) {
  const RunResult result =
      run_shmrun({kShmcclWorker, "devices"}, {"ASCEND_RT_VISIBLE_DEVICES=0,9"});
  EXPECT_EQ(result.exit_code, 3) << result.out << result.err;
  EXPECT_NE(result.out.find("error: ASCEND_RT_VISIBLE_DEVICES='0,9': device 9 does not exist (8 "
                            "simulated devices, 0 to 7: SHMCCL_NPU_DEVICE_COUNT)"),
            std::string::npos)
      << result.out;
}

}  // namespace
}  // namespace shmccl::launcher::testing
