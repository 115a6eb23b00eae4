// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Reading settings from the environment: every kind takes the spaces a shell script may leave
// around a value, sizes reach 2^64 - 1 without wrapping, and SHMCCL_DEBUG_SUBSYS takes spaces
// after its commas.
#include "core/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/logging.h"

namespace shmccl {
namespace {

// Sets `name` to `value` for one test, then takes it back.
class ScopedSetting {
 public:
  ScopedSetting(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
    config::reload();
    log::reload();
  }
  ~ScopedSetting() {
    unsetenv(name_);
    config::reload();
    log::reload();
  }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  const char* name_;
};

TEST(Config, EveryKindTakesSpacesAroundItsValue) {
  {
    const ScopedSetting count("SHMCCL_NPU_DEVICE_COUNT", " 4 ");
    EXPECT_EQ(config::get_int("SHMCCL_NPU_DEVICE_COUNT"), 4);
  }
  {
    const ScopedSetting caching("SHMCCL_NPU_CACHING_ALLOCATOR", "0 ");
    EXPECT_FALSE(config::get_bool("SHMCCL_NPU_CACHING_ALLOCATOR"));
  }
  {
    const ScopedSetting memory("SHMCCL_NPU_MEMORY", " 1.5G ");
    EXPECT_EQ(config::get_bytes("SHMCCL_NPU_MEMORY"), uint64_t{3} << 29);
  }
}

// 9,000,000 TiB is about 9.9e18 bytes: below 2^64, above 2^63, where llround's long long ended
// and the value came back as 2^63. From 2^64 on a size is refused.
TEST(Config, SizesUpTo2To64AreReadExactly) {
  uint64_t bytes = 0;
  ASSERT_TRUE(config::parse_bytes("9000000T", &bytes));
  EXPECT_EQ(bytes, uint64_t{9000000} << 40);
  EXPECT_FALSE(config::parse_bytes("16777216T", &bytes));  // 2^64
  EXPECT_TRUE(config::parse_bytes("0", &bytes));
  EXPECT_EQ(bytes, 0u);
}

TEST(Config, DebugSubsystemsTakeSpacesAfterTheirCommas) {
  const ScopedSetting level("SHMCCL_DEBUG", "INFO");
  const ScopedSetting subsystems("SHMCCL_DEBUG_SUBSYS", "COLL, SHM");
  EXPECT_TRUE(log::enabled(log::Level::kInfo, log::kColl));
  EXPECT_TRUE(log::enabled(log::Level::kInfo, log::kShm));
  EXPECT_FALSE(log::enabled(log::Level::kInfo, log::kLaunch));
}

// A setting kept for a hot path follows reload() (tests change settings between cases), and only
// reload(): between two, it keeps the value it read.
TEST(Config, ACachedSettingIsReadAgainAfterAReloadOnly) {
  static config::CachedSetting<int64_t, config::get_int> ranks("SHMCCL_PULL_BROADCAST_RANKS");
  const uint64_t generation = config::generation();
  {
    const ScopedSetting five("SHMCCL_PULL_BROADCAST_RANKS", "5");
    EXPECT_GT(config::generation(), generation);
    EXPECT_EQ(ranks.get(), 5);
    setenv("SHMCCL_PULL_BROADCAST_RANKS", "7", 1);  // no reload: still 5
    EXPECT_EQ(ranks.get(), 5);
    config::reload();
    EXPECT_EQ(ranks.get(), 7);
  }
  EXPECT_EQ(ranks.get(), config::get_int("SHMCCL_PULL_BROADCAST_RANKS"));  // the default again
  EXPECT_NE(ranks.get(), 7);
}

}  // namespace
}  // namespace shmccl
