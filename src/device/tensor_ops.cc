// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tensor operations that touch memory: allocation, factories, copies between devices and dtypes,
// fills and element-wise arithmetic. Host tensors are processed at once; NPU tensors on the
// current stream of their device. Every queued task holds the storages it uses, so memory freed by
// the user stays alive until the task has run.
#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/config.h"
#include "core/huge_page_mapping.h"
#include "core/logging.h"
#include "core/tensor_shape.h"
#include "device/device_context.h"
#include "device/kernels.h"
#include "device/tensor_memory.h"

namespace shmccl {
namespace device {
namespace {

void free_host(void* data, void* /*context*/) {
  std::free(data);
}

// Host memory for a tensor. From 2 MiB up it asks for 2 MiB pages (MADV_HUGEPAGE; transparent
// huge pages in their default "madvise" mode make them only where asked), as PyTorch's CPU
// allocator does under THP_MEM_ALLOC_ENABLE: the first touch of fresh memory then faults once per
// 2 MiB instead of once per 4 KiB. In a PVM guest a fault costs 11-15 us: a new 256 MiB tensor
// cost 0.77 s of faults in 4 KiB pages, 18 ms in 2 MiB pages (docs/performance.md, session 52).
// Blocks that glibc always maps afresh (32 MiB and up, its largest mmap threshold) also start on
// a 2 MiB boundary, so that all of them can be 2 MiB pages; smaller ones keep glibc's placement,
// which reuses freed memory whose pages are there already (a 2 MiB alignment made glibc map a
// 16 MiB block afresh on every allocation: 0.2 -> 0.76 ms per zeros()). Memory the kernel cannot
// make into 2 MiB pages stays in 4 KiB ones.
void* allocate_host(size_t nbytes) {
  static config::CachedSetting<bool, config::get_bool> huge_pages("SHMCCL_HOST_HUGE_PAGES");
  constexpr size_t kCacheLineAlignment = 64;
  constexpr size_t kAlwaysMappedBytes = 32ull << 20;
  const bool huge = nbytes >= detail::kHugePageBytes && huge_pages.get();
  const size_t alignment =
      huge && nbytes >= kAlwaysMappedBytes ? detail::kHugePageBytes : kCacheLineAlignment;
  const size_t rounded = (std::max<size_t>(nbytes, 1) + alignment - 1) / alignment * alignment;
  void* data = std::aligned_alloc(alignment, rounded);
  if (data == nullptr) {
    throw OutOfMemoryError(
        detail::concat("host out of memory: tried to allocate ", nbytes, " bytes"));
  }
  if (huge) {
    // The whole 4 KiB pages of the block. Advice only: a kernel without transparent huge pages
    // refuses it, and 4 KiB pages work.
    constexpr uintptr_t kPage = 4096;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + nbytes) & ~(kPage - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  return data;
}

// Runs in ~Storage, which must not throw: a failure to give memory back (a refused hole punch)
// is logged, and the memory stays with the process.
void free_device(void* data, void* context) noexcept {
  try {
    static_cast<CachingAllocator*>(context)->free(data);
  } catch (const std::exception& error) {
    SHMCCL_WARN(kDevice, "freeing NPU memory at ", data, " failed: ", error.what());
  }
}

}  // namespace

std::shared_ptr<detail::Storage> allocate_storage(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    return std::make_shared<detail::Storage>(allocate_host(nbytes), nbytes, Device::cpu(),
                                             &free_host, nullptr);
  }
  const int index = resolve_device(device.index);
  CachingAllocator& device_allocator = allocator(index);
  void* data = device_allocator.allocate(nbytes);
  return std::make_shared<detail::Storage>(data, nbytes, Device::npu(index), &free_device,
                                           &device_allocator);
}

void launch(const Device& device, std::function<void()> work) {
  if (device.is_cpu()) {
    work();
  } else {
    current_stream_impl(device.index).enqueue(std::move(work));
  }
}

void run_ordered(const Device& device, const std::function<void()>& work) {
  if (device.is_cpu()) {
    work();
  } else {
    current_stream_impl(device.index).run_sync(work);
  }
}

void read_ordered(const Device& device, const std::function<void()>& work) {
  if (device.is_cpu()) {
    work();
    return;
  }
  npu::detail::StreamImpl& stream = current_stream_impl(device.index);
  stream.run_sync(work);
  if (std::exception_ptr error = stream.take_error()) [[unlikely]]
    std::rethrow_exception(error);
}

}  // namespace device

namespace {

Device resolved(Device device) {
  if (device.is_npu()) device.index = device::resolve_device(device.index);
  return device;
}

// Converts one double to the bytes of one element of `dtype`.
void scalar_to_bytes(double value, ScalarType dtype, void* out) {
  kernels::cast(out, dtype, &value, kFloat64, 1);
}

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  SHMCCL_CHECK_ARG(a.defined() && b.defined(), op, "() of an undefined tensor");
  SHMCCL_CHECK_ARG(a.sizes() == b.sizes(), op, "() needs tensors of the same shape, got ",
                   a.sizes(), " and ", b.sizes());
  SHMCCL_CHECK_ARG(a.dtype() == b.dtype(), op, "() needs tensors of the same dtype, got ",
                   a.dtype(), " and ", b.dtype());
  SHMCCL_CHECK_ARG(a.device() == b.device(), op, "() needs tensors on the same device, got ",
                   a.device(), " and ", b.device());
}

// `written` and `read` may be the same elements, or apart; partly the same, the kernels' result
// would depend on the order they go through memory (and memcpy's is undefined), as torch's would.
void check_no_partial_overlap(const Tensor& written, const Tensor& read, const char* op) {
  if (written.storage() != read.storage()) return;
  const size_t written_begin = written.storage_offset_bytes();
  const size_t read_begin = read.storage_offset_bytes();
  const size_t written_end = written_begin + written.nbytes();
  const size_t read_end = read_begin + read.nbytes();
  const bool apart = written_end <= read_begin || read_end <= written_begin;
  const bool same = written_begin == read_begin && written_end == read_end;
  SHMCCL_CHECK_ARG(apart || same, op,
                   "(): some elements of the input tensor and the written-to tensor refer to a "
                   "single memory location (bytes [",
                   read_begin, ", ", read_end, ") and [", written_begin, ", ", written_end,
                   ") of one storage); clone() the input first");
}

Tensor binary_op(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same(a, b, name);
  Tensor out = empty(a.sizes(), a.dtype(), a.device());
  device::launch(a.device(), [op, out, a, b] {
    kernels::binary(op, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(),
                    static_cast<size_t>(a.numel()));
  });
  return out;
}

// splitmix64: a tiny generator whose output is the same on every platform (unlike <random>'s
// distributions), so seeded tensors are reproducible everywhere.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
};

