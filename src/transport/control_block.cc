// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "transport/control_block.h"

#include <algorithm>
#include <cstring>

namespace shmccl::transport {

void give_up(RankSlot& slot, uint64_t sequence, const std::string& reason, FailureKind kind) {
  slot.failure_kind = static_cast<uint32_t>(kind);
  const size_t length = std::min(reason.size(), kFailureTextBytes - 1);
  std::memcpy(slot.failure, reason.data(), length);
  slot.failure[length] = '\0';
  // Release: the text happens-before any peer that sees the give-up.
  slot.gave_up.store(sequence, std::memory_order_seq_cst);
}

std::string failure_text(const RankSlot& slot) {
  return printable_text(slot.failure, kFailureTextBytes);
}

std::string printable_text(const char* bytes, size_t size) {
  std::string text(bytes, ::strnlen(bytes, size));
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

}  // namespace shmccl::transport
