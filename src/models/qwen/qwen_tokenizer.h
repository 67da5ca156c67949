// The Qwen byte-level BPE tokenizer (Qwen2/2.5/3 text encoders) as transformers' Qwen2Tokenizer
// runs it: added tokens cut out whole, the Qwen2 pre-tokenizer, GPT-2 bytes, ranked merges.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace hr {

// Which added tokens sit at ids 151665-151668 (Note [Qwen added tokens] in the .cpp).
enum class QwenAddedTokens {
  CONFIG,  // tokenizer_config.json as given: ComfyUI's qwen25_tokenizer (<|img|>, ...,
           // <|endofmeta|>)
  QWEN3,   // Qwen3's: <tool_response>, </tool_response>, <think>, </think>
};

struct QwenAddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
};

class QwenTokenizer {
 public:
  static constexpr int32_t kEndOfText = 151643;  // <|endoftext|>: Qwen's pad token
  static constexpr int32_t kImStart = 151644;    // <|im_start|>
  static constexpr int32_t kImEnd = 151645;      // <|im_end|>

  // The files compiled into headroom (data/qwen_tokenizer).
  static Result<std::unique_ptr<QwenTokenizer>> load_builtin(
      QwenAddedTokens added = QwenAddedTokens::CONFIG);
  // A folder with vocab.json, merges.txt and tokenizer_config.json.
  static Result<std::unique_ptr<QwenTokenizer>> load(const std::string& dir, QwenAddedTokens added);
  // From the three files' contents; `name` (the folder) appears in error messages.
  static Result<std::unique_ptr<QwenTokenizer>> load_text(std::string_view vocab_json,
                                                          std::string_view merges_txt,
                                                          std::string_view tokenizer_config_json,
                                                          QwenAddedTokens added,
                                                          const std::string& name);

  // Token ids of `text`: no BOS/EOS, no padding, no truncation. Results per piece are cached
  // (thread-safe).
  std::vector<int32_t> encode(std::string_view text) const;
  // The UTF-8 text of `ids` (added tokens as their content; an unknown id is skipped). Bytes
  // that do not form valid UTF-8 are returned as they are.
  std::string decode(std::span<const int32_t> ids) const;

  size_t vocab_size() const { return vocab_.size(); }  // BPE pieces, without added tokens
  size_t merge_count() const { return ranks_.size(); }
  const std::vector<QwenAddedToken>& added_tokens() const { return added_; }
  // The id of a BPE piece (in byte-level symbols, e.g. "Ġhello") or of an added token.
  std::optional<int32_t> id_of(std::string_view piece) const;

 private:
  QwenTokenizer() = default;
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> pieces_;  // by id; added tokens included
  // Merge rank by the pair's two symbols joined with a space (the merges.txt line).
  std::unordered_map<std::string, int32_t> ranks_;
  std::vector<QwenAddedToken> added_;  // longest content first (Note [Qwen added tokens])
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// A user's Qwen tokenizer folder (vocab.json, merges.txt, tokenizer_config.json), which overrides
// the built-in files: $HEADROOM_QWEN_TOKENIZER, <models_dir>/qwen_tokenizer,
// <models_dir>/tokenizers/qwen. nullopt when there is none.
std::optional<std::string> qwen_tokenizer_find(const std::string& models_dir);

// The tokenizer from the folder qwen_tokenizer_find names, else the built-in files; loaded once
// per (folder, added-token set) and shared (loading parses 4 MB of JSON and merges).
Result<std::shared_ptr<const QwenTokenizer>> qwen_tokenizer_shared(const std::string& models_dir,
                                                                   QwenAddedTokens added);

}  // namespace hr