Tensor from_doubles(const std::vector<double>& values, const IntArrayRef& shape, ScalarType dtype,
                    Device device) {
  Tensor host = empty(shape, dtype);
  kernels::cast(host.data_ptr(), dtype, values.data(), kFloat64, values.size());
  return host.to(device);
}

}  // namespace

Tensor empty(const IntArrayRef& shape, ScalarType dtype, Device device) {
  SHMCCL_CHECK_ARG(is_valid(dtype), "invalid dtype ", static_cast<int>(dtype));
  const int64_t numel = detail::checked_numel(shape);
  int64_t bytes = 0;
  SHMCCL_CHECK_ARG(
      !__builtin_mul_overflow(numel, static_cast<int64_t>(element_size(dtype)), &bytes),
      "a tensor of sizes ", shape, " and dtype ", dtype, " has more bytes than an int64_t counts");
  auto storage = device::allocate_storage(static_cast<size_t>(bytes), device);
  return Tensor(std::move(storage), 0, shape, dtype);
}

Tensor full(const IntArrayRef& shape, double value, ScalarType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  out.fill_(value);
  return out;
}

Tensor zeros(const IntArrayRef& shape, ScalarType dtype, Device device) {
  return full(shape, 0, dtype, device);
}

Tensor ones(const IntArrayRef& shape, ScalarType dtype, Device device) {
  return full(shape, 1, dtype, device);
}

Tensor arange(int64_t n, ScalarType dtype, Device device) {
  SHMCCL_CHECK_ARG(n >= 0, "arange(n) needs n >= 0, got ", n);
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] = i;
  Tensor host = empty({n}, dtype);
  kernels::cast(host.data_ptr(), dtype, values.data(), kInt64, values.size());
  return host.to(device);
}

