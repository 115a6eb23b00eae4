// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
//
// Just enough JSON for the error files torch.distributed.elastic defines (TORCHELASTIC_ERROR_FILE):
// quoting a string for writing one, and a strict parser (RFC 8259) for reading what a rank wrote,
// which may come from torch's Python @record as well as from shmccl. Depth is limited, so a
// hostile file cannot exhaust the stack.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shmccl::json {

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Value> items;                            // kArray
  std::vector<std::pair<std::string, Value>> members;  // kObject, in file order

  // The member `name` of an object (the last one, if repeated), or nullptr.
  const Value* find(std::string_view name) const;
  bool is_string() const { return kind == Kind::kString; }
  bool is_object() const { return kind == Kind::kObject; }
};

// The whole of `text` as one value; nullopt when it is not valid JSON.
std::optional<Value> parse(std::string_view text);

// `text` as a JSON string literal, quotes included (UTF-8 passes through; control characters,
// '"' and '\' are escaped).
std::string quote(std::string_view text);

}  // namespace shmccl::json
