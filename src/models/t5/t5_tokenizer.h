// The T5 v1.1 SentencePiece Unigram tokenizer (T5-XXL: Flux.1, SD3.5, Chroma, HiDream) as
// Hugging Face `tokenizers` runs its tokenizer.json, and ComfyUI's chunking rule for it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/clip_tokenizer.h"
#include "models/prompt_weights.h"
#include "models/t5/t5_normalizer.h"

namespace hr {

// Note [T5 tokenization rule] in the .cpp: special tokens cut out of the raw text, each other
// part normalised (Note [T5 normalizer]), spaces -> U+2581 with U+2581 prepended to the part at
// the start of the text, split before every U+2581, Viterbi over piece scores per word with
// unknown characters as one fused <unk>; `tokenizers` then appends </s>.
class T5Tokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kPad = 0;  // <pad>
  static constexpr int32_t kEOS = 1;  // </s>
  static constexpr int32_t kUnk = 2;  // <unk>
  static constexpr int32_t kNoBOS = -1;

  // The vocabulary compiled into headroom (data/t5_tokenizer).
  static Result<std::unique_ptr<T5Tokenizer>> load_builtin();
  // A Hugging Face tokenizer.json of this kind (T5 v1.1 layout, checked as make_t5_vocab.py
  // checks it); `path` may also be the folder that holds it.
  static Result<std::unique_ptr<T5Tokenizer>> load_json(const std::string& path);
  // From pieces (in id order), their scores and the precompiled charsmap blob; `name` appears in
  // error messages.
  static Result<std::unique_ptr<T5Tokenizer>> load_pieces(std::vector<std::string> pieces,
                                                          std::vector<float> scores,
                                                          std::string_view charsmap,
                                                          const std::string& name);

  // Token ids without the trailing </s> (ComfyUI drops it per word and adds its own).
  std::vector<int32_t> encode(std::string_view text) const override;
  // What `tokenizers` returns for the text: encode() + </s>.
  std::vector<int32_t> encode_with_eos(std::string_view text) const;
  int32_t bos() const override { return kNoBOS; }  // T5 has none: ChunkOptions::start_token
  int32_t eos() const override { return kEOS; }
  const char* kind() const override { return "t5-unigram"; }

  size_t vocab_size() const { return pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_.at(size_t(id)); }
  std::optional<int32_t> id_of(std::string_view piece) const;
  // The normalizer sequence alone (for tests and debugging).
  std::string normalize(std::string_view text) const { return t5_normalize(charsmap_, text); }

 private:
  T5Tokenizer() = default;
  // load_json after parsing; nlohmann::json::exception on a field of the wrong type.
  static Result<std::unique_ptr<T5Tokenizer>> load_json_document(const nlohmann::json& j,
                                                                 const std::string& path);
  // One word (starting with U+2581 or not) through the Unigram lattice.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // A part of the text between special tokens; `at_start` when it begins the text.
  void encode_part(std::string_view part, bool at_start, std::vector<int32_t>& out) const;

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string_view, int32_t> ids_;      // views into pieces_
  std::vector<std::pair<std::string, int32_t>> specials_;  // <pad> </s> <unk> <extra_id_N>
  size_t max_piece_bytes_ = 0;
  double unk_score_ = 0;
  PrecompiledCharsmap charsmap_;
};

// ComfyUI's T5XXLTokenizer settings for SDTokenizer (comfy/text_encoders/sd3_clip.py): no start
// token, </s> ends the one row, padding with <pad> (0) up to `min_length` (Flux: 256,
// comfy/text_encoders/flux.py; SD3: 77), no maximum (99999999), words of 8+ tokens split.
ChunkOptions t5xxl_chunk_options(int min_length);

// A user's T5 tokenizer.json, which overrides the built-in one: $HEADROOM_T5_TOKENIZER (the file
// or its folder), <models_dir>/t5_tokenizer/tokenizer.json. nullopt when there is none.
std::optional<std::string> t5_tokenizer_find(const std::string& models_dir);

// The T5 tokenizer from t5_tokenizer_find's file or the built-in one, loaded once and shared.
Result<std::shared_ptr<const T5Tokenizer>> t5_tokenizer_shared(const std::string& models_dir);

}  // namespace hr
