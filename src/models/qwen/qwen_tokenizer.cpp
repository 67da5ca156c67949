// The Qwen byte-level BPE tokenizer: loading vocab.json, merges.txt and the added tokens of
// tokenizer_config.json, encoding (added tokens, pre-tokenizer, BPE) and decoding.
#include "models/qwen/qwen_tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/file_read.h"
#include "core/json_parse.h"
#include "models/bpe.h"
#include "models/byte_level.h"
#include "models/qwen/qwen_pretokenizer.h"
#include "models/qwen/qwen_vocab_data.h"
#include "models/utf8.h"

namespace hr {

// Note [Qwen added tokens]
// The added tokens are those of tokenizer_config.json's "added_tokens_decoder" (id -> content,
// special), all with lstrip/rstrip false and normalized false: both transformers tokenizers
// cut them out of the raw text before anything else, taking at each position the longest one
// that starts there (a trie in the slow tokenizer, leftmost-longest Aho-Corasick in
// `tokenizers`), special or not. The text between them goes through NFC, the pre-tokenizer and
// BPE. ComfyUI's qwen25_tokenizer folder, which it also uses for Qwen3 (z_image.py), has Qwen2.5's
// 151643-151664 plus its own <|img|>, <|endofimg|>, <|meta|>, <|endofmeta|> at 151665-151668;
// Qwen3's tokenizer_config.json has <tool_response> (151665), </tool_response> (151666),
// <think> (151667) and </think> (151668) there, not special (facts: Qwen/Qwen3-4B
// tokenizer_config.json; torchtune's QWEN3_SPECIAL_TOKENS). QwenAddedTokens::QWEN3 swaps them in.
// Neither set changes the ids of the Z-Image template, which holds only <|im_start|>/<|im_end|>.

namespace {

constexpr int32_t kQwen3FirstOwn = 151665;
const QwenAddedToken kQwen3Own[] = {{"<tool_response>", 151665, false},
                                    {"</tool_response>", 151666, false},
                                    {"<think>", 151667, false},
                                    {"</think>", 151668, false}};

Result<std::vector<QwenAddedToken>> parse_added_tokens(std::string_view config_text,
                                                       QwenAddedTokens which,
                                                       const std::string& name) {
  Result<nlohmann::json> parsed = json_parse(config_text);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& config = parsed.value();
  if (!config.is_object() || !config.contains("added_tokens_decoder") ||
      !config["added_tokens_decoder"].is_object())
    return make_error(ErrorCode::CORRUPT, "'{}/tokenizer_config.json' has no added_tokens_decoder",
                      name);
  std::vector<QwenAddedToken> out;
  for (auto it = config["added_tokens_decoder"].begin(); it != config["added_tokens_decoder"].end();
       ++it) {
    const nlohmann::json& v = it.value();
    if (!v.is_object() || !v.contains("content") || !v["content"].is_string())
      return make_error(ErrorCode::CORRUPT,
                        "'{}/tokenizer_config.json': added token {} has no content", name,
                        it.key());
    QwenAddedToken t;
    t.content = v["content"].get<std::string>();
    if (t.content.empty())
      return make_error(ErrorCode::CORRUPT, "'{}/tokenizer_config.json': added token {} is empty",
                        name, it.key());
    const std::string& key = it.key();
    if (key.empty() || key.size() > 9 ||
        !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return make_error(ErrorCode::CORRUPT, "'{}/tokenizer_config.json': added token id '{}'", name,
                        key);
    t.id = std::stoi(key);
    t.special = v.value("special", false);
    if (which == QwenAddedTokens::QWEN3 && t.id >= kQwen3FirstOwn) continue;
    out.push_back(std::move(t));
  }
  if (which == QwenAddedTokens::QWEN3)
    out.insert(out.end(), std::begin(kQwen3Own), std::end(kQwen3Own));
  std::stable_sort(out.begin(), out.end(), [](const QwenAddedToken& a, const QwenAddedToken& b) {
    return a.content.size() > b.content.size();
  });
  return out;
}

}  // namespace

Result<std::unique_ptr<QwenTokenizer>> QwenTokenizer::load_builtin(QwenAddedTokens added) {
  return load_text(qwen_vocab_json(), qwen_merges_txt(), qwen_tokenizer_config_json(), added,
                   "<built-in qwen_tokenizer>");
}

Result<std::unique_ptr<QwenTokenizer>> QwenTokenizer::load(const std::string& dir,
                                                           QwenAddedTokens added) {
  HR_ASSIGN_OR_RETURN(std::string vocab, file_read(dir + "/vocab.json"));
  HR_ASSIGN_OR_RETURN(std::string merges, file_read(dir + "/merges.txt"));
  HR_ASSIGN_OR_RETURN(std::string config, file_read(dir + "/tokenizer_config.json"));
  return load_text(vocab, merges, config, added, dir);
}

Result<std::unique_ptr<QwenTokenizer>> QwenTokenizer::load_text(
    std::string_view vocab_json, std::string_view merges_txt,
    std::string_view tokenizer_config_json, QwenAddedTokens added, const std::string& name) {
  std::unique_ptr<QwenTokenizer> t(new QwenTokenizer());
  HR_ASSIGN_OR_RETURN(t->vocab_, bpe_read_vocab(vocab_json, name + "/vocab.json"));
  HR_ASSIGN_OR_RETURN(t->added_, parse_added_tokens(tokenizer_config_json, added, name));

  HR_ASSIGN_OR_RETURN(t->ranks_, bpe_read_merges(merges_txt, name + "/merges.txt"));

  // Every byte symbol must be a piece, so that encoding never meets an unknown symbol.
  for (const std::string& sym : byte_level_symbols())
    if (!t->vocab_.count(sym))
      return make_error(ErrorCode::CORRUPT, "'{}/vocab.json' lacks the byte symbol '{}'", name,
                        sym);

  int32_t max_id = 0;
  for (const auto& [piece, id] : t->vocab_) max_id = std::max(max_id, id);
  for (const QwenAddedToken& a : t->added_) max_id = std::max(max_id, a.id);
  t->pieces_.resize(size_t(max_id) + 1);
  for (const auto& [piece, id] : t->vocab_) t->pieces_[size_t(id)] = piece;
  return t;
}

std::optional<int32_t> QwenTokenizer::id_of(std::string_view piece) const {
  for (const QwenAddedToken& a : added_)
    if (a.content == piece) return a.id;
  auto it = vocab_.find(std::string(piece));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Byte-level BPE of one pre-tokenized piece: lowest-ranked adjacent pair first, every occurrence
// of it merged left to right, until no pair of merges.txt is left.
void QwenTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const auto& sym = byte_level_symbols();
  std::vector<std::string> parts;
  parts.reserve(piece.size());
  for (char ch : piece) parts.push_back(sym[uint8_t(ch)]);
  parts = bpe_merge(std::move(parts), ranks_);
  std::vector<int32_t> ids;
  ids.reserve(parts.size());
  for (const std::string& p : parts) {
    auto v = vocab_.find(p);
    if (v != vocab_.end()) {
      ids.push_back(v->second);
    } else {  // a merge whose result is not a piece (none in Qwen's files): fall back to bytes
      for (char32_t c : utf8_decode(p)) {
        std::string one;
        utf8_append(c, one);
        ids.push_back(vocab_.at(one));
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() > 200000) cache_.clear();
  cache_.emplace(piece, std::move(ids));
}

void QwenTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  for (const std::string& piece : qwen_pretokenize(text)) encode_piece(piece, out);
}

std::vector<int32_t> QwenTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t plain_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    const QwenAddedToken* hit = nullptr;
    for (const QwenAddedToken& a : added_)  // longest first (Note [Qwen added tokens])
      if (a.content[0] == text[i] && text.substr(i, a.content.size()) == a.content) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain_begin, i - plain_begin), out);
    out.push_back(hit->id);
    i += hit->content.size();
    plain_begin = i;
  }
  encode_plain(text.substr(plain_begin), out);
  return out;
}