Tensor rand(const IntArrayRef& shape, uint64_t seed, ScalarType dtype, double low, double high,
            Device device) {
  SHMCCL_CHECK_ARG(low <= high, "rand() needs low <= high, got ", low, " > ", high);
  const int64_t numel = detail::checked_numel(shape);
  SplitMix64 generator{seed};
  std::vector<double> values(static_cast<size_t>(numel));
  for (double& value : values)
    value = low + (high - low) * generator.uniform();
  return from_doubles(values, shape, dtype, device);
}

Tensor randn(const IntArrayRef& shape, uint64_t seed, ScalarType dtype, double mean, double stddev,
             Device device) {
  const int64_t numel = detail::checked_numel(shape);
  SplitMix64 generator{seed};
  std::vector<double> values(static_cast<size_t>(numel));
  for (size_t i = 0; i < values.size(); i += 2) {
    // Box-Muller: two normals from two uniforms; 1 - u keeps the log's argument in (0, 1].
    const double radius = std::sqrt(-2.0 * std::log(1.0 - generator.uniform()));
    const double angle = 2.0 * M_PI * generator.uniform();
    values[i] = mean + stddev * radius * std::cos(angle);
    if (i + 1 < values.size()) values[i + 1] = mean + stddev * radius * std::sin(angle);
  }
  return from_doubles(values, shape, dtype, device);
}

Tensor from_blob_copy(const void* data, const IntArrayRef& shape, ScalarType dtype) {
  Tensor out = empty(shape, dtype);
  if (out.nbytes() > 0) std::memcpy(out.data_ptr(), data, out.nbytes());
  return out;
}

Tensor from_values_copy(const void* data, size_t count, const IntArrayRef& shape,
                        ScalarType dtype) {
  if (shape.empty()) return from_blob_copy(data, {static_cast<int64_t>(count)}, dtype);
  const int64_t elements = detail::checked_numel(shape);
  SHMCCL_CHECK_ARG(static_cast<uint64_t>(elements) == count, "from_vector: ", count,
                   " values do not fill a tensor of shape ", shape, " (", elements, " elements)");
  return from_blob_copy(data, shape, dtype);
}

Tensor from_vector(const std::vector<bool>& values, const IntArrayRef& shape) {
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return from_values_copy(bytes.data(), bytes.size(), shape, kBool);
}

