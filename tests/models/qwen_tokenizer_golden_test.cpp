// The Qwen tokenizer against transformers' Qwen2Tokenizer and Qwen2TokenizerFast: every string of
// tests/data/qwen/tokenizer_ids.json (make_tokenizer_golden.py, run on the GPU machine) with both
// added-token sets. NOT BUILT until that golden exists: tests/CMakeLists.txt globs
// tests/models/*.cpp only; move this file to tests/models/qwen_tokenizer_golden_test.cpp then.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/qwen/qwen_tokenizer.h"
#include "test_paths.h"

namespace hr {
namespace {

TEST(QwenTokenizerGolden, EveryStringMatchesTheReference) {
  std::ifstream f(test::data_path("qwen/tokenizer_ids.json"));
  ASSERT_TRUE(f.good()) << "tests/data/qwen/tokenizer_ids.json is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(ss.str());
  auto config = QwenTokenizer::load_builtin(QwenAddedTokens::CONFIG);
  auto qwen3 = QwenTokenizer::load_builtin(QwenAddedTokens::QWEN3);
  ASSERT_TRUE(config.ok() && qwen3.ok());
  size_t checked = 0;
  for (const nlohmann::json& c : doc["cases"]) {
    std::string text = c["text"];
    if (!c["agree"].get<bool>()) {
      std::cout << "skipped (the reference tokenizers disagree): " << nlohmann::json(text) << "\n";
      continue;
    }
    EXPECT_EQ(config.value()->encode(text), c["ids_config"].get<std::vector<int32_t>>())
        << nlohmann::json(text);
    EXPECT_EQ(qwen3.value()->encode(text), c["ids_qwen3"].get<std::vector<int32_t>>())
        << nlohmann::json(text);
    ++checked;
  }
  EXPECT_GE(checked, 30u);  // of 42; disagreements are printed above
}

}  // namespace
}  // namespace hr
