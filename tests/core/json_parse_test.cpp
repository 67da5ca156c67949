// json_parse: the depth limit (brackets inside strings not counted), the parser's refusals
// (invalid UTF-8, numbers past double's range, bad syntax) and what it accepts as Python does.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace hr {
namespace {

// Appends, not operator+: GCC 12's -Wrestrict misfires on chains of + with long strings.
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

std::string nested(int depth) {
  return cat({std::string(size_t(depth), '['), "0", std::string(size_t(depth), ']')});
}

TEST(JsonParse, DepthAtTheLimitIsAcceptedOneMoreIsRefused) {
  EXPECT_TRUE(json_parse(nested(kJsonMaxDepth)).ok());
  Result<nlohmann::json> deep = json_parse(nested(kJsonMaxDepth + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(deep.status().message(), "JSON nested deeper than 256 levels");
}

TEST(JsonParse, IssueThirtyFiveNestingIsRefusedQuickly) {
  const std::string body = cat({R"({"prompt": {}, "extra_data": {"x": )", nested(100000), "}}"});
  Result<nlohmann::json> r = json_parse(body);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("256"), std::string::npos);
  // Unclosed brackets count as well: the scan does not wait for the end of the text.
  EXPECT_FALSE(json_parse(std::string(100000, '{')).ok());
}

TEST(JsonParse, BracketsInStringsDoNotCount) {
  const std::string s = cat({"[\"", std::string(1000, '['), "\\\"", std::string(1000, '{'), "\"]"});
  Result<nlohmann::json> r = json_parse(s);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ((*r)[0].get<std::string>().size(), 2001u);
  EXPECT_EQ(json_depth(R"(["\\", [[]]])", 10), 3);  // an escaped backslash ends no string
}

TEST(JsonParse, StoredValuesHaveRoomForTheirEnvelope) {
  EXPECT_FALSE(json_parse(nested(kJsonMaxDepth + 3)).ok());
  EXPECT_TRUE(json_parse(nested(kJsonMaxDepth + 3), kJsonStoredMaxDepth).ok());
  EXPECT_FALSE(json_parse(nested(kJsonStoredMaxDepth + 1), kJsonStoredMaxDepth).ok());
}

TEST(JsonParse, MalformedInputIsRefusedWithTheParsersReason) {
  for (const std::string bad : {"{not json", "", "[1, 2", "\"\xff\xfe\"", "\"\xc3\"", "1e999",
                                "-1e400", "[1] [2]", "{\"a\" 1}", "nul"}) {
    Result<nlohmann::json> r = json_parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("not valid JSON: ", 0), 0u) << r.status().message();
  }
  EXPECT_FALSE(json_parse(std::string(200000, '9')).ok());  // 1e200000: past double's range
}

TEST(JsonParse, AcceptsWhatPythonAccepts) {
  Result<nlohmann::json> dup = json_parse(R"({"a": 1, "a": 2})");
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ((*dup)["a"], 2);  // the last duplicate wins, as in Python's json
  Result<nlohmann::json> big = json_parse("123456789012345678901234567890");
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->is_number_float());
  EXPECT_TRUE(json_parse("\"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00\"").ok());
  EXPECT_TRUE(json_parse(cat({std::string(1 << 20, ' '), "[1]"})).ok());
}

}  // namespace
}  // namespace hr
