// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// shmccl::Tensor: a contiguous n-dimensional array on the host or on a simulated NPU, spelled like
// LibTorch's C++ API. Storage is shared by reference: copies of a Tensor, and views made with
// narrow/slice/reshape/view, alias the same memory. Work on NPU tensors (fills, casts, copies,
// element-wise ops) runs on the current stream of the tensor's device, asynchronously as on a real
// NPU; anything that reads values on the host (cpu(), to_vector, item, printing, allclose)
// first waits for that stream. A Tensor is not thread-safe; distinct tensors may be used from
// distinct threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "shmccl/device.hpp"
#include "shmccl/dtype.hpp"
#include "shmccl/error.hpp"

// The library's interface: exported from libshmccl.so, which hides everything else.
#pragma GCC visibility push(default)

namespace shmccl {

namespace detail {
class Storage;
}  // namespace detail

using IntArrayRef = std::vector<int64_t>;

class Tensor {
 public:
  // An undefined tensor (defined() is false).
  Tensor() = default;

  bool defined() const { return storage_ != nullptr; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  std::vector<int64_t> shape() const { return sizes_; }
  // Negative dims count from the end. Inline: collectives call it on every call.
  int64_t size(int64_t dim) const {
    const int64_t wrapped = dim < 0 ? dim + this->dim() : dim;
    if (wrapped < 0 || wrapped >= this->dim()) [[unlikely]]
      throw_dim_out_of_range(dim);
    return sizes_[static_cast<size_t>(wrapped)];
  }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return numel_; }
  ScalarType dtype() const { return dtype_; }
  ScalarType scalar_type() const { return dtype_; }
  size_t element_size() const { return shmccl::element_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }
  Device device() const;
  bool is_npu() const { return device().is_npu(); }
  bool is_cpu() const { return device().is_cpu(); }

  // Address of the first element (host-addressable for NPU tensors too: it is in the device's
  // shared-memory arena). Reading it on the host is only meaningful after synchronizing.
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const {
    check_element_type(scalar_type_of_v<std::remove_const_t<T>>);
    return static_cast<T*>(data_ptr());
  }
  // Byte offset of this view in its storage.
  size_t storage_offset_bytes() const { return offset_bytes_; }
  // Counts the library's writes to this tensor's storage (copy_, fill_, in-place arithmetic,
  // collectives' outputs), like torch's tensor._version. Writes through data_ptr() do not count.
  uint64_t version() const;
  // True when both tensors view the same storage.
  bool is_alias_of(const Tensor& other) const { return storage_ == other.storage_; }

  // Views (share storage). narrow/slice work along dim 0 only (the layout stays contiguous).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor operator[](int64_t index) const;  // select along dim 0
  // One size may be -1 (inferred). The element count must match.
  Tensor reshape(const IntArrayRef& shape) const;
  Tensor view(const IntArrayRef& shape) const { return reshape(shape); }
  Tensor flatten() const { return reshape({numel_}); }

  // Conversions (new storage, unless nothing changes: then the same tensor, as torch).
  Tensor to(ScalarType dtype) const;
  Tensor to(const Device& device) const;
  Tensor to(const Device& device, ScalarType dtype) const;
  Tensor npu() const;  // to the current NPU device
  Tensor npu(int device) const;
  Tensor cpu() const;
  Tensor clone() const;
  Tensor contiguous() const { return *this; }

