// ComfyUI prompt weighting ("(word:1.2)", "(word)" = x1.1, escaped \( \)) and the 77-token
// chunking of comfy/sd1_clip.py (SDTokenizer.tokenize_with_weights), for any Tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/clip_tokenizer.h"

namespace hr {

// A piece of prompt text with the weight ComfyUI's token_weights gives it.
struct WeightedSegment {
  std::string text;  // escapes already resolved: "\(" is "(" here
  double weight = 1.0;
};

// ComfyUI's escape_important + token_weights + unescape_important: top-level parenthesised
// groups multiply the weight by 1.1 (nested: 1.1 * 1.1), "(text:w)" sets it to w (the part after
// the last ':' when that ':' is not the first character and w parses as a Python float).
// Square brackets and unbalanced parentheses are ordinary text. Weights are doubles so that
// "((x))" is exactly 1.2100000000000002, as in Python.
std::vector<WeightedSegment> prompt_parse_weights(std::string_view text);

// The words SDTokenizer tokenizes one by one: `text` split before every " embedding:" /
// "\nembedding:" (that space or newline dropped), empty words removed.
std::vector<std::string> prompt_split_words(const std::string& text);

// What escape_important + unescape_important leave of a text whose weights are disabled
// (disable_weights=True, as the LLM tokenizers of Z-Image and Qwen-Image call it): "\(" -> "(",
// "\)" -> ")".
std::string prompt_unescape_parens(std::string_view text);

// Token rows for one prompt: [BOS] ... EOS [pad...]; with pad_to_max_length every row has
// max_length tokens.
struct TokenChunks {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<double>> weights;

  size_t size() const { return ids.size(); }
  // True when every token weight is exactly 1 (then ComfyUI skips the empty-prompt row).
  bool unweighted() const;
};

// SDTokenizer's constructor arguments (comfy/sd1_clip.py); the defaults are CLIP's.
struct ChunkOptions {
  int max_length = 77;
  // Padding id: the tokenizer's EOS for SD1 / SDXL CLIP-L (pad_with_end), 0 for SDXL bigG and T5.
  int32_t pad = CLIPTokenizer::kEOS;
  // Groups this long or longer are split across chunks; shorter ones move whole.
  int max_word_length = 8;
  // has_start_token: every row begins with the tokenizer's bos() (T5 has none).
  bool start_token = true;
  // pad_to_max_length: every row is padded to max_length; otherwise rows end at their EOS and
  // only min_length pads the last one.
  bool pad_to_max_length = true;
  // min_padding: this many pads follow the last row's EOS (before the two rules above; the
  // T5TokenizerOptions node sets it and min_length).
  int min_padding = 0;
  // min_length: the last row is padded to at least this many tokens (0: no minimum).
  int min_length = 0;
};

// SDTokenizer.tokenize_with_weights: each weighted segment (further split before every
// " embedding:" / "\nembedding:" word) is tokenized alone and forms one group; groups fill
// chunks of [BOS] + tokens + EOS, at most max_length. A group that does not fit is split when
// it has max_word_length tokens or more (the chunk is filled first); otherwise the chunk is
// closed (EOS, padding) and the group starts the next chunk. An empty prompt gives one chunk.
TokenChunks prompt_tokenize(const Tokenizer& tokenizer, std::string_view text,
                            const ChunkOptions& options = {});

// The row ComfyUI encodes as the reference for weighting (gen_empty_tokens):
// [BOS, EOS, pad, ..., pad] of max_length tokens ([EOS, pad, ...] without a start token).
std::vector<int32_t> prompt_empty_row(const Tokenizer& tokenizer, const ChunkOptions& options = {});

}  // namespace hr
