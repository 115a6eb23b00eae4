// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tensor::copy_ and the in-place ops against the streams and the memory they share: a copy
// between two NPUs is ordered on both devices' streams, and views that partly share their
// elements are refused (as torch refuses them) instead of copied in an order that decides the
// result. Streams are held with a gate task, so nothing here depends on timing.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "device/device_context.h"
#include "device/stream_impl.h"
#include "shmccl/error.hpp"
#include "shmccl/npu.hpp"
#include "shmccl/tensor.hpp"

namespace shmccl {
namespace {

// Holds `device`'s current stream until open() (or the end of the scope).
class StreamGate {
 public:
  explicit StreamGate(int device) {
    std::shared_future<void> opened = gate_.get_future().share();
    device::current_stream_impl(device).enqueue([opened] { opened.wait(); });
  }
  ~StreamGate() { open(); }
  void open() {
    if (!opened_) gate_.set_value();
    opened_ = true;
  }

 private:
  std::promise<void> gate_;
  bool opened_ = false;
};

// The copy waits on npu:1's stream; the source's next write, on npu:0's stream, must wait for it.
TEST(TensorCopyTest, ACopyBetweenNpusReadsTheSourceBeforeItsStreamWritesItAgain) {
  Tensor source = full({1 << 16}, 1, kFloat32, Device::npu(0));
  npu::synchronize(0);
  StreamGate held(1);
  Tensor copied = source.to(Device::npu(1));
  source.fill_(2);
  held.open();
  npu::synchronize(0);
  npu::synchronize(1);
  EXPECT_TRUE(equal(copied.cpu(), full({1 << 16}, 1, kFloat32)));
  EXPECT_TRUE(equal(source.cpu(), full({1 << 16}, 2, kFloat32)));
}

TEST(TensorCopyTest, ACopyBetweenNpusWaitsForTheSourcesPendingWrites) {
  Tensor source = full({1 << 16}, 1, kFloat32, Device::npu(0));
  npu::synchronize(0);
  Tensor copied = empty({1 << 16}, kFloat32, Device::npu(1));
  {
    StreamGate held(0);
    source.fill_(3);
    copied.copy_(source);
  }
  npu::synchronize(1);
  EXPECT_TRUE(equal(copied.cpu(), full({1 << 16}, 3, kFloat32)));
}

// The copy runs on the destination's stream, after the writes queued there: a copy run on the
// source's stream would land before the pending fill and be overwritten by it.
TEST(TensorCopyTest, ACopyBetweenNpusComesAfterTheDestinationsPendingWrites) {
  Tensor source = full({1 << 16}, 5, kFloat32, Device::npu(0));
  Tensor copied = zeros({1 << 16}, kFloat32, Device::npu(1));
  npu::synchronize(0);
  npu::synchronize(1);
  {
    StreamGate held(1);
    copied.fill_(9);
    copied.copy_(source);
  }
  npu::synchronize(0);
  npu::synchronize(1);
  EXPECT_TRUE(equal(copied.cpu(), full({1 << 16}, 5, kFloat32)));
}

// A large copy goes through streaming stores front to back; a view shifted by one element would
// repeat the first one. torch refuses it; so do we, naming the bytes.
TEST(TensorCopyTest, PartlyOverlappingViewsAreRefused) {
  for (Device device : {Device::cpu(), Device::npu(0)}) {
    SCOPED_TRACE(device.str());
    Tensor t = arange(1000, kFloat32, device);
    try {
      t.narrow(0, 1, 999).copy_(t.narrow(0, 0, 999));
      FAIL() << "a partly overlapping copy_ ran";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what())
                    .find("copy_(): some elements of the input tensor and "
                          "the written-to tensor refer to a single memory "
                          "location (bytes [0, 3996) and [4, 4000)"),
                std::string::npos)
          << error.what();
    }
    EXPECT_THROW(t.narrow(0, 0, 999).add_(t.narrow(0, 1, 999)), InvalidArgument);
    EXPECT_THROW(t.narrow(0, 0, 999).mul_(t.narrow(0, 1, 999)), InvalidArgument);
    // The same elements, and elements apart, are fine.
    t.add_(t);
    t.narrow(0, 0, 500).copy_(t.narrow(0, 500, 500));
    std::vector<float> expected(500);
    for (int i = 0; i < 500; ++i)
      expected[i] = 2.0f * static_cast<float>(i + 500);
    EXPECT_EQ(t.narrow(0, 0, 500).cpu().to_vector<float>(), expected);
  }
}

}  // namespace
}  // namespace shmccl
