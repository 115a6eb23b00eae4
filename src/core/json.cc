// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/json.h"

#include <charconv>
#include <cstdio>

namespace shmccl::json {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<Value> document() {
    Value value;
    if (!parse_value(value, 0)) return std::nullopt;
    skip_space();
    if (pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool parse_value(Value& value, int depth) {
    if (depth > kMaxDepth) return false;
    skip_space();
    if (pos_ >= text_.size()) return false;
    switch (text_[pos_]) {
      case '{':
        return parse_object(value, depth);
      case '[':
        return parse_array(value, depth);
      case '"':
        value.kind = Value::Kind::kString;
        return parse_string(value.string);
      case 't':
        value.kind = Value::Kind::kBool;
        value.boolean = true;
        return consume("true");
      case 'f':
        value.kind = Value::Kind::kBool;
        return consume("false");
      case 'n':
        return consume("null");
      default:
        return parse_number(value);
    }
  }

  bool parse_object(Value& value, int depth) {
    value.kind = Value::Kind::kObject;
    ++pos_;  // '{'
    skip_space();
    if (consume("}")) return true;
    while (true) {
      skip_space();
      std::string name;
      if (pos_ >= text_.size() || text_[pos_] != '"' || !parse_string(name)) return false;
      skip_space();
      if (!consume(":")) return false;
      Value member;
      if (!parse_value(member, depth + 1)) return false;
      value.members.emplace_back(std::move(name), std::move(member));
      skip_space();
      if (consume("}")) return true;
      if (!consume(",")) return false;
    }
  }

  bool parse_array(Value& value, int depth) {
    value.kind = Value::Kind::kArray;
    ++pos_;  // '['
    skip_space();
    if (consume("]")) return true;
    while (true) {
      Value item;
      if (!parse_value(item, depth + 1)) return false;
      value.items.push_back(std::move(item));
      skip_space();
      if (consume("]")) return true;
      if (!consume(",")) return false;
    }
  }

  bool parse_hex4(uint32_t& code) {
    if (pos_ + 4 > text_.size()) return false;
    const char* begin = text_.data() + pos_;
    const auto [end, error] = std::from_chars(begin, begin + 4, code, 16);
    if (error != std::errc() || end != begin + 4) return false;
    pos_ += 4;
    return true;
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  bool parse_string(std::string& out) {
    ++pos_;  // '"'
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      switch (text_[pos_++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t code = 0;
          if (!parse_hex4(code)) return false;
          if (code >= 0xD800 && code < 0xDC00) {  // a surrogate pair: the low half follows
            uint32_t low = 0;
            if (!consume("\\u") || !parse_hex4(low) || low < 0xDC00 || low >= 0xE000) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code < 0xE000) {
            return false;
          }
          append_utf8(out, code);
          break;
        }
        default:
          return false;
      }
    }
    return false;  // unterminated
  }

  bool parse_number(Value& value) {
    // RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const size_t start = pos_;
    auto digits = [&] {
      const size_t first = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      return pos_ - first;
    };
    consume("-");
    if (consume("0")) {
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') return false;
    } else if (digits() == 0) {
      return false;
    }
    if (consume(".") && digits() == 0) return false;
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (!consume("+")) consume("-");
      if (digits() == 0) return false;
    }
    value.kind = Value::Kind::kNumber;
    const auto [end, error] =
        std::from_chars(text_.data() + start, text_.data() + pos_, value.number);
    return end == text_.data() + pos_ && error != std::errc::invalid_argument;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const Value* Value::find(std::string_view name) const {
  const Value* found = nullptr;
  for (const auto& [member, value] : members) {
    if (member == name) found = &value;
  }
  return found;
}

std::optional<Value> parse(std::string_view text) {
  return Parser(text).document();
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `text` (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF), or 0 if it is not one.
size_t utf8_sequence_length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
          out += escaped;
        } else if (static_cast<unsigned char>(c) < 0x80) {
          out += c;
        } else if (const size_t length = utf8_sequence_length(text.substr(i)); length > 0) {
          out.append(text.substr(i, length));
          i += length - 1;
        } else {
          // A JSON text is UTF-8 (RFC 8259): a byte that is not (a Latin-1 path in an error
          // message, a multi-byte character cut short) becomes U+FFFD, as Python's decoder
          // would make it with errors="replace", instead of making the whole file unreadable.
          out += "\\ufffd";
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace shmccl::json
