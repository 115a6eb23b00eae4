// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <sstream>

#include "shmccl/shmccl.hpp"

// A sanitizer's allocator aborts the process on an allocation it cannot make; the library's
// answer to one (an OutOfMemoryError) is what TensorTest.FromfileOfAFileTooLargeForMemoryClosesIt
// tests, so in sanitizer builds the allocators return null instead, as the system's does.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}
extern "C" const char* __tsan_default_options() {
  return "allocator_may_return_null=1";
}

namespace shmccl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TensorTest, FactoriesHaveShapeDtypeAndValues) {
  Tensor z = zeros({2, 3}, kInt32);
  EXPECT_EQ(z.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(z.dtype(), kInt32);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes(), 24u);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_THAT(z.to_vector<int32_t>(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(ones({3}, kInt64).to_vector<int64_t>(), ElementsAre(1, 1, 1));
  EXPECT_THAT(full({2}, 2.5, kFloat32).to_vector<float>(), ElementsAre(2.5f, 2.5f));
  EXPECT_THAT(arange(4, kInt16).to_vector<int16_t>(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(from_vector<int32_t>({1, 2}).to_vector<int32_t>(), ElementsAre(1, 2));
  EXPECT_THAT(from_vector(std::vector<bool>{true, false}).to_vector<bool>(),
              ElementsAre(true, false));
}

TEST(TensorTest, EveryDtypeRoundTripsThroughTheNpu) {
  npu::set_device(0);
  for (int i = 0; i < kNumScalarTypes; ++i) {
    const auto dtype = static_cast<ScalarType>(i);
    Tensor host = arange(7, dtype == kBool ? kInt64 : dtype);
    if (dtype == kBool) host = host.to(kBool);
    Tensor device = host.npu();
    EXPECT_EQ(device.device(), Device::npu(0)) << dtype;
    EXPECT_EQ(device.dtype(), dtype);
    EXPECT_TRUE(equal(device.cpu(), host)) << dtype;
  }
}

TEST(TensorTest, CastsRoundToNearestEven) {
  Tensor values = from_vector<float>({1.0f, 1.00048828125f, 1.001953125f, 65520.0f, -0.0f});
  std::vector<Half> halves = values.to(kFloat16).to_vector<Half>();
  EXPECT_EQ(halves[0].x, 0x3C00);
  EXPECT_EQ(halves[1].x, 0x3C00);  // exactly between 1 and 1+2^-10: ties to even
  EXPECT_EQ(halves[2].x, 0x3C02);
  EXPECT_EQ(halves[3].x, 0x7C00);  // overflows to infinity
  EXPECT_EQ(halves[4].x, 0x8000);
  Tensor truncated = from_vector<double>({2.9, -2.9}).to(kInt32);
  EXPECT_THAT(truncated.to_vector<int32_t>(), ElementsAre(2, -2));
}

TEST(TensorTest, NarrowAndReshapeShareStorage) {
  Tensor base = arange(12, kInt32).reshape({4, 3});
  Tensor rows = base.narrow(0, 1, 2);
  EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(rows.to_vector<int32_t>(), ElementsAre(3, 4, 5, 6, 7, 8));
  rows.fill_(-1);
  EXPECT_THAT(base.to_vector<int32_t>(), ElementsAre(0, 1, 2, -1, -1, -1, -1, -1, -1, 9, 10, 11));
  EXPECT_TRUE(rows.is_alias_of(base));
  EXPECT_EQ(base.reshape({-1}).sizes(), (std::vector<int64_t>{12}));
  EXPECT_EQ(base.view({2, -1}).sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_THAT(base[3].to_vector<int32_t>(), ElementsAre(9, 10, 11));
  EXPECT_EQ(base.slice(0, 2, 4).size(0), 2);
}

TEST(TensorTest, BadShapesAndIndicesAreClearErrors) {
  Tensor t = zeros({4, 3});
  EXPECT_THAT(
      [&] {
        t.reshape({5, 3});
      },
      testing::ThrowsMessage<InvalidArgument>(HasSubstr("shape [5, 3] is invalid")));
  EXPECT_THROW(t.narrow(0, 3, 2), InvalidArgument);
  EXPECT_THROW(t.narrow(1, 0, 1), InvalidArgument);
  // A huge length or start ("to the end") used to overflow start + length and pass: a view far
  // past, or before, its storage.
  const Tensor rows = zeros({4}, kFloat32);
  EXPECT_THAT([&] { rows.narrow(0, 1, INT64_MAX); },
              testing::ThrowsMessage<InvalidArgument>(HasSubstr("is out of range for dim 0")));
  EXPECT_THROW(rows.narrow(0, INT64_MAX, 1), InvalidArgument);
  EXPECT_EQ(rows.narrow(0, 4, 0).numel(), 0);
  // from_vector's values must fill the shape: 3 values are not a [2, 3] tensor (it used to read
  // 12 bytes past them), nor a [1] one.
  EXPECT_THAT(
      [] {
        from_vector<float>({1, 2, 3}, {2, 3});
      },
      testing::ThrowsMessage<InvalidArgument>(
          HasSubstr("3 values do not fill a tensor of shape [2, 3] (6 elements)")));
  EXPECT_THROW(from_vector<float>({1, 2, 3}, {1}), InvalidArgument);
  EXPECT_THROW(from_vector(std::vector<bool>{true}, {2}), InvalidArgument);
  EXPECT_EQ(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT([&] { t.size(2); }, testing::ThrowsMessage<InvalidArgument>(
                                      HasSubstr("dimension 2 out of range for a tensor of shape")));
  EXPECT_THAT([&] { t.size(-3); },
              testing::ThrowsMessage<InvalidArgument>(HasSubstr("dimension -3 out of range")));
  EXPECT_EQ(t.size(-1), t.size(t.dim() - 1));
  EXPECT_THROW(zeros({-1}), InvalidArgument);
  // Sizes whose element or byte count overflows: an error, not a tensor that wrapped around.
  EXPECT_THAT([] { empty({int64_t{1} << 62}, kFloat64, Device::npu(0)); },
              testing::ThrowsMessage<InvalidArgument>(HasSubstr("more bytes than an int64_t")));
  EXPECT_THAT(
      [] {
        empty({int64_t{1} << 40, int64_t{1} << 40});
      },
      testing::ThrowsMessage<InvalidArgument>(HasSubstr("more elements than an int64_t")));
  EXPECT_THAT(
      [] {
        rand({int64_t{1} << 32, int64_t{1} << 32}, 1);
      },
      testing::ThrowsMessage<InvalidArgument>(HasSubstr("more elements than an int64_t")));
  EXPECT_THAT([&] { t.to_vector<int32_t>(); },
              testing::ThrowsMessage<InvalidArgument>(HasSubstr("does not match")));
  EXPECT_THAT([] { npu::set_device(99); },
              testing::ThrowsMessage<InvalidArgument>(HasSubstr("invalid NPU device 99")));
  EXPECT_THROW(Device::parse("gpu:0"), InvalidArgument);
  EXPECT_EQ(Device::parse("npu:3"), Device::npu(3));
}

TEST(TensorTest, ElementwiseArithmeticOnNpu) {
  npu::set_device(1);
  Tensor a = from_vector<float>({1, 2, 3}).npu();
  Tensor b = from_vector<float>({4, 5, 6}).npu();
  EXPECT_EQ(a.device(), Device::npu(1));
  EXPECT_THAT((a + b).cpu().to_vector<float>(), ElementsAre(5, 7, 9));
  EXPECT_THAT((b - a).cpu().to_vector<float>(), ElementsAre(3, 3, 3));
  EXPECT_THAT((a * b).cpu().to_vector<float>(), ElementsAre(4, 10, 18));
  EXPECT_THAT(maximum(a, b).cpu().to_vector<float>(), ElementsAre(4, 5, 6));
  a.add_(b);
  EXPECT_THAT(a.cpu().to_vector<float>(), ElementsAre(5, 7, 9));
  EXPECT_THROW(add(a, b.cpu()), InvalidArgument);
  EXPECT_THROW(add(a, zeros({2}).npu()), InvalidArgument);
  npu::set_device(0);
}

TEST(TensorTest, SeededRandomIsReproducibleAndPlausible) {
  Tensor u1 = rand({10000}, 42);
  Tensor u2 = rand({10000}, 42);
  EXPECT_TRUE(equal(u1, u2));
  EXPECT_FALSE(equal(u1, rand({10000}, 43)));
  double sum = 0, lowest = 1, highest = 0;
  for (float v : u1.to_vector<float>()) {
    sum += v;
    lowest = std::min<double>(lowest, v);
    highest = std::max<double>(highest, v);
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  EXPECT_GE(lowest, 0.0);
  EXPECT_LT(highest, 1.0);
  double mean = 0, square = 0;
  for (double v : randn({20000}, 7, kFloat64).to_vector<double>()) {
    mean += v;
    square += v * v;
  }
  mean /= 20000;
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(square / 20000 - mean * mean, 1, 0.05);
}

TEST(TensorTest, AllcloseAndEqual) {
  Tensor a = from_vector<float>({1, 2, NAN});
  Tensor b = from_vector<float>({1, 2.00001f, NAN});
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(allclose(a, b, 1e-4, 0, /*equal_nan=*/true));
  EXPECT_FALSE(allclose(a, from_vector<float>({1, 2.1f, NAN}), 1e-3, 0, true));
  // An infinity is close to itself only: atol + rtol * inf would let any value pass.
  const Tensor inf = from_vector<float>({INFINITY});
  EXPECT_TRUE(allclose(inf, inf));
  EXPECT_FALSE(allclose(from_vector<float>({5}), inf));
  EXPECT_FALSE(allclose(inf, from_vector<float>({5})));
  EXPECT_FALSE(allclose(from_vector<float>({-INFINITY}), inf));
  EXPECT_TRUE(equal(arange(5), arange(5)));
  EXPECT_FALSE(equal(arange(5), arange(5, kInt32)));
  EXPECT_DOUBLE_EQ(max_abs_diff(from_vector<double>({1, 5}), from_vector<double>({2, 3})), 2.0);
}

TEST(TensorTest, PrintsLikeTorch) {
  npu::set_device(0);
  std::ostringstream out;
  out << from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}).npu();
  EXPECT_EQ(out.str(),
            "tensor([[1, 2, 3],\n        [4, 5, 6]], device='npu:0', dtype=int32, size=[2, 3])");
  EXPECT_EQ(from_vector<float>({1.5f, 2}).str(), "tensor([1.5000, 2.0000], dtype=float32)");
  EXPECT_THAT(arange(5000).str(), HasSubstr("..."));
  EXPECT_EQ(from_vector<float>({3, -2}).str(), "tensor([3., -2.], dtype=float32)");
  // Whole numbers past an int64_t print in full, not as a wrapped integer; int64 values past
  // 2^53 as they are, not rounded through a double.
  EXPECT_EQ(from_vector<double>({1e20}).str(),
            "tensor([100000000000000000000.0000], dtype=float64)");
  EXPECT_EQ(from_vector<int64_t>({(int64_t{1} << 53) + 1}).str(),
            "tensor([9007199254740993], dtype=int64)");
}

TEST(TensorTest, TofileFromfileRoundTrip) {
  char path[] = "/tmp/shmccl_tensor_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  Tensor original = randn({4, 5}, 1, kBFloat16);
  original.tofile(path);
  Tensor loaded = fromfile(path, kBFloat16, {4, 5});
  EXPECT_TRUE(equal(original, loaded));
  EXPECT_THROW(fromfile(path, kFloat32, {3, 3}), InvalidArgument);  // 10 floats, not 9
  // Checked before the file's size is divided by the element size (0 for an invalid dtype).
  try {
    fromfile(path, static_cast<ScalarType>(99), {-1});
    ADD_FAILURE() << "fromfile took dtype 99";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("fromfile: invalid dtype 99"), std::string::npos)
        << error.what();
  }
  std::remove(path);
}

size_t open_descriptors() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator{}));
}

// A file too large for the host's memory (8 TiB, sparse): fromfile throws and keeps no descriptor.
TEST(TensorTest, FromfileOfAFileTooLargeForMemoryClosesIt) {
  char path[] = "/tmp/shmccl_tensor_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{1} << 43), 0);
  close(fd);
  const size_t before = open_descriptors();
  EXPECT_THROW(fromfile(path, kFloat32, {-1}), Error);
  EXPECT_EQ(open_descriptors(), before);
  std::remove(path);
}

TEST(TensorTest, DeviceToDeviceCopiesAcrossNpus) {
  Tensor on0 = arange(1000, kFloat32, Device::npu(0));
  Tensor on1 = on0.to(Device::npu(1));
  EXPECT_EQ(on1.device(), Device::npu(1));
  EXPECT_TRUE(equal(on1.cpu(), arange(1000, kFloat32)));
  Tensor cast = on0.to(kBFloat16);
  EXPECT_EQ(cast.device(), Device::npu(0));
  EXPECT_TRUE(allclose(cast, on0, 1e-2, 0));
}

}  // namespace
}  // namespace shmccl

