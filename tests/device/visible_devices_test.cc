// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// ASCEND_RT_VISIBLE_DEVICES as the simulated NPU reads it. What a process then sees
// (device_count, physical_device, a malformed list at the first device call) is tested in fresh
// processes under shmrun: launcher/shmrun_env_test.cc.
#include "device/visible_devices.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shmccl/error.hpp"

namespace shmccl::device {
namespace {

TEST(VisibleDevices, ListsPhysicalIndicesInOrder) {
  EXPECT_EQ(parse_visible_devices("5,3", 8), (std::vector<int>{5, 3}));
  EXPECT_EQ(parse_visible_devices(" 0 , 7 ,2", 8), (std::vector<int>{0, 7, 2}));
  EXPECT_EQ(parse_visible_devices("63", 64), std::vector<int>{63});
}

TEST(VisibleDevices, AMalformedListIsNamedWithTheEntryAtFault) {
  for (const auto& [value, expected] :
       {std::pair{"", "ASCEND_RT_VISIBLE_DEVICES='' lists no device, so no NPU is visible"},
        std::pair{" ", "lists no device"},
        std::pair{"0,x", "ASCEND_RT_VISIBLE_DEVICES='0,x': 'x' is not a device index"},
        std::pair{"0,,1", "'' is not a device index"}, std::pair{"1,", "'' is not a device index"},
        std::pair{"-1", "device -1 does not exist"},
        std::pair{"1.5", "'1.5' is not a device index"},
        std::pair{"0,8",
                  "ASCEND_RT_VISIBLE_DEVICES='0,8': device 8 does not exist (8 simulated "
                  "devices, 0 to 7: SHMCCL_NPU_DEVICE_COUNT)"},
        std::pair{"2,1,2", "ASCEND_RT_VISIBLE_DEVICES='2,1,2': device 2 is listed twice"}}) {
    try {
      parse_visible_devices(value, 8);
      ADD_FAILURE() << "'" << value << "' was taken";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace shmccl::device
