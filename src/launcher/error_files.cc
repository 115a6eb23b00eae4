// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "launcher/error_files.h"

#include <cstdlib>
#include <ctime>
#include <fstream>

#include "core/json.h"

namespace shmccl::launcher {
namespace {

constexpr size_t kMaxShown = 4096;
constexpr size_t kMaxRead = 1 << 20;

std::optional<long> to_timestamp(const json::Value* value) {
  if (value == nullptr) return std::nullopt;
  if (value->kind == json::Value::Kind::kNumber) {
    // A rank writes this file; a value outside long's range (or NaN) is no time, not a cast's UB.
    const double number = value->number;
    if (!(number >= -0x1p63 && number < 0x1p63)) return std::nullopt;
    return static_cast<long>(number);
  }
  if (value->is_string()) {
    char* end = nullptr;
    const long seconds = std::strtol(value->string.c_str(), &end, 10);
    if (end != value->string.c_str() && *end == '\0') return seconds;
  }
  return std::nullopt;
}

}  // namespace

std::optional<RecordedError> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxRead, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));

  RecordedError recorded;
  const std::optional<json::Value> document = json::parse(text);
  const json::Value* message =
      document && document->is_object() ? document->find("message") : nullptr;
  if (message != nullptr && message->is_string()) {
    recorded.message = message->string;
    recorded.timestamp = to_timestamp(document->find("timestamp"));
  } else if (message != nullptr && message->is_object() && message->find("message") != nullptr &&
             message->find("message")->is_string()) {
    recorded.message = message->find("message")->string;
    if (const json::Value* extra = message->find("extraInfo");
        extra != nullptr && extra->is_object()) {
      if (const json::Value* stack = extra->find("py_callstack");
          stack != nullptr && stack->is_string()) {
        recorded.traceback = stack->string;
      }
      recorded.timestamp = to_timestamp(extra->find("timestamp"));
    }
  } else {
    // Not torch's layout: show what the rank wrote.
    recorded.message = text.substr(0, kMaxShown);
    while (!recorded.message.empty() && recorded.message.back() == '\n')
      recorded.message.pop_back();
  }
  if (recorded.traceback.empty()) recorded.traceback = recorded.message;
  return recorded;
}

bool write_launcher_error_file(const std::string& path,
                               const std::optional<RecordedError>& recorded, int error_code,
                               const std::string& message) {
  const std::string text = recorded ? recorded->message : message;
  const std::string callstack =
      recorded && !recorded->traceback.empty() ? recorded->traceback : text;
  const long timestamp = recorded && recorded->timestamp ? *recorded->timestamp
                                                         : static_cast<long>(std::time(nullptr));
  const std::string document = "{\"message\": {\"message\": " + json::quote(text) +
                               ", \"extraInfo\": {\"py_callstack\": " + json::quote(callstack) +
                               ", \"timestamp\": \"" + std::to_string(timestamp) +
                               "\"}, \"errorCode\": " + std::to_string(error_code) + "}}\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << document;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace shmccl::launcher