Tensor& Tensor::copy_(const Tensor& source, bool non_blocking) {
  SHMCCL_CHECK_ARG(defined() && source.defined(), "copy_() of an undefined tensor");
  SHMCCL_CHECK_ARG(numel() == source.numel(), "copy_() needs the same number of elements, got ",
                   numel(), " (shape ", sizes(), ") and ", source.numel(), " (shape ",
                   source.sizes(), ")");
  if (numel() == 0) return *this;
  check_no_partial_overlap(*this, source, "copy_");
  storage()->bump_version();
  const Device to = device();
  const Device from = source.device();
  Tensor destination = *this;
  auto work = [destination, source] {
    if (destination.dtype() == source.dtype()) {
      kernels::copy(destination.data_ptr(), source.data_ptr(), destination.nbytes());
    } else {
      kernels::cast(destination.data_ptr(), destination.dtype(), source.data_ptr(), source.dtype(),
                    static_cast<size_t>(destination.numel()));
    }
    destination.storage()->bump_version();  // see the second bump in fill_
  };
  if (to.is_cpu() && from.is_cpu()) {
    work();
  } else if (to.is_cpu()) {
    // device -> host: synchronous, like torch's .cpu(), unless non_blocking.
    if (non_blocking) {
      device::launch(from, work);
    } else {
      device::read_ordered(from, work);
    }
  } else if (from.is_cpu()) {
    // host -> device: synchronous for pageable host memory, unless non_blocking.
    if (non_blocking) {
      device::launch(to, work);
    } else {
      device::run_ordered(to, work);
    }
  } else {
    const bool peer = from.index != to.index;
    if (peer) {
      // Peer copy: the destination's stream must first reach the point where the source is ready.
      npu::Event ready;
      ready.record(npu::current_stream(from.index));
      npu::current_stream(to.index).wait_event(ready);
    }
    device::launch(to, work);
    if (peer) {
      // ...and the source's stream must not overwrite the source before the copy read it (as
      // torch syncs both streams around a copy between devices).
      npu::Event copied;
      copied.record(npu::current_stream(to.index));
      npu::current_stream(from.index).wait_event(copied);
    }
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  SHMCCL_CHECK_ARG(defined(), "fill_() of an undefined tensor");
  if (numel() == 0) return *this;
  uint64_t bytes = 0;
  scalar_to_bytes(value, dtype(), &bytes);
  storage()->bump_version();
  Tensor destination = *this;
  device::launch(device(), [destination, bytes] {
    kernels::fill(destination.data_ptr(), destination.dtype(),
                  static_cast<size_t>(destination.numel()), &bytes);
    // Again once the bytes changed: the first bump comes before the write runs on the stream,
    // and a reader of the old bytes in between (a GEMM reordering the weight for its cache) must
    // not have them filed under the new version.
    destination.storage()->bump_version();
  });
  return *this;
}

Tensor& Tensor::add_(const Tensor& other) {
  check_same(*this, other, "add_");
  check_no_partial_overlap(*this, other, "add_");
  storage()->bump_version();
  Tensor destination = *this;
  device::launch(device(), [destination, other] {
    kernels::binary(kernels::BinaryOp::kAdd, destination.dtype(), destination.data_ptr(),
                    destination.data_ptr(), other.data_ptr(),
                    static_cast<size_t>(destination.numel()));
    destination.storage()->bump_version();  // see the second bump in fill_
  });
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_same(*this, other, "mul_");
  check_no_partial_overlap(*this, other, "mul_");
  storage()->bump_version();
  Tensor destination = *this;
  device::launch(device(), [destination, other] {
    kernels::binary(kernels::BinaryOp::kMul, destination.dtype(), destination.data_ptr(),
                    destination.data_ptr(), other.data_ptr(),
                    static_cast<size_t>(destination.numel()));
    destination.storage()->bump_version();  // see the second bump in fill_
  });
  return *this;
}

Tensor Tensor::to(ScalarType dtype) const {
  return to(device(), dtype);
}

Tensor Tensor::to(const Device& device) const {
  return to(device, dtype());
}

Tensor Tensor::to(const Device& target, ScalarType dtype) const {
  SHMCCL_CHECK_ARG(defined(), "to() of an undefined tensor");
  const Device destination_device = resolved(target);
  if (destination_device == device() && dtype == this->dtype()) return *this;
  Tensor out = empty(sizes(), dtype, destination_device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::npu() const {
  return to(Device::npu(npu::current_device()));
}

Tensor Tensor::npu(int device) const {
  return to(Device::npu(device));
}

Tensor Tensor::cpu() const {
  return to(Device::cpu());
}

Tensor Tensor::clone() const {
  SHMCCL_CHECK_ARG(defined(), "clone() of an undefined tensor");
  Tensor out = empty(sizes(), dtype(), device());
  out.copy_(*this);
  return out;
}

void Tensor::copy_to_host(void* destination) const {
  if (nbytes() == 0) return;
  const Tensor source = *this;
  device::read_ordered(device(), [&] { std::memcpy(destination, source.data_ptr(), nbytes()); });
}

double Tensor::item_as_double(int64_t flat_index) const {
  SHMCCL_CHECK_ARG(flat_index >= 0 && flat_index < numel(), "element ", flat_index,
                   " is out of range for a tensor of ", numel(), " elements");
  uint64_t bytes = 0;
  const size_t offset = static_cast<size_t>(flat_index) * element_size();
  const Tensor source = *this;
  device::read_ordered(device(), [&] {
    std::memcpy(&bytes, static_cast<const char*>(source.data_ptr()) + offset, element_size());
  });
  double value = 0;
  kernels::cast(&value, kFloat64, &bytes, dtype(), 1);
  return value;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kAdd, a, b, "add");
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kSub, a, b, "sub");
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kMul, a, b, "mul");
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kDiv, a, b, "div");
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kMax, a, b, "maximum");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(kernels::BinaryOp::kMin, a, b, "minimum");
}

}  // namespace shmccl
