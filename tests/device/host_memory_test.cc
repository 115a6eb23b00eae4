// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Host tensors' memory: from 2 MiB up it is advised MADV_HUGEPAGE (and blocks of 32 MiB and more
// start on a 2 MiB boundary), so its first touch faults once per 2 MiB where the kernel makes
// 2 MiB pages; SHMCCL_HOST_HUGE_PAGES=0 keeps plain 4 KiB pages. Whatever the pages, the bytes
// are the tensor's, to the last one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/config.h"
#include "core/huge_page_mapping.h"
#include "page_tables.h"
#include "shmccl/npu.hpp"
#include "shmccl/tensor.hpp"

namespace shmccl {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Sets SHMCCL_HOST_HUGE_PAGES for one test, then takes it back.
class HostHugePages {
 public:
  explicit HostHugePages(const char* value) {
    setenv("SHMCCL_HOST_HUGE_PAGES", value, 1);
    config::reload();
  }
  ~HostHugePages() {
    unsetenv("SHMCCL_HOST_HUGE_PAGES");
    config::reload();
  }
  HostHugePages(const HostHugePages&) = delete;
  HostHugePages& operator=(const HostHugePages&) = delete;
};

uintptr_t address(const Tensor& tensor) {
  return reinterpret_cast<uintptr_t>(tensor.data_ptr());
}

TEST(HostMemory, ALargeHostTensorStartsOnA2MibBoundaryInPagesAdvisedHuge) {
  const Tensor tensor = zeros({64 * kMiB}, kUInt8);
  EXPECT_EQ(address(tensor) % detail::kHugePageBytes, 0u);
  if (!testing::kernel_takes_huge_page_advice()) GTEST_SKIP() << "no transparent huge pages here";
  EXPECT_TRUE(testing::advised_huge_pages(tensor.data_ptr()))
      << testing::smaps_field(tensor.data_ptr(), "VmFlags");
  if (!testing::kernel_makes_anonymous_huge_pages()) {
    GTEST_SKIP() << "this kernel makes no 2 MiB pages of private memory on request";
  }
  // zeros() touched every page: the kernel made them 2 MiB pages (all of them, unless memory is
  // too fragmented for some; none at all would mean the advice was not taken).
  EXPECT_GT(testing::anon_huge_bytes(tensor.data_ptr()), 0);
}

TEST(HostMemory, AHostTensorOf2MibToBelow32MibIsAdvisedHugeWhereGlibcPutsIt) {
  if (!testing::kernel_takes_huge_page_advice()) GTEST_SKIP() << "no transparent huge pages here";
  for (const int64_t bytes : {2 * kMiB, 4 * kMiB + 100, 16 * kMiB}) {
    const Tensor tensor = zeros({bytes}, kUInt8);
    // Its last whole 4 KiB page lies in an advised mapping (the first may share a page with
    // glibc's header, which the advice leaves out).
    const auto* last_page =
        reinterpret_cast<const void*>((address(tensor) + bytes) / 4096 * 4096 - 1);
    EXPECT_TRUE(testing::advised_huge_pages(last_page)) << bytes << " bytes";
  }
}

TEST(HostMemory, SettingItToZeroKeepsPlainPages) {
  const HostHugePages off("0");
  // 64 MiB: a mapping of its own (glibc maps blocks of 32 MiB and more afresh), so no advice
  // given to a neighbour can show here.
  const Tensor tensor = zeros({64 * kMiB}, kUInt8);
  EXPECT_FALSE(testing::advised_huge_pages(tensor.data_ptr()))
      << testing::smaps_field(tensor.data_ptr(), "VmFlags");
}

TEST(HostMemory, TensorsInHugePagesHoldTheirBytesToTheLast) {
  // Sizes around the 2 MiB and 32 MiB thresholds, and not whole pages.
  for (const int64_t bytes : {2 * kMiB - 1, 2 * kMiB + 4095, 32 * kMiB + 17}) {
    const Tensor expected = arange(bytes / 4, kInt32);
    const Tensor host = expected.npu().cpu();  // a new host tensor, written by the copy
    ASSERT_EQ(host.numel(), bytes / 4);
    EXPECT_EQ(std::memcmp(host.data_ptr(), expected.data_ptr(), host.nbytes()), 0)
        << bytes << " bytes";
    Tensor bytes_tensor = empty({bytes}, kUInt8);
    auto* raw = static_cast<uint8_t*>(bytes_tensor.data_ptr());
    raw[0] = 1;
    raw[bytes - 1] = 2;  // the last byte is writable and the tensor's own
    EXPECT_EQ(raw[0] + raw[bytes - 1], 3);
  }
}

}  // namespace
}  // namespace shmccl
