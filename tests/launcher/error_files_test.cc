// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/error_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "core/error_file.h"

namespace shmccl::launcher {
namespace {

class ErrorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/error_files_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
  }
  void TearDown() override {
    unlink(path().c_str());
    rmdir(directory_.c_str());
  }
  void write(const std::string& text) { std::ofstream(path()) << text; }
  std::string path() const { return directory_ + "/rank0.error.json"; }
  std::string directory_;
};

TEST_F(ErrorFiles, ReadsWhatShmcclWrites) {
  write(elastic::detail::error_file_contents("E: x", "E: x\nthrown at", 1700000001));
  const auto recorded = read_error_file(path());
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->message, "E: x");
  EXPECT_EQ(recorded->traceback, "E: x\nthrown at");
  EXPECT_EQ(recorded->timestamp, 1700000001);
}

TEST_F(ErrorFiles, ReadsTorchsTwoLayoutsAndShowsAnyOtherFileAsItIs) {
  write(R"({"message": "RuntimeError: old layout", "timestamp": 1700000002})");
  auto recorded = read_error_file(path());
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->message, "RuntimeError: old layout");
  EXPECT_EQ(recorded->traceback, "RuntimeError: old layout");
  EXPECT_EQ(recorded->timestamp, 1700000002);

  write(R"({"message": {"message": "ValueError: v", "extraInfo": {"timestamp": "3"}}})");
  recorded = read_error_file(path());
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->traceback, "ValueError: v") << "no py_callstack: the message stands in";

  write("segfault in rank\n\n");
  recorded = read_error_file(path());
  ASSERT_TRUE(recorded);
  EXPECT_EQ(recorded->message, "segfault in rank");
  EXPECT_FALSE(recorded->timestamp);
}

// A rank writes the file: a timestamp no time can be is dropped, the message kept.
TEST_F(ErrorFiles, ATimestampOutOfRangeIsNoTimestamp) {
  for (const char* number : {"1e300", "-1e300", "9.3e18", "-9.3e18"}) {
    write(std::string(R"({"message": "RuntimeError: r", "timestamp": )") + number + "}");
    const auto recorded = read_error_file(path());
    ASSERT_TRUE(recorded);
    EXPECT_EQ(recorded->message, "RuntimeError: r");
    EXPECT_FALSE(recorded->timestamp) << number;
  }
  write(R"({"message": "RuntimeError: r", "timestamp": -1.5e9})");
  EXPECT_EQ(read_error_file(path())->timestamp, -1500000000);
}

TEST_F(ErrorFiles, NoFileIsNothingRecorded) {
  EXPECT_FALSE(read_error_file(path()));
}

}  // namespace
}  // namespace shmccl::launcher
