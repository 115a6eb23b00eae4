// Copyright 2026 The shmccl Authors. Licensed under the Apache License, Version 2.0.
#include "core/json.h"

#include <gtest/gtest.h>

#include <string>

namespace shmccl::json {
namespace {

TEST(Json, ParsesEveryKindOfValue) {
  const auto value =
      parse(R"( {"a": [1, -2.5e3, true, false, null], "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00",)"
            R"( "o": {}, "e": [], "a": "last wins"} )");
  ASSERT_TRUE(value);
  ASSERT_TRUE(value->is_object());
  EXPECT_EQ(value->members.size(), 5u) << "members kept in file order, repeats included";
  EXPECT_EQ(value->members[0].second.items.size(), 5u);
  EXPECT_EQ(value->members[0].second.items[1].number, -2500);
  EXPECT_TRUE(value->members[0].second.items[2].boolean);
  EXPECT_EQ(value->members[0].second.items[4].kind, Value::Kind::kNull);
  EXPECT_EQ(value->find("s")->string, "q\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(value->find("a")->string, "last wins");
  EXPECT_EQ(value->find("missing"), nullptr);
}

TEST(Json, RejectsWhatIsNotJson) {
  for (const char* text :
       {"", "{", "{\"a\" 1}", "{\"a\": 1,}", "[1 2]", "01", "1.", "-", "1e", "tru", "\"\\x\"",
        "\"unterminated", "\"\\ud800\"", "\"\\udc00\"", "{} {}", "\"a\nb\"", "{'a': 1}", "nul"}) {
    EXPECT_FALSE(parse(text)) << text;
  }
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_FALSE(parse(deep)) << "deeper than the limit";
}

TEST(Json, QuoteRoundTrips) {
  const std::string text = "line 1\nline \"2\"\t\\ \x01 \xc3\xa9";
  EXPECT_EQ(quote(text), "\"line 1\\nline \\\"2\\\"\\t\\\\ \\u0001 \xc3\xa9\"");
  const auto parsed = parse(quote(text));
  ASSERT_TRUE(parsed && parsed->is_string());
  EXPECT_EQ(parsed->string, text);
}

// A JSON text is UTF-8: valid sequences pass as they are, and bytes that are not UTF-8 (a Latin-1
// path in an error message, a character cut short by a length limit, an overlong form, a
// surrogate) become U+FFFD, so that the error file stays readable by a strict decoder.
TEST(Json, QuoteReplacesWhatIsNotUtf8) {
  EXPECT_EQ(quote("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(quote("caf\xe9"), "\"caf\\ufffd\"");                             // Latin-1
  EXPECT_EQ(quote("\xe2\x82"), "\"\\ufffd\\ufffd\"");                        // cut short
  EXPECT_EQ(quote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");                        // overlong '/'
  EXPECT_EQ(quote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");             // a surrogate
  EXPECT_EQ(quote("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // past U+10FFFF
  const auto parsed = parse(quote("caf\xe9"));
  ASSERT_TRUE(parsed && parsed->is_string());
  EXPECT_EQ(parsed->string, "caf\xef\xbf\xbd");
}

}  // namespace
}  // namespace shmccl::json