  // In-place ops (on this tensor's device, in its current stream's order).
  // Any device and dtype; same numel. Host<->device copies are synchronous unless non_blocking,
  // which queues them on the device's current stream like device work (the host tensor is kept
  // alive until the copy ran; do not modify it before synchronizing).
  Tensor& copy_(const Tensor& source, bool non_blocking = false);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0); }
  Tensor& add_(const Tensor& other);
  Tensor& mul_(const Tensor& other);

  // Values on the host (waits for the device).
  template <typename T>
  std::vector<T> to_vector() const;
  template <typename T>
  T item() const;  // numel() == 1
  double item_as_double(int64_t flat_index = 0) const;

  std::string str() const;                     // torch-like printing
  void tofile(const std::string& path) const;  // raw bytes, like numpy's tofile

  // Internals for the library's layers.
  const std::shared_ptr<detail::Storage>& storage() const { return storage_; }
  Tensor(std::shared_ptr<detail::Storage> storage, size_t offset_bytes, std::vector<int64_t> sizes,
         ScalarType dtype);

 private:
  void check_element_type(ScalarType requested) const;
  void copy_to_host(void* destination) const;
  [[noreturn]] void throw_dim_out_of_range(int64_t dim) const;

  std::shared_ptr<detail::Storage> storage_;
  size_t offset_bytes_ = 0;
  std::vector<int64_t> sizes_;
  int64_t numel_ = 0;
  ScalarType dtype_ = kFloat32;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// Factories. The device defaults to the CPU; `.npu()` moves a tensor to the current NPU.
Tensor empty(const IntArrayRef& shape, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor zeros(const IntArrayRef& shape, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor ones(const IntArrayRef& shape, ScalarType dtype = kFloat32, Device device = Device::cpu());
Tensor full(const IntArrayRef& shape, double value, ScalarType dtype = kFloat32,
            Device device = Device::cpu());
// 0, 1, ..., n-1.
Tensor arange(int64_t n, ScalarType dtype = kInt64, Device device = Device::cpu());
// Seeded pseudo-random values: uniform in [low, high) and normal(mean, stddev). The same seed gives
// the same values on every machine.
Tensor rand(const IntArrayRef& shape, uint64_t seed, ScalarType dtype = kFloat32, double low = 0,
            double high = 1, Device device = Device::cpu());
Tensor randn(const IntArrayRef& shape, uint64_t seed, ScalarType dtype = kFloat32, double mean = 0,
             double stddev = 1, Device device = Device::cpu());
// Raw bytes written by tofile.
Tensor fromfile(const std::string& path, ScalarType dtype, const IntArrayRef& shape = {-1});

Tensor from_blob_copy(const void* data, const IntArrayRef& shape, ScalarType dtype);

// from_vector's work: a host tensor of `count` elements copied from `data`, shaped `shape` (empty:
// 1-D), whose element count must be `count` (InvalidArgument otherwise).
Tensor from_values_copy(const void* data, size_t count, const IntArrayRef& shape, ScalarType dtype);

// A host tensor holding `values`, shaped `shape` (default: 1-D; it must hold exactly the values).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const IntArrayRef& shape = {}) {
  return from_values_copy(values.data(), values.size(), shape, scalar_type_of_v<T>);
}
// std::vector<bool> is packed; it gets its own overload.
Tensor from_vector(const std::vector<bool>& values, const IntArrayRef& shape = {});

// Element-wise arithmetic (same shape and dtype; the result is on the operands' device).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}

// Comparison helpers for tests: |a - b| <= atol + rtol * |b| element-wise (NaN equal to NaN when
// equal_nan); shapes must match. Any dtypes and devices.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
// Same shape, dtype and exactly equal values.
bool equal(const Tensor& a, const Tensor& b);
// The largest |a - b| over all elements, as double.
double max_abs_diff(const Tensor& a, const Tensor& b);

// ---- template definitions ----

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_element_type(scalar_type_of_v<T>);
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(static_cast<size_t>(numel_));
    copy_to_host(bytes.data());
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> values(static_cast<size_t>(numel_));
    copy_to_host(values.data());
    return values;
  }
}

template <typename T>
T Tensor::item() const {
  std::vector<T> values = to_vector<T>();
  if (values.size() != 1) {
    throw InvalidArgument("item() needs a tensor with one element, got " +
                          std::to_string(values.size()));
  }
  return values[0];
}

}  // namespace shmccl

#pragma GCC visibility pop