std::string QwenTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    auto added = std::find_if(added_.begin(), added_.end(),
                              [&](const QwenAddedToken& a) { return a.id == id; });
    if (added != added_.end()) {
      out += added->content;
      continue;
    }
    if (id < 0 || size_t(id) >= pieces_.size()) continue;
    for (char32_t c : utf8_decode(pieces_[size_t(id)])) {
      int b = byte_level_byte(c);
      if (b >= 0) out.push_back(char(b));
    }
  }
  return out;
}

std::optional<std::string> qwen_tokenizer_find(const std::string& models_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("HEADROOM_QWEN_TOKENIZER"); e && *e) candidates.emplace_back(e);
  if (!models_dir.empty()) {
    candidates.push_back(models_dir + "/qwen_tokenizer");
    candidates.push_back(models_dir + "/tokenizers/qwen");
  }
  for (const std::string& dir : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / "vocab.json", ec) &&
        fs::is_regular_file(fs::path(dir) / "merges.txt", ec) &&
        fs::is_regular_file(fs::path(dir) / "tokenizer_config.json", ec))
      return dir;
  }
  return std::nullopt;
}

Result<std::shared_ptr<const QwenTokenizer>> qwen_tokenizer_shared(const std::string& models_dir,
                                                                   QwenAddedTokens added) {
  std::optional<std::string> dir = qwen_tokenizer_find(models_dir);
  const std::pair<std::string, QwenAddedTokens> key{dir.value_or(""), added};  // "": built in
  static std::mutex mu;
  static std::map<std::pair<std::string, QwenAddedTokens>, std::shared_ptr<const QwenTokenizer>>
      loaded;
  std::lock_guard lock(mu);
  auto it = loaded.find(key);
  if (it != loaded.end()) return it->second;
  Result<std::unique_ptr<QwenTokenizer>> t =
      dir ? QwenTokenizer::load(*dir, added) : QwenTokenizer::load_builtin(added);
  if (!t.ok()) return t.status();
  std::shared_ptr<const QwenTokenizer> shared = std::move(t).value();
  loaded.emplace(key, shared);
  return shared;
}

}  // namespace hr
