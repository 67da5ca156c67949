// The T5 v1.1 Unigram tokenizer and ComfyUI's T5XXL chunking: against the reference libraries'
// ids in tests/data/t5/t5_tokens_golden.json (make_t5_golden.py), and hand checks read off the
// vocabulary and the charsmap (not goldens: they only catch gross breakage).
#include "models/t5/t5_tokenizer.h"

#include <gtest/gtest.h>

#include <map>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/prompt_weights.h"
#include "models/t5/grapheme.h"
#include "models/utf8.h"
#include "test_paths.h"

namespace hr {
namespace {

const T5Tokenizer& t5() {
  static std::unique_ptr<T5Tokenizer> t = [] {
    auto r = T5Tokenizer::load_builtin();
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return *t;
}

using Ids = std::vector<int32_t>;

TEST(T5Tokenizer, BuiltInVocabulary) {
  EXPECT_EQ(t5().vocab_size(), 32100u);
  EXPECT_EQ(t5().piece(0), "<pad>");
  EXPECT_EQ(t5().piece(1), "</s>");
  EXPECT_EQ(t5().piece(2), "<unk>");
  EXPECT_EQ(t5().piece(3), "\u2581");
  EXPECT_EQ(t5().id_of("<extra_id_0>"), 32099);
  EXPECT_EQ(t5().id_of("<extra_id_99>"), 32000);
  EXPECT_EQ(t5().id_of("\u2581the"), 8);
  EXPECT_EQ(t5().eos(), 1);
  EXPECT_STREQ(t5().kind(), "t5-unigram");
}

// Words whose best segmentation was found by enumerating every segmentation of the word over
// pieces.txt / scores.f32 (a brute force, not the reference library).
TEST(T5Tokenizer, HandCheckedWords) {
  EXPECT_EQ(t5().encode_with_eos("the"), (Ids{8, 1}));
  EXPECT_EQ(t5().encode("hello"), (Ids{21820}));
  EXPECT_EQ(t5().encode("A photograph of a cat on mat"), (Ids{71, 6419, 13, 3, 9, 1712, 30, 6928}));
  EXPECT_EQ(t5().encode("Flux"), (Ids{9507, 226}));
  EXPECT_EQ(t5().encode("café"), (Ids{11949}));
  EXPECT_EQ(t5().encode("2026"), (Ids{460, 2688}));
  // Characters without a piece: one fused <unk> per run.
  EXPECT_EQ(t5().encode("\u4f60\u597d"), (Ids{3, 2}));
  EXPECT_EQ(t5().encode("\U0001F600"), (Ids{3, 2}));
  EXPECT_EQ(t5().encode_with_eos(""), (Ids{1}));
  EXPECT_EQ(t5().encode("   "), (Ids{}));
}

TEST(T5Tokenizer, WhitespaceRunsAreOneWordBreak) {
  EXPECT_EQ(t5().encode("a  b"), t5().encode("a b"));
  EXPECT_EQ(t5().encode("   a"), t5().encode("a"));
  EXPECT_EQ(t5().encode("a \t\n b  "), t5().encode("a b"));
  EXPECT_EQ(t5().encode("a b"), (Ids{3, 9, 3, 115}));
}

TEST(T5Tokenizer, SpecialTokensAreCutOutOfTheText) {
  EXPECT_EQ(t5().encode("<extra_id_0>"), (Ids{32099}));
  EXPECT_EQ(t5().encode("hi</s>"), (Ids{7102, 1}));
  // The part after a special token gets its U+2581 too, as in transformers and ComfyUI (Note [T5
  // tokenization rule]; `tokenizers` alone would give 0, 188).
  EXPECT_EQ(t5().encode("<pad>A"), (Ids{0, 71}));
  EXPECT_EQ(t5().encode("<pad> A"), (Ids{0, 71}));
  EXPECT_EQ(t5().encode("<extra_id_100>").front(), 3);  // not a special token
}

// Expected strings read off charsmap.bin (its trie looked up by hand with a darts reader).
TEST(T5Normalizer, CharsmapPerGraphemeCluster) {
  EXPECT_EQ(t5().normalize("e\u0301"), "\u00e9");  // a two-code-point key
  EXPECT_EQ(t5().normalize("\u00e9"), "\u00e9");   // no key: kept
  EXPECT_EQ(t5().normalize("\ufb01"), "fi");
  EXPECT_EQ(t5().normalize("\u00bd"), "1\u20442");
  EXPECT_EQ(t5().normalize("\uff21\u0301"), "A");   // shortest key of the cluster wins
  EXPECT_EQ(t5().normalize("a\r\nb"), "a b");       // "\r\n" is one cluster -> " "
  EXPECT_EQ(t5().normalize("a\n\nb"), "a\u2581b");  // two clusters -> "  " -> U+2581
  EXPECT_EQ(t5().normalize("x\u2581y"), "x y");
  EXPECT_EQ(t5().normalize("x\x7f"), "x");
  EXPECT_EQ(t5().normalize("x  \u3000"), "x");
}

TEST(Grapheme, Clusters) {
  auto starts = [](std::string_view s) { return grapheme_starts(utf8_decode(s)); };
  using Starts = std::vector<size_t>;
  EXPECT_EQ(starts("ab"), (Starts{0, 1}));
  EXPECT_EQ(starts("e\u0301x"), (Starts{0, 2}));
  EXPECT_EQ(starts("\r\n\n"), (Starts{0, 2}));
  EXPECT_EQ(starts("\U0001F1E9\U0001F1EA\U0001F1EB\U0001F1F7\U0001F1FA"), (Starts{0, 2, 4}));
  EXPECT_EQ(starts("\U0001F468\u200D\U0001F469x"), (Starts{0, 3}));
  EXPECT_EQ(starts("a\u200D\U0001F469"), (Starts{0, 2}));  // GB11 needs a pictograph first
  EXPECT_EQ(starts("\u1100\u1161\u11A8\u1100"), (Starts{0, 3}));
  EXPECT_EQ(starts("\U0001F44D\U0001F3FD"), (Starts{0}));
  EXPECT_EQ(starts(""), (Starts{}));
}

// Against the `regex` module's \X on random strings of every cluster-break class
// (tests/data/t5/make_grapheme_cases.py).
TEST(Grapheme, MatchesRegexModule) {
  std::ifstream f(test::data_path("t5/grapheme_cases.json"));
  ASSERT_TRUE(f) << "tests/data/t5/grapheme_cases.json";
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(ss.str());
  ASSERT_GE(cases.size(), 400u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    EXPECT_EQ(grapheme_starts(utf8_decode(text)), c.at("starts").get<std::vector<size_t>>())
        << nlohmann::json(text).dump(-1, ' ', true);
  }
}

// ComfyUI's T5XXLTokenizer: no start token, </s>, <pad> up to min_length, one row at any length.
TEST(T5Chunks, FluxRule) {
  const ChunkOptions flux = t5xxl_chunk_options(256);
  TokenChunks c = prompt_tokenize(t5(), "a (cat:1.2)", flux);
  ASSERT_EQ(c.size(), 1u);
  ASSERT_EQ(c.ids[0].size(), 256u);
  EXPECT_EQ(Ids(c.ids[0].begin(), c.ids[0].begin() + 5), (Ids{3, 9, 1712, 1, 0}));
  EXPECT_EQ(c.weights[0][2], 1.2);
  EXPECT_EQ(c.weights[0][1], 1.0);
  EXPECT_EQ(c.ids[0].back(), 0);
  TokenChunks e = prompt_tokenize(t5(), "", flux);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e.ids[0].size(), 256u);
  EXPECT_EQ(e.ids[0][0], 1);
  EXPECT_EQ(e.ids[0][1], 0);
  std::string many;
  for (int i = 0; i < 300; ++i) many += "cat ";
  TokenChunks l = prompt_tokenize(t5(), many, flux);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l.ids[0].size(), 301u);
  EXPECT_EQ(l.ids[0].back(), 1);
  ChunkOptions padded = flux;  // the T5TokenizerOptions node
  padded.min_padding = 3;
  padded.min_length = 0;
  EXPECT_EQ(prompt_tokenize(t5(), "cat", padded).ids[0], (Ids{1712, 1, 0, 0, 0}));
  std::vector<int32_t> empty =
      prompt_empty_row(t5(), {.max_length = 4, .pad = 0, .start_token = false});
  EXPECT_EQ(empty, (Ids{1, 0, 0, 0}));
}

// ComfyUI's own SDTokenizer with the T5XXLTokenizer arguments, run on headroom's byte rule
// (tests/data/t5/make_t5_chunk_golden.py): weights, splits, padding and chunking alone.
TEST(T5Chunks, MatchComfyUIOnByteTokens) {
  std::ifstream f(test::data_path("t5/t5_chunk_golden.json"));
  ASSERT_TRUE(f) << "tests/data/t5/t5_chunk_golden.json";
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  ASSERT_EQ(g.at("eos").get<int32_t>(), ByteTokenizer::kEOS);
  const ByteTokenizer bytes;
  size_t checked = 0;
  for (const auto& c : g.at("cases")) {
    const nlohmann::json& cfg = g.at("configs").at(c.at("config").get<std::string>());
    ChunkOptions o;
    o.max_length = cfg.at("max_length").get<int>();
    o.pad = 0;  // pad_with_end false
    o.start_token = cfg.at("has_start_token").get<bool>();
    o.pad_to_max_length = cfg.at("pad_to_max_length").get<bool>();
    o.min_length = cfg.at("min_length").is_null() ? 0 : cfg.at("min_length").get<int>();
    if (c.contains("options")) {
      o.min_padding = c.at("options").at("t5xxl_min_padding").get<int>();
      o.min_length = c.at("options").at("t5xxl_min_length").get<int>();
    }
    const std::string text = c.at("text");
    TokenChunks got = prompt_tokenize(bytes, text, o);
    const auto& rows = c.at("rows");
    ASSERT_EQ(got.size(), rows.size()) << c.at("config") << ": " << text;
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(got.ids[r], rows[r].at("ids").get<Ids>()) << c.at("config") << ": " << text;
      EXPECT_EQ(got.weights[r], rows[r].at("weights").get<std::vector<double>>())
          << c.at("config") << ": " << text;
    }
    ++checked;
  }
  EXPECT_GE(checked, 38u);
}

