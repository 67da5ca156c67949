// The Qwen byte-level BPE tokenizer: the shipped files load with the reference's counts and
// added-token ids, the pre-tokenizer gives the pieces of python `regex` running transformers'
// pattern (tests/data/qwen/pretokenize_pieces.json, make_pretokenize_golden.py), byte-level
// round trips, and ids derived by hand from vocab.json. The ids of the reference tokenizers
// themselves are checked by pending/qwen_tokenizer_golden_test.cpp once its golden exists.
#include "models/qwen/qwen_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "models/qwen/qwen_chat_template.h"
#include "models/qwen/qwen_pretokenizer.h"
#include "test_paths.h"

namespace hr {
namespace {

using Ids = std::vector<int32_t>;

const QwenTokenizer& qwen(QwenAddedTokens added = QwenAddedTokens::CONFIG) {
  static auto load = [](QwenAddedTokens a) {
    auto r = QwenTokenizer::load_builtin(a);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : nullptr;
  };
  static std::unique_ptr<QwenTokenizer> config = load(QwenAddedTokens::CONFIG);
  static std::unique_ptr<QwenTokenizer> qwen3 = load(QwenAddedTokens::QWEN3);
  return added == QwenAddedTokens::CONFIG ? *config : *qwen3;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string qwen_vocab_text() {
  std::ifstream f(test::source_dir() + "/data/qwen_tokenizer/vocab.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const nlohmann::json& vocab_json() {
  static nlohmann::json v = read_json(test::source_dir() + "/data/qwen_tokenizer/vocab.json");
  return v;
}

// The id vocab.json gives a piece (in byte-level symbols).
int32_t vocab_id(const std::string& piece) {
  EXPECT_TRUE(vocab_json().contains(piece)) << piece;
  return vocab_json().value(piece, -1);
}

TEST(QwenTokenizer, ShippedFilesLoadWithTheReferenceCounts) {
  EXPECT_EQ(qwen().vocab_size(), 151643u);  // Qwen's 151,643 BPE pieces
  EXPECT_EQ(qwen().vocab_size(), vocab_json().size());
  EXPECT_EQ(qwen().merge_count(), 151387u);  // merges.txt: 151,388 lines, the first "#version"
  nlohmann::json config =
      read_json(test::source_dir() + "/data/qwen_tokenizer/tokenizer_config.json");
  const nlohmann::json& added = config["added_tokens_decoder"];
  EXPECT_EQ(qwen().added_tokens().size(), added.size());
  for (auto it = added.begin(); it != added.end(); ++it) {
    std::string content = it.value()["content"];
    EXPECT_EQ(qwen().id_of(content), std::stoi(it.key())) << content;
  }
  EXPECT_EQ(qwen().id_of("<|endoftext|>"), QwenTokenizer::kEndOfText);
  EXPECT_EQ(qwen().id_of("<|im_start|>"), QwenTokenizer::kImStart);
  EXPECT_EQ(qwen().id_of("<|im_end|>"), QwenTokenizer::kImEnd);
  EXPECT_EQ(config["pad_token"], "<|endoftext|>");
  EXPECT_EQ(config["eos_token"], "<|im_end|>");
}

TEST(QwenTokenizer, Qwen3AddedTokensReplaceComfyUIsOwn) {
  const QwenTokenizer& q3 = qwen(QwenAddedTokens::QWEN3);
  EXPECT_EQ(q3.added_tokens().size(), qwen().added_tokens().size());
  EXPECT_EQ(q3.id_of("<tool_response>"), 151665);
  EXPECT_EQ(q3.id_of("</tool_response>"), 151666);
  EXPECT_EQ(q3.id_of("<think>"), 151667);
  EXPECT_EQ(q3.id_of("</think>"), 151668);
  EXPECT_EQ(q3.id_of("<|img|>"), std::nullopt);
  EXPECT_EQ(qwen().id_of("<|meta|>"), 151667);
  EXPECT_EQ(qwen().id_of("<think>"), std::nullopt);
  EXPECT_EQ(q3.encode("<think>\n\n</think>"), (Ids{151667, vocab_id("ĊĊ"), 151668}));
  EXPECT_EQ(q3.id_of("<|im_end|>"), QwenTokenizer::kImEnd);
}

// Pieces from python `regex` running transformers' PRETOKENIZE_REGEX on unicodedata's NFC.
TEST(QwenPretokenizer, MatchesTheReferencePattern) {
  nlohmann::json doc = read_json(test::data_path("qwen/pretokenize_pieces.json"));
  ASSERT_GE(doc["cases"].size(), 30u);
  for (const nlohmann::json& c : doc["cases"]) {
    std::string text = c["text"];
    EXPECT_EQ(qwen_pretokenize(text), c["pieces"].get<std::vector<std::string>>()) << text;
  }
}

// decode(encode(s)) is NFC(s), which is the concatenation of the reference's pieces.
TEST(QwenTokenizer, ByteLevelRoundTrip) {
  nlohmann::json doc = read_json(test::data_path("qwen/pretokenize_pieces.json"));
  for (const nlohmann::json& c : doc["cases"]) {
    std::string text = c["text"], nfc;
    for (const nlohmann::json& p : c["pieces"]) nfc += p.get<std::string>();
    Ids ids = qwen().encode(text);
    EXPECT_EQ(qwen().decode(ids), nfc) << text;
    for (int32_t id : ids) EXPECT_LT(id, 151643) << text;  // no added token in these texts
  }
  const std::string with_specials = "a<|im_end|>\n<|endoftext|><|im_start|>b";
  EXPECT_EQ(qwen().decode(qwen().encode(with_specials)), with_specials);
}

// Ids read off vocab.json: a word that is a piece of the vocabulary comes out whole (BPE builds
// every piece from its merges), a space before a word joins it as "Ġ" (U+0120, byte 0x20 in the
// GPT-2 byte table), digits are single pieces, "\n" is "Ċ" (byte 0x0A).
TEST(QwenTokenizer, HandDerivedIds) {
  EXPECT_EQ(qwen().encode(" hello"), (Ids{vocab_id("Ġhello")}));
  EXPECT_EQ(qwen().encode("hello world"), (Ids{vocab_id("hello"), vocab_id("Ġworld")}));
  EXPECT_EQ(qwen().encode("2025"),
            (Ids{vocab_id("2"), vocab_id("0"), vocab_id("2"), vocab_id("5")}));
  EXPECT_EQ(qwen().encode("a<|im_end|>b"), (Ids{vocab_id("a"), 151645, vocab_id("b")}));
  // "<|im_start" without its closing "|>" is plain text, not the added token.
  for (int32_t id : qwen().encode("<|im_start")) EXPECT_LT(id, 151643);
  // Precomposed and decomposed é give the same ids (NFC).
  EXPECT_EQ(qwen().encode("caf\u00e9"), qwen().encode("cafe\u0301"));
}

TEST(ZImagePromptTemplate, WrapsAsQwen3ChatTemplateAndComfyUI) {
  EXPECT_EQ(zimage_prompt_template("a cat"),
            "<|im_start|>user\na cat<|im_end|>\n<|im_start|>assistant\n");
  const Ids nl{vocab_id("Ċ")};
  Ids want{QwenTokenizer::kImStart, vocab_id("user"),      nl[0],
           vocab_id("cat"),         QwenTokenizer::kImEnd, nl[0],
           QwenTokenizer::kImStart, vocab_id("assistant"), nl[0]};
  EXPECT_EQ(zimage_prompt_ids(qwen(), "cat"), want);
  EXPECT_EQ(zimage_prompt_ids(qwen(QwenAddedTokens::QWEN3), "cat"), want);
}

// ComfyUI's path (comfy/sd1_clip.py SDTokenizer with disable_weights): escapes resolved, words
// split before " embedding:" and encoded alone.
TEST(ZImagePromptTemplate, ComfyUIEscapesAndEmbeddingWords) {
  EXPECT_EQ(zimage_comfy_prompt_ids(qwen(), "a red fox, 4k"),
            zimage_prompt_ids(qwen(), "a red fox, 4k"));
  EXPECT_EQ(zimage_comfy_prompt_ids(qwen(), "a \\(cat\\) (dog:1.2)"),
            zimage_prompt_ids(qwen(), "a (cat) (dog:1.2)"));
  Ids want = qwen().encode("<|im_start|>user\nx");
  Ids rest = qwen().encode("embedding:foo y<|im_end|>\n<|im_start|>assistant\n");
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(zimage_comfy_prompt_ids(qwen(), "x embedding:foo y"), want);
  EXPECT_NE(want, zimage_prompt_ids(qwen(), "x embedding:foo y"));  // " embedding" vs "embedding"
}

// The rank of a merges.txt line ("a b"), or -1 when it is not there.
int merge_rank(const std::string& pair) {
  static const std::unordered_map<std::string, int> ranks = [] {
    std::unordered_map<std::string, int> r;
    std::ifstream f(test::source_dir() + "/data/qwen_tokenizer/merges.txt");
    std::string line;
    std::getline(f, line);  // #version
    for (int i = 0; std::getline(f, line); ++i) r.emplace(line, i);
    return r;
  }();
  auto it = ranks.find(pair);
  return it == ranks.end() ? -1 : it->second;
}

// Ids worked out from merges.txt by hand: the lowest rank merges first, wherever it is.
TEST(QwenTokenizer, HandDerivedMerges) {
  // "a  " at the end of the text: "a", then the two-space run is one piece (\s+(?!\S) at the
  // end); "Ġ Ġ" is merge 0, so the run is the single piece "ĠĠ".
  EXPECT_EQ(merge_rank("Ġ Ġ"), 0);
  EXPECT_EQ(qwen().encode("a  "), (Ids{vocab_id("a"), vocab_id("ĠĠ")}));
  // "aam": "a m" ranks before "a a" and "a am" is no merge, so BPE gives a + am, where merging
  // left to right would start with "aa".
  ASSERT_GE(merge_rank("a m"), 0);
  ASSERT_GT(merge_rank("a a"), merge_rank("a m"));
  ASSERT_EQ(merge_rank("a am"), -1);
  EXPECT_EQ(qwen().encode("aam"), (Ids{vocab_id("a"), vocab_id("am")}));
}

// A user's folder overrides the built-in files; each (folder, set) is loaded once.
TEST(QwenTokenizer, UserFolderOverridesBuiltInAndIsShared) {
  const std::string dir = test::source_dir() + "/data/qwen_tokenizer";
  ::setenv("HEADROOM_QWEN_TOKENIZER", dir.c_str(), 1);
  EXPECT_EQ(qwen_tokenizer_find(""), dir);
  auto a = qwen_tokenizer_shared("", QwenAddedTokens::QWEN3);
  auto b = qwen_tokenizer_shared("", QwenAddedTokens::QWEN3);
  ::unsetenv("HEADROOM_QWEN_TOKENIZER");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().str();
  EXPECT_EQ(a.value().get(), b.value().get());
  EXPECT_EQ(a.value()->id_of("<think>"), 151667);
  EXPECT_EQ(qwen_tokenizer_find(""), std::nullopt);
  EXPECT_EQ(qwen_tokenizer_find(test::source_dir() + "/data"), dir);  // <models_dir>/qwen_tokenizer
}

TEST(QwenTokenizer, CorruptFilesAreErrors) {
  std::string vocab(qwen_vocab_text()), merges = "#version: 0.2\nĠ Ġ\n";
  std::string config = R"({"added_tokens_decoder": {"151643": {"content": "<|endoftext|>"}}})";
  EXPECT_TRUE(QwenTokenizer::load_text(vocab, merges, config, QwenAddedTokens::CONFIG, "t").ok());
  EXPECT_FALSE(QwenTokenizer::load_text("[]", merges, config, QwenAddedTokens::CONFIG, "t").ok());
  EXPECT_FALSE(
      QwenTokenizer::load_text(vocab, "#version\nabc\n", config, QwenAddedTokens::CONFIG, "t")
          .ok());
  EXPECT_FALSE(QwenTokenizer::load_text(vocab, merges, "{}", QwenAddedTokens::CONFIG, "t").ok());
  EXPECT_FALSE(QwenTokenizer::load_text(vocab, merges,
                                        R"({"added_tokens_decoder": {"x1": {"content": "<a>"}}})",
                                        QwenAddedTokens::CONFIG, "t")
                   .ok());
  EXPECT_FALSE(QwenTokenizer::load_text(R"({"a": 0})", merges, config, QwenAddedTokens::CONFIG, "t")
                   .ok());  // lacks the byte symbols
}

}  // namespace
}  // namespace hr
