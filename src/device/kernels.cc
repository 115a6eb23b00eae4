// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// The kernels' entry points: argument checks, the choice of ISA, and dispatch to the vector
// tables with the generic kernels as the fallback.

#include "device/kernels.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/config.h"
#include "core/logging.h"
#include "device/kernels_impl.h"

namespace shmccl::kernels {
namespace {

constexpr int kUnresolved = -1;

// The ISA in use, or kUnresolved until the first call reads SHMCCL_KERNEL_ISA. Relaxed is enough:
// it guards no other data, and every value it can hold is a valid choice.
std::atomic<int> active_isa_value{kUnresolved};

Isa detect() noexcept {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return Isa::kGeneric;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  return Isa::kAvx2;
}

Isa resolve() {
  const Isa detected = detected_isa();
  const std::string wanted = config::get_string("SHMCCL_KERNEL_ISA");
  Isa cap = detected;
  if (wanted == "generic") {
    cap = Isa::kGeneric;
  } else if (wanted == "avx2") {
    cap = Isa::kAvx2;
  } else if (wanted == "avx512") {
    cap = Isa::kAvx512;
  } else if (wanted != "auto") {
    SHMCCL_WARN(kDevice, "ignoring SHMCCL_KERNEL_ISA=", wanted,
                ": expected auto, avx512, avx2 or generic");
  }
  const Isa isa = cap < detected ? cap : detected;
  SHMCCL_INFO(kDevice, "kernels use ", isa_name(isa), " (CPU supports ", isa_name(detected),
              ", SHMCCL_KERNEL_ISA=", wanted, ")");
  return isa;
}

// The vector kernels in use, or null for the generic ones.
const detail::IsaTable* vector_table() {
  switch (active_isa()) {
    case Isa::kAvx512:
      return &detail::avx512_table();
    case Isa::kAvx2:
      return &detail::avx2_table();
    case Isa::kGeneric:
      break;
  }
  return nullptr;
}

size_t streaming_threshold() noexcept {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);  // NOLINT(runtime/int): sysconf's type
  return llc > 0 ? static_cast<size_t>(llc) : size_t{32} << 20;
}

void check_type(ScalarType type) {
  SHMCCL_CHECK_ARG(is_valid(type), "invalid dtype ", static_cast<int>(type));
}

}  // namespace

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

Isa detected_isa() noexcept {
  static const Isa detected = detect();
  return detected;
}

Isa active_isa() noexcept {
  int value = active_isa_value.load(std::memory_order_relaxed);
  if (value == kUnresolved) [[unlikely]] {
    int resolved = static_cast<int>(Isa::kGeneric);
    try {
      resolved = static_cast<int>(resolve());
    } catch (...) {  // the config registry cannot fail for a declared name; stay safe anyway
    }
    // A concurrent set_active_isa wins over the environment.
    if (!active_isa_value.compare_exchange_strong(value, resolved, std::memory_order_relaxed)) {
      return static_cast<Isa>(value);
    }
    value = resolved;
  }
  return static_cast<Isa>(value);
}

void set_active_isa(Isa isa) {
  const Isa detected = detected_isa();
  SHMCCL_CHECK_ARG(isa == Isa::kGeneric || isa == Isa::kAvx2 || isa == Isa::kAvx512,
                   "invalid kernel ISA ", static_cast<int>(isa));
  SHMCCL_CHECK_ARG(isa <= detected, "kernel ISA ", isa_name(isa),
                   " is not supported by this CPU (best: ", isa_name(detected), ")");
  active_isa_value.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_active_isa() noexcept {
  active_isa_value.store(kUnresolved, std::memory_order_relaxed);
}

void fill(void* dst, ScalarType type, size_t count, const void* value) {
  check_type(type);
  if (count == 0) return;
  const detail::IsaTable* table = vector_table();
  if (table != nullptr && table->fill(dst, type, count, value)) return;
  detail::generic_fill(dst, type, count, value);
}

void cast(void* dst, ScalarType dst_type, const void* src, ScalarType src_type, size_t count) {
  check_type(dst_type);
  check_type(src_type);
  if (count == 0) return;
  if (dst_type == src_type && dst_type != ScalarType::Bool) {  // bool normalizes to 0/1
    if (dst != src) copy(dst, src, count * element_size(dst_type));
    return;
  }
  const detail::IsaTable* table = vector_table();
  if (table != nullptr && table->cast(dst, dst_type, src, src_type, count)) return;
  detail::generic_cast(dst, dst_type, src, src_type, count);
}

void binary(BinaryOp op, ScalarType type, void* dst, const void* a, const void* b, size_t count) {
  check_type(type);
  SHMCCL_CHECK_ARG(type != ScalarType::Bool || (op != BinaryOp::kSub && op != BinaryOp::kDiv),
                   "binary ", op == BinaryOp::kSub ? "sub" : "div", " is not defined for bool");
  const void* const srcs[2] = {a, b};
  switch (op) {
    case BinaryOp::kAdd:
      return reduce(ReduceOp::SUM, type, dst, srcs, 2, count);
    case BinaryOp::kMul:
      return reduce(ReduceOp::PRODUCT, type, dst, srcs, 2, count);
    case BinaryOp::kMax:
      return reduce(ReduceOp::MAX, type, dst, srcs, 2, count);
    case BinaryOp::kMin:
      return reduce(ReduceOp::MIN, type, dst, srcs, 2, count);
    case BinaryOp::kSub:
    case BinaryOp::kDiv:
      break;
    default:
      SHMCCL_CHECK_ARG(false, "invalid binary op ", static_cast<int>(op));
  }
  if (count == 0) return;
  const detail::IsaTable* table = vector_table();
  if (table != nullptr && table->binary(op, type, dst, a, b, count)) return;
  detail::generic_binary(op, type, dst, a, b, 0, count);
}

void reduce(ReduceOp op, ScalarType type, void* dst, const void* const* srcs, int num_srcs,
            size_t count) {
  check_type(type);
  SHMCCL_CHECK_ARG(num_srcs >= 1, "reduce needs at least 1 source, got ", num_srcs);
  SHMCCL_CHECK_ARG(op >= ReduceOp::SUM && op <= ReduceOp::MAX, "invalid reduce op ",
                   static_cast<int>(op));
  if (count == 0) return;
  if (num_srcs == 1 && type != ScalarType::Bool) {  // every op of one value is that value
    copy(dst, srcs[0], count * element_size(type));
    return;
  }
  const detail::IsaTable* table = vector_table();
  if (table != nullptr && table->reduce(op, type, dst, srcs, num_srcs, count)) return;
  detail::generic_reduce(op, type, dst, srcs, num_srcs, 0, count);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // Above the LLC the copy cannot stay cached anyway; streaming stores skip the read-for-ownership
  // of the destination and leave the cache to the data that still fits.
  static const size_t threshold = streaming_threshold();
  if (bytes >= threshold) {
    const detail::IsaTable* table = vector_table();
    if (table != nullptr) return table->stream_copy(dst, src, bytes);
  }
  std::memcpy(dst, src, bytes);
}

void copy_streaming(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const detail::IsaTable* table = vector_table();
  if (table != nullptr) return table->stream_copy(dst, src, bytes);
  std::memcpy(dst, src, bytes);
}

}  // namespace shmccl::kernels