// The built-in files against the tokenizer.json they were derived from, where a checkout has
// ../shared or $HEADROOM_T5_TOKENIZER_JSON names the file (a clone has neither: it skips; the
// derivation itself is checked lossless by data/t5_tokenizer/make_t5_vocab.py).
TEST(T5Tokenizer, BuiltInMatchesTokenizerJson) {
  std::string path = test::source_dir() + "/../shared/data/t5_tokenizer/tokenizer.json";
  if (const char* e = std::getenv("HEADROOM_T5_TOKENIZER_JSON")) path = e;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no T5 tokenizer.json here";
  auto json = T5Tokenizer::load_json(path);
  ASSERT_TRUE(json.ok()) << json.status().str();
  const T5Tokenizer& j = *json.value();
  ASSERT_EQ(j.vocab_size(), t5().vocab_size());
  for (int32_t id = 0; id < int32_t(j.vocab_size()); ++id) ASSERT_EQ(j.piece(id), t5().piece(id));
  for (const char* text :
       {"A photograph of an astronaut riding a horse, 4k",
        "na\u00efve caf\u00e9 \uff21\u0301 \u00bd \u4f60\u597d \U0001F600", "x <extra_id_3> y</s>"})
    EXPECT_EQ(j.encode(text), t5().encode(text)) << text;
}

