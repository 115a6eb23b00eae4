// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The writing side of the error file (shmccl/elastic.hpp); the terminate handler's path is tested
// end to end under shmrun (launcher/shmrun_error_file_test.cc).
#include "core/error_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/json.h"
#include "shmccl/elastic.hpp"
#include "shmccl/error.hpp"

namespace shmccl::elastic {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// TORCHELASTIC_ERROR_FILE pointing at a fresh path for the test's length.
class RecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/error_file_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/error.json";
    setenv(detail::kErrorFileVariable, path_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv(detail::kErrorFileVariable);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(RecordTest, RecordWritesTorchsLayoutAndRethrows) {
  EXPECT_THROW(record([]() -> int { throw RemoteError("rank 3 died"); }), RemoteError);
  const auto file = json::parse(read_all(path_));
  ASSERT_TRUE(file && file->is_object()) << read_all(path_);
  const json::Value* message = file->find("message");
  ASSERT_TRUE(message != nullptr && message->is_object());
  EXPECT_EQ(message->find("message")->string, "shmccl::RemoteError: rank 3 died");
  const json::Value* extra = message->find("extraInfo");
  ASSERT_TRUE(extra != nullptr);
  EXPECT_EQ(extra->find("py_callstack")->string, "shmccl::RemoteError: rank 3 died");
  EXPECT_TRUE(extra->find("timestamp")->is_string());
  EXPECT_EQ(record([] { return 7; }), 7) << "a body that returns passes its value through";
}

TEST_F(RecordTest, AnythingThrownIsDescribed) {
  EXPECT_TRUE(record_exception(std::make_exception_ptr(std::out_of_range("index 9"))));
  EXPECT_NE(read_all(path_).find("\"std::out_of_range: index 9\""), std::string::npos);
  EXPECT_TRUE(record_exception(std::make_exception_ptr(42)));
  EXPECT_NE(read_all(path_).find("\"int (not a std::exception)\""), std::string::npos);
  EXPECT_FALSE(record_exception(nullptr));
}

TEST(RecordWithoutAFile, NothingIsWrittenWithoutTheVariableOrADirectory) {
  unsetenv(detail::kErrorFileVariable);
  EXPECT_FALSE(record_exception(std::make_exception_ptr(Error("x"))));
  setenv(detail::kErrorFileVariable, "/nonexistent/dir/error.json", 1);
  EXPECT_FALSE(record_exception(std::make_exception_ptr(Error("x"))));
  unsetenv(detail::kErrorFileVariable);
}

}  // namespace
}  // namespace shmccl::elastic
