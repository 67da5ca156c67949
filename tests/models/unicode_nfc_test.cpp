// Unicode NFC (models/unicode_nfc.h) against Python's unicodedata on every code point with a
// canonical decomposition and on random strings of marks, starters and jamo
// (tests/data/unicode/nfc_cases.json, make_nfc_golden.py).
#include "models/unicode_nfc.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_paths.h"

namespace hr {
namespace {

std::u32string code_points(const nlohmann::json& a) {
  std::u32string s;
  for (const nlohmann::json& v : a) s.push_back(char32_t(v.get<uint32_t>()));
  return s;
}

TEST(UnicodeNFC, MatchesPythonUnicodedata) {
  std::ifstream f(test::data_path("unicode/nfc_cases.json"));
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(ss.str());
  ASSERT_GT(doc["cases"].size(), 2000u);
  size_t bad = 0;
  for (const nlohmann::json& c : doc["cases"]) {
    std::u32string in = code_points(c[0]), want = code_points(c[1]);
    if (unicode_nfc(in) != want && ++bad <= 10) ADD_FAILURE() << "NFC differs for " << c[0];
  }
  EXPECT_EQ(bad, 0u);
}

TEST(UnicodeNFC, CombiningClasses) {
  EXPECT_EQ(unicode_combining_class(U'a'), 0);
  EXPECT_EQ(unicode_combining_class(0x301), 230);  // COMBINING ACUTE ACCENT: above
  EXPECT_EQ(unicode_combining_class(0x323), 220);  // COMBINING DOT BELOW: below
  EXPECT_EQ(unicode_combining_class(0x3099), 8);   // KANA VOICED SOUND MARK
}

}  // namespace
}  // namespace hr