TEST(T5Tokenizer, LoadJsonRefusesOtherLayouts) {
  auto dir = std::filesystem::temp_directory_path() / "hr_t5_tok_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"normalizer": {"type": "NFKC"}, "model": {}})";
  auto r = T5Tokenizer::load_json(dir.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("normalizer"), std::string::npos) << r.status().str();
  std::filesystem::remove_all(dir);
}

TEST(T5TokenizerFind, UserFileOverridesBuiltIn) {
  auto dir = std::filesystem::temp_directory_path() / "hr_t5_find_test";
  std::filesystem::remove_all(dir);
  EXPECT_EQ(t5_tokenizer_find(dir.string()), std::nullopt);
  auto built_in = t5_tokenizer_shared(dir.string());
  ASSERT_TRUE(built_in.ok()) << built_in.status().str();
  EXPECT_EQ(built_in.value()->vocab_size(), 32100u);
  std::filesystem::create_directories(dir / "t5_tokenizer");
  std::ofstream(dir / "t5_tokenizer" / "tokenizer.json") << "{}";
  EXPECT_EQ(t5_tokenizer_find(dir.string()), (dir / "t5_tokenizer" / "tokenizer.json").string());
  auto user = t5_tokenizer_shared(dir.string());  // the user's file is used, and refused
  EXPECT_FALSE(user.ok());
  std::filesystem::remove_all(dir);
}

