// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Reading tensors on the host: printing, raw files and the comparison helpers tests use.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/check.h"
#include "core/file_descriptor.h"
#include "device/kernels.h"
#include "shmccl/tensor.hpp"

namespace shmccl {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // torch's print threshold
constexpr int64_t kEdgeItems = 3;

// Host copy of `tensor` converted to float64 (the comparison helpers' common ground).
std::vector<double> host_doubles(const Tensor& tensor) {
  Tensor host = tensor.cpu();
  std::vector<double> values(static_cast<size_t>(host.numel()));
  kernels::cast(values.data(), kFloat64, host.data_ptr(), host.dtype(), values.size());
  return values;
}

struct Printer {
  const std::vector<double>& values;
  const std::vector<int64_t>& sizes;
  ScalarType dtype;
  bool summarize;
  bool integral_floats;
  std::ostringstream out;
  // kInt64's values as they are (a double holds integers exactly up to 2^53 only).
  std::vector<int64_t> exact_integers = {};

  void element(size_t index) {
    const double value = values[index];
    if (dtype == kBool) {
      out << (value != 0 ? "True" : "False");
    } else if (!exact_integers.empty()) {
      out << exact_integers[index];
    } else if (!is_floating_point(dtype)) {
      out << static_cast<int64_t>(value);  // 32 bits or fewer: exact in a double
    } else if (std::isnan(value)) {
      out << "nan";
    } else if (std::isinf(value)) {
      out << (value > 0 ? "inf" : "-inf");
    } else if (integral_floats) {
      out << static_cast<int64_t>(value) << '.';
    } else {
      out << std::fixed << std::setprecision(4) << value;
    }
  }

  // Prints the sub-tensor at dimension `dim` starting at flat `offset`.
  void print(size_t dim, int64_t offset, int indent) {
    if (sizes.empty()) {
      element(static_cast<size_t>(offset));
      return;
    }
    const int64_t count = sizes[dim];
    int64_t stride = 1;
    for (size_t d = dim + 1; d < sizes.size(); ++d)
      stride *= sizes[d];
    out << '[';
    for (int64_t i = 0; i < count; ++i) {
      if (summarize && count > 2 * kEdgeItems && i == kEdgeItems) {
        out << "...";
        i = count - kEdgeItems - 1;
        out << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
        continue;
      }
      if (dim + 1 == sizes.size()) {
        element(static_cast<size_t>(offset + i * stride));
      } else {
        print(dim + 1, offset + i * stride, indent + 1);
      }
      if (i + 1 < count) {
        if (dim + 1 == sizes.size()) {
          out << ", ";
        } else {
          out << ',' << std::string(sizes.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
    }
    out << ']';
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "[ undefined Tensor ]";
  const std::vector<double> values = host_doubles(*this);
  bool integral = true;
  // Whole numbers print as "3."; beyond what an int64_t holds (1e20) they print in full.
  for (double value : values)
    integral =
        integral && std::isfinite(value) && std::trunc(value) == value && std::fabs(value) < 1e18;
  Printer printer{values, sizes_, dtype_, numel_ > kSummarizeAbove, integral && !values.empty(),
                  {}};
  if (dtype_ == kInt64) printer.exact_integers = cpu().to_vector<int64_t>();
  printer.out << "tensor(";
  printer.print(0, 0, 7);
  if (is_npu()) printer.out << ", device='" << device() << "'";
  printer.out << ", dtype=" << dtype_;
  if (numel_ == 0 || dim() > 1) printer.out << ", size=" << detail::concat(sizes_);
  printer.out << ')';
  return printer.out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << tensor.str();
}

void Tensor::tofile(const std::string& path) const {
  SHMCCL_CHECK_ARG(defined(), "tofile() of an undefined tensor");
  Tensor host = cpu();
  const FileDescriptor file(
      SHMCCL_SYSCALL(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), "open ",
                     path, " for writing"));
  const char* data = static_cast<const char*>(host.data_ptr());
  size_t remaining = host.nbytes();
  while (remaining > 0) {
    const ssize_t written = ::write(file.get(), data, remaining);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) detail::throw_system_error(detail::concat("write ", path), errno);
    data += written;
    remaining -= static_cast<size_t>(written);
  }
}

Tensor fromfile(const std::string& path, ScalarType dtype, const IntArrayRef& shape) {
  SHMCCL_CHECK_ARG(is_valid(dtype), "fromfile: invalid dtype ", static_cast<int>(dtype));
  const FileDescriptor file(
      SHMCCL_SYSCALL(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "open ", path));
  const off_t size = ::lseek(file.get(), 0, SEEK_END);
  ::lseek(file.get(), 0, SEEK_SET);
  const size_t element = element_size(dtype);
  if (size < 0 || static_cast<size_t>(size) % element != 0) {
    throw InvalidArgument(detail::concat("fromfile: ", path, " holds ", size,
                                         " bytes, not a whole number of ", dtype, " elements"));
  }
  Tensor out = empty({static_cast<int64_t>(static_cast<size_t>(size) / element)}, dtype);
  char* data = static_cast<char*>(out.data_ptr());
  size_t remaining = out.nbytes();
  while (remaining > 0) {
    const ssize_t got = ::read(file.get(), data, remaining);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) detail::throw_system_error(detail::concat("read ", path), got < 0 ? errno : EIO);
    data += got;
    remaining -= static_cast<size_t>(got);
  }
  return out.reshape(shape);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  SHMCCL_CHECK_ARG(a.defined() && b.defined(), "allclose() of an undefined tensor");
  SHMCCL_CHECK_ARG(a.sizes() == b.sizes(), "allclose() needs tensors of the same shape, got ",
                   a.sizes(), " and ", b.sizes());
  const std::vector<double> left = host_doubles(a);
  const std::vector<double> right = host_doubles(b);
  for (size_t i = 0; i < left.size(); ++i) {
    const double x = left[i];
    const double y = right[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (!(equal_nan && std::isnan(x) && std::isnan(y))) return false;
      continue;
    }
    if (x == y) continue;  // also equal infinities
    // An infinity is close to itself only (as torch has it): |x - y| <= atol + rtol * inf
    // would hold for anything.
    if (std::isinf(x) || std::isinf(y)) return false;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  if (is_floating_point(a.dtype())) {
    const std::vector<double> left = host_doubles(a);
    const std::vector<double> right = host_doubles(b);
    return left == right;
  }
  // Integers and bool compare bytes exactly (int64 beyond 2^53 would not survive float64).
  const Tensor left = a.cpu();
  const Tensor right = b.cpu();
  return left.nbytes() == 0 || std::memcmp(left.data_ptr(), right.data_ptr(), left.nbytes()) == 0;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  SHMCCL_CHECK_ARG(a.sizes() == b.sizes(), "max_abs_diff() needs tensors of the same shape, got ",
                   a.sizes(), " and ", b.sizes());
  const std::vector<double> left = host_doubles(a);
  const std::vector<double> right = host_doubles(b);
  double worst = 0;
  for (size_t i = 0; i < left.size(); ++i) {
    const double diff = std::fabs(left[i] - right[i]);
    if (std::isnan(diff)) return diff;
    worst = std::max(worst, diff);
  }
  return worst;
}

}  // namespace shmccl