namespace shmccl {
namespace {

TEST(TensorTest, NonBlockingCopiesRunInStreamOrder) {
  npu::set_device(0);
  Tensor host = arange(100000, kFloat32);
  Tensor device = empty({100000}, kFloat32, Device::npu(0));
  device.copy_(host, /*non_blocking=*/true);
  device.add_(device);  // queued after the copy
  Tensor back = empty({100000}, kFloat32);
  back.copy_(device, /*non_blocking=*/true);
  npu::synchronize(0);
  EXPECT_TRUE(equal(back, arange(100000, kFloat32) + arange(100000, kFloat32)));
}

// c10d's RedOpType numbers (SUM 0, AVG 1, PRODUCT 2, MIN 3, MAX 4): an integer from torch
// converts to the same reduction.
TEST(ReduceOpTest, ValuesAreC10dsAndNamesFollow) {
  const std::pair<int, const char*> c10d[] = {
      {0, "sum"}, {1, "avg"}, {2, "product"}, {3, "min"}, {4, "max"}};
  for (const auto& [value, name] : c10d)
    EXPECT_STREQ(reduce_op_name(static_cast<ReduceOp>(value)), name) << value;
  EXPECT_STREQ(reduce_op_name(static_cast<ReduceOp>(5)), "invalid");  // c10d's BAND: not ours
}

}  // namespace
}  // namespace shmccl