// The reference: `tokenizers` / transformers' T5TokenizerFast and ComfyUI's own T5XXLTokenizer
// on the same tokenizer files. The JSON is written on a machine that has those libraries.
TEST(T5TokenizerGolden, MatchesReferenceLibraries) {
  const std::string path = test::data_path("t5/t5_tokens_golden.json");
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run tests/data/t5/make_t5_golden.py on a machine with "
      << "`tokenizers`, `transformers` and the ComfyUI snapshot (see tests/data/t5/README.md) "
      << "and commit its output";
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  size_t checked = 0;
  // Where the two libraries differ (text right after a special token, Note [T5 tokenization
  // rule]), headroom follows transformers, which ComfyUI tokenizes with.
  std::map<std::string, Ids> by_transformers;
  for (const auto& e : g.at("transformers")) by_transformers[e.at("text")] = e.at("ids").get<Ids>();
  size_t differ = 0;
  for (const char* lib : {"tokenizers", "transformers"}) {
    for (const auto& e : g.at(lib)) {
      const std::string text = e.at("text");
      const Ids want = e.at("ids").get<Ids>();
      if (std::string_view(lib) == "tokenizers" && by_transformers.count(text) &&
          by_transformers[text] != want) {
        ++differ;
        continue;
      }
      EXPECT_EQ(t5().encode_with_eos(text), want) << lib << ": " << text;
      ++checked;
    }
  }
  EXPECT_LE(differ, 1u) << "the libraries differ on more texts than the known one";
  for (const char* key : {"comfyui_flux", "comfyui_sd3", "comfyui_flux_options"}) {
    if (!g.contains(key)) {
      ADD_FAILURE() << "golden has no " << key;
      continue;
    }
    for (const auto& e : g.at(key)) {
      const std::string text = e.at("text");
      ChunkOptions options = t5xxl_chunk_options(std::string_view(key) == "comfyui_sd3" ? 77 : 256);
      if (e.contains("min_padding")) options.min_padding = e.at("min_padding").get<int>();
      if (e.contains("min_length")) options.min_length = e.at("min_length").get<int>();
      TokenChunks c = prompt_tokenize(t5(), text, options);
      const auto& rows = e.at("rows");
      ASSERT_EQ(c.size(), rows.size()) << key << ": " << text;
      for (size_t r = 0; r < rows.size(); ++r) {
        EXPECT_EQ(c.ids[r], rows[r].at("ids").get<Ids>()) << key << ": " << text;
        EXPECT_EQ(c.weights[r], rows[r].at("weights").get<std::vector<double>>())
            << key << ": " << text;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 40u);
}

}  // namespace
}  // namespace hr
