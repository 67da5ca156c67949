// CLIP BPE tokenizer, prompt weighting and 77-token chunking against golden-tokenizer.json.
#include "models/clip_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/prompt_weights.h"
#include "test_paths.h"

namespace hr {
namespace {

// The shared vocabulary, or null (with a test failure) when ../shared is not there.
const CLIPTokenizer* clip_ptr() {
  static std::unique_ptr<CLIPTokenizer> t = [] {
    auto r = CLIPTokenizer::load(test::clip_vocab_dir());
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return t.get();
}
const CLIPTokenizer& clip() { return *clip_ptr(); }

nlohmann::json golden_tokenizer() {
  std::ifstream f(test::golden_path("golden-tokenizer.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(CLIPTokenizer, LoadsVocabAndSpecials) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  EXPECT_EQ(clip().vocab_size(), 49408u);
  EXPECT_EQ(clip().bos(), 49406);
  EXPECT_EQ(clip().eos(), 49407);
}

TEST(CLIPTokenizer, MatchesGoldenPlainBPE) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  nlohmann::json g = golden_tokenizer();
  int matched = 0, total = 0;
  for (const auto& p : g["prompts"]) {
    std::vector<int32_t> ids{clip().bos()};
    for (int32_t id : clip().encode(p["text"].get<std::string>())) ids.push_back(id);
    ids.push_back(clip().eos());
    auto want = p["hf_clip_tokenizer_input_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, want) << "prompt " << p["name"];
    matched += ids == want;
    ++total;
  }
  std::printf("plain BPE: %d / %d prompts exact\n", matched, total);
}

void check_chunks(const nlohmann::json& want, const TokenChunks& got, const std::string& what) {
  auto ids = want["ids"].get<std::vector<std::vector<int32_t>>>();
  auto weights = want["weights"].get<std::vector<std::vector<double>>>();
  EXPECT_EQ(got.ids, ids) << what;
  EXPECT_EQ(got.weights, weights) << what;  // exact: Python doubles
  for (const auto& row : got.ids) EXPECT_EQ(row.size(), 77u) << what;
}

TEST(PromptTokenize, MatchesGoldenChunksSD1AndBigG) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  nlohmann::json g = golden_tokenizer();
  int matched = 0, total = 0;
  for (const auto& p : g["prompts"]) {
    const std::string text = p["text"].get<std::string>();
    const std::string name = p["name"].get<std::string>();
    TokenChunks sd1 =
        prompt_tokenize(clip(), text, {.pad = g["pad_sd1_and_sdxl_clip_l"].get<int32_t>()});
    check_chunks(p["sd1_and_sdxl_clip_l"], sd1, name + " (sd1)");
    TokenChunks big_g = prompt_tokenize(clip(), text, {.pad = g["pad_sdxl_clip_g"].get<int32_t>()});
    check_chunks(p["sdxl_clip_g"], big_g, name + " (bigG)");
    matched += sd1.ids == p["sd1_and_sdxl_clip_l"]["ids"].get<std::vector<std::vector<int32_t>>>();
    matched += big_g.ids == p["sdxl_clip_g"]["ids"].get<std::vector<std::vector<int32_t>>>();
    total += 2;
  }
  std::printf("chunked ids: %d / %d prompt variants exact\n", matched, total);
}

TEST(PromptWeights, ParsesComfyUISyntax) {
  auto seg = prompt_parse_weights("a (b) ((c)) (d:0.5) ((e:1.5)) [f] \\(g\\) (h:x) (:2)");
  std::vector<std::pair<std::string, double>> got;
  for (auto& s : seg) got.emplace_back(s.text, s.weight);
  std::vector<std::pair<std::string, double>> want = {
      {"a ", 1.0}, {"b", 1.1}, {" ", 1.0},         {"c", 1.1 * 1.1}, {" ", 1.0}, {"d", 0.5},
      {" ", 1.0},  {"e", 1.5}, {" [f] (g) ", 1.0}, {"h:x", 1.1},     {" ", 1.0}, {":2", 1.1}};
  EXPECT_EQ(got, want);
  // Unbalanced parentheses stay text.
  auto open = prompt_parse_weights("a (b c");
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[1].text, "(b c");
  EXPECT_EQ(open[1].weight, 1.0);
  // Python float spellings.
  EXPECT_EQ(prompt_parse_weights("(x: 1_0 )")[0].weight, 10.0);
  EXPECT_EQ(prompt_parse_weights("(x:1e-1)")[0].weight, 0.1);
  EXPECT_EQ(prompt_parse_weights("(x:0x10)")[0].text, "x:0x10");
}

TEST(PromptTokenize, EmptyAndBoundaries) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  TokenChunks e = prompt_tokenize(clip(), "");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e.ids[0][0], 49406);
  EXPECT_EQ(e.ids[0][1], 49407);
  EXPECT_TRUE(e.unweighted());
  EXPECT_EQ(prompt_empty_row(clip(), {.pad = 0})[2], 0);
  // 200 single-token words: chunks of 75 tokens each, the big group split across them.
  std::string many;
  for (int i = 0; i < 200; ++i) many += "cat ";
  TokenChunks c = prompt_tokenize(clip(), many);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c.ids[0][76], 49407);
  EXPECT_EQ(c.ids[2][50 + 1], 49407);  // 200 - 150 = 50 tokens in the last chunk
}

