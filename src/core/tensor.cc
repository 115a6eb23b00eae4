// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Tensor metadata and views. Everything that touches memory or streams (factories, copies,
// casts, printing) is in src/device/tensor_*.cc.
#include "shmccl/tensor.hpp"

#include <cstdlib>

#include "core/check.h"
#include "core/storage.h"
#include "core/tensor_shape.h"

namespace shmccl {

int64_t detail::checked_numel(const std::vector<int64_t>& sizes) {
  int64_t numel = 1;
  for (int64_t size : sizes) {
    SHMCCL_CHECK_ARG(size >= 0, "tensor sizes must be non-negative, got ", sizes);
    SHMCCL_CHECK_ARG(!__builtin_mul_overflow(numel, size, &numel), "a tensor of sizes ", sizes,
                     " has more elements than an int64_t counts");
  }
  return numel;
}

Tensor::Tensor(std::shared_ptr<detail::Storage> storage, size_t offset_bytes,
               std::vector<int64_t> sizes, ScalarType dtype)
    : storage_(std::move(storage)),
      offset_bytes_(offset_bytes),
      sizes_(std::move(sizes)),
      numel_(detail::checked_numel(sizes_)),
      dtype_(dtype) {
  SHMCCL_CHECK_ARG(is_valid(dtype), "invalid dtype ", static_cast<int>(dtype));
  if (storage_ == nullptr) return;
  // No sum or product that could wrap around.
  size_t bytes = 0;
  SHMCCL_CHECK(!__builtin_mul_overflow(static_cast<size_t>(numel_), element_size(), &bytes) &&
                   offset_bytes_ <= storage_->nbytes() &&
                   bytes <= storage_->nbytes() - offset_bytes_,
               "tensor view of ", numel_, " elements of ", element_size(), " bytes at offset ",
               offset_bytes_, " exceeds its storage of ", storage_->nbytes(), " bytes");
}

void Tensor::throw_dim_out_of_range(int64_t dim) const {
  SHMCCL_CHECK_ARG(false, "dimension ", dim, " out of range for a tensor of shape ", sizes_);
  std::abort();  // not reached
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : Device::cpu();
}

void* Tensor::data_ptr() const {
  if (!storage_ || storage_->data() == nullptr) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

uint64_t Tensor::version() const {
  return storage_ ? storage_->version() : 0;
}

void Tensor::check_element_type(ScalarType requested) const {
  SHMCCL_CHECK_ARG(defined(), "the tensor is undefined");
  SHMCCL_CHECK_ARG(requested == dtype_, "element type ", requested,
                   " does not match the tensor's dtype ", dtype_);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  SHMCCL_CHECK_ARG(defined(), "narrow() of an undefined tensor");
  SHMCCL_CHECK_ARG(dim == 0 || (dim == -this->dim() && this->dim() > 0),
                   "narrow() keeps tensors contiguous, so it works along dim 0 only, got dim ",
                   dim);
  SHMCCL_CHECK_ARG(this->dim() > 0, "narrow() needs at least one dimension");
  const int64_t rows = sizes_[0];
  // `length <= rows - start`, not `start + length <= rows`: a huge length ("to the end") would
  // overflow the sum and pass.
  SHMCCL_CHECK_ARG(start >= 0 && length >= 0 && start <= rows && length <= rows - start,
                   "narrow(0, ", start, ", ", length, ") is out of range for dim 0 of size ", rows);
  const int64_t row_elements = rows == 0 ? 0 : numel_ / rows;
  std::vector<int64_t> sizes = sizes_;
  sizes[0] = length;
  const size_t offset =
      offset_bytes_ + static_cast<size_t>(start * row_elements) * shmccl::element_size(dtype_);
  return Tensor(storage_, offset, std::move(sizes), dtype_);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end) const {
  return narrow(dim, start, end - start);
}

Tensor Tensor::operator[](int64_t index) const {
  SHMCCL_CHECK_ARG(dim() > 0, "cannot index a 0-dimensional tensor");
  const int64_t wrapped = index < 0 ? index + sizes_[0] : index;
  SHMCCL_CHECK_ARG(wrapped >= 0 && wrapped < sizes_[0], "index ", index,
                   " is out of range for dim 0 of size ", sizes_[0]);
  Tensor row = narrow(0, wrapped, 1);
  row.sizes_.erase(row.sizes_.begin());
  return row;
}

Tensor Tensor::reshape(const IntArrayRef& shape) const {
  SHMCCL_CHECK_ARG(defined(), "reshape() of an undefined tensor");
  std::vector<int64_t> sizes = shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      SHMCCL_CHECK_ARG(inferred < 0, "only one dimension can be inferred, got shape ", shape);
      inferred = static_cast<int>(i);
    } else {
      SHMCCL_CHECK_ARG(sizes[i] >= 0, "invalid shape ", shape);
      known *= sizes[i];
    }
  }
  if (inferred >= 0) {
    SHMCCL_CHECK_ARG(known != 0 && numel_ % known == 0, "shape ", shape,
                     " is invalid for a tensor of ", numel_, " elements");
    sizes[static_cast<size_t>(inferred)] = numel_ / known;
    known = numel_;
  }
  SHMCCL_CHECK_ARG(known == numel_, "shape ", shape, " is invalid for a tensor of ", numel_,
                   " elements");
  return Tensor(storage_, offset_bytes_, std::move(sizes), dtype_);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text.rfind("npu", 0) == 0) {
    if (text == "npu") return npu(-1);
    if (text.size() > 4 && text[3] == ':') {
      size_t used = 0;
      int index = -1;
      try {
        index = std::stoi(text.substr(4), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == text.size() - 4 && index >= 0) return npu(index);
    }
  }
  throw InvalidArgument(detail::concat("invalid device '", text, "': expected cpu, npu or npu:N"));
}

}  // namespace shmccl
