// Text tokenizers for CLIP text encoders behind one interface: the CLIP BPE (vocab.json +
// merges.txt, the transformers 5 / `tokenizers` rule; built in, a user's copy overrides it) and
// headroom's byte-level tokenizer for `headroom make-model` checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace hr {

// Turns text into token ids (no BOS/EOS; callers add them when they build 77-token rows).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual int32_t bos() const = 0;
  virtual int32_t eos() const = 0;
  virtual const char* kind() const = 0;  // "clip-bpe", "byte" or "t5-unigram"
};

// The OpenAI CLIP BPE as transformers 5 runs it (Note [CLIP tokenization rule] in the .cpp):
// NFC, whitespace runs -> one space, lower-case, split with the CLIP pattern, byte-to-unicode,
// ranked merges with `</w>` on the last symbol. Results per piece are cached (thread-safe).
class CLIPTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBOS = 49406;  // <|startoftext|>
  static constexpr int32_t kEOS = 49407;  // <|endoftext|>

  // `dir` holds vocab.json and merges.txt (first line of merges.txt: "#version: ...").
  static Result<std::unique_ptr<CLIPTokenizer>> load(const std::string& dir);
  static Result<std::unique_ptr<CLIPTokenizer>> load_files(const std::string& vocab_path,
                                                           const std::string& merges_path);
  // The vocabulary compiled into headroom (data/clip_tokenizer).
  static Result<std::unique_ptr<CLIPTokenizer>> load_builtin();
  // From the two files' contents; the names appear in error messages.
  static Result<std::unique_ptr<CLIPTokenizer>> load_text(std::string_view vocab_json,
                                                          std::string_view merges_txt,
                                                          const std::string& vocab_name,
                                                          const std::string& merges_name);

  std::vector<int32_t> encode(std::string_view text) const override;
  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return eos_; }
  const char* kind() const override { return "clip-bpe"; }
  size_t vocab_size() const { return vocab_.size(); }

 private:
  CLIPTokenizer() = default;
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  // Merge rank by the pair's two symbols joined with a space (the merges.txt line).
  std::unordered_map<std::string, int32_t> ranks_;
  int32_t bos_ = kBOS, eos_ = kEOS;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// headroom's own tokenizer for random-weight checkpoints written by `headroom make-model`
// (metadata kCheckpointTokenizerKey = "byte"), so the bundled default needs no external files.
// Scheme: every UTF-8 byte b of the text, as given (no normalisation), is id b + 1 (1..256);
// BOS = 257, EOS = 258; padding uses EOS (or 0 where the encoder pads with 0).
// All ids stay far below the 49408-entry embedding table of CLIP-shaped models.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBOS = 257;
  static constexpr int32_t kEOS = 258;
  std::vector<int32_t> encode(std::string_view text) const override;
  int32_t bos() const override { return kBOS; }
  int32_t eos() const override { return kEOS; }
  const char* kind() const override { return "byte"; }
};

// Checkpoint metadata key naming the tokenizer a checkpoint needs ("byte" or "clip-bpe");
// absent means "clip-bpe" (every real SD checkpoint).
inline constexpr const char* kCheckpointTokenizerKey = "headroom.tokenizer";

// A user's CLIP BPE folder (vocab.json and merges.txt), which overrides the built-in one:
// $HEADROOM_CLIP_TOKENIZER (also set by `--clip-tokenizer`), <models_dir>/clip_tokenizer,
// <models_dir>/tokenizers/clip. nullopt when there is none (the built-in vocabulary is used).
std::optional<std::string> clip_tokenizer_find(const std::string& models_dir);

// The tokenizer a checkpoint with this metadata needs: ByteTokenizer for "byte", else the CLIP
// BPE from the folder clip_tokenizer_find names or the built-in one (loaded once and shared).
Result<std::shared_ptr<const Tokenizer>> tokenizer_for_checkpoint(
    const std::map<std::string, std::string>& metadata, const std::string& models_dir);

// The CLIP pre-tokenization alone (normalised pieces in order), for tests and debugging.
std::vector<std::string> clip_pretokenize(std::string_view text);

}  // namespace hr