TEST(CLIPTokenizer, UnicodeClasses) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  using V = std::vector<std::string>;
  EXPECT_EQ(clip_pretokenize("Cafe\xCC\x81 NA\xC3\x8FVE"), (V{"caf\xC3\xA9", "na\xC3\xAFve"}));
  EXPECT_EQ(clip_pretokenize("\xCE\x91\xCE\x98\xCE\x97\xCE\x9D\xCE\x91 \xD0\x9C\xD0\x98\xD0\xA0"),
            (V{"\xCE\xB1\xCE\xB8\xCE\xB7\xCE\xBD\xCE\xB1", "\xD0\xBC\xD0\xB8\xD1\x80"}));
  // Arabic-Indic digits are numbers, one piece each; Devanagari vowel signs are marks.
  EXPECT_EQ(clip_pretokenize("\xD9\xA1\xD9\xA2").size(), 2u);
  EXPECT_EQ(clip_pretokenize("\xE0\xA4\x95\xE0\xA4\xBF"), (V{"\xE0\xA4\x95", "\xE0\xA4\xBF"}));
  EXPECT_EQ(clip_pretokenize("it's 'cause <|endoftext|>x"),
            (V{"it", "'s", "'", "cause", "<|endoftext|>", "x"}));
  EXPECT_EQ(clip().encode("<|endoftext|>"), std::vector<int32_t>{49407});
}

TEST(ByteTokenizer, IdsAndSpecials) {
  ByteTokenizer t;
  EXPECT_EQ(t.encode("A\xC3\xA9"), (std::vector<int32_t>{66, 196, 170}));
  TokenChunks c = prompt_tokenize(t, "hi (x:2)", {.pad = ByteTokenizer::kEOS});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c.ids[0][0], 257);
  EXPECT_EQ(c.ids[0][1], 'h' + 1);
  EXPECT_EQ(c.ids[0][4], 'x' + 1);
  EXPECT_EQ(c.weights[0][4], 2.0);
  EXPECT_EQ(c.ids[0][5], 258);
  EXPECT_EQ(c.ids[0][76], 258);
}

TEST(ClipTokenizerFind, UserFolderOverridesBuiltIn) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  namespace fs = std::filesystem;
  const std::string user = test::clip_vocab_dir();
  fs::path empty = fs::temp_directory_path() / "hr_clip_find_test";
  fs::create_directories(empty);
  setenv("HEADROOM_CLIP_TOKENIZER", user.c_str(), 1);
  std::optional<std::string> found = clip_tokenizer_find("");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, user);
  unsetenv("HEADROOM_CLIP_TOKENIZER");
  EXPECT_FALSE(clip_tokenizer_find(empty.string()).has_value());
  fs::create_directories(empty / "clip_tokenizer");
  fs::copy_file(fs::path(user) / "vocab.json", empty / "clip_tokenizer/vocab.json",
                fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(user) / "merges.txt", empty / "clip_tokenizer/merges.txt",
                fs::copy_options::overwrite_existing);
  found = clip_tokenizer_find(empty.string());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, (empty / "clip_tokenizer").string());
  fs::remove_all(empty);

  auto byte = tokenizer_for_checkpoint({{kCheckpointTokenizerKey, "byte"}}, "");
  ASSERT_TRUE(byte.ok());
  EXPECT_STREQ((*byte)->kind(), "byte");
}

// With no user folder, real checkpoints get the built-in vocabulary, which tokenizes exactly as
// the files in data/clip_tokenizer do (every golden prompt).
TEST(ClipTokenizerBuiltIn, SameAsFilesOnEveryGoldenPrompt) {
  ASSERT_NE(clip_ptr(), nullptr) << "the CLIP vocabulary did not load";
  unsetenv("HEADROOM_CLIP_TOKENIZER");
  auto builtin = CLIPTokenizer::load_builtin();
  ASSERT_TRUE(builtin.ok()) << builtin.status().str();
  EXPECT_EQ((*builtin)->vocab_size(), clip().vocab_size());
  auto t = tokenizer_for_checkpoint({}, "/nonexistent-models-dir");
  ASSERT_TRUE(t.ok()) << t.status().str();
  EXPECT_STREQ((*t)->kind(), "clip-bpe");
  nlohmann::json g = golden_tokenizer();
  size_t n = 0;
  for (const auto& p : g["prompts"]) {
    if (!p.contains("text")) continue;
    std::string text = p["text"].get<std::string>();
    EXPECT_EQ((*t)->encode(text), clip().encode(text)) << text;
    ++n;
  }
  EXPECT_GT(n, 5u);
}

TEST(ClipTokenizerBuiltIn, CorruptTextIsAnError) {
  auto bad = CLIPTokenizer::load_text("[1, 2]", "#version: 0.2\na b\n", "v.json", "m.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::CORRUPT);
  EXPECT_NE(bad.status().message().find("v.json"), std::string::npos);
}

}  // namespace
}  // namespace hr
