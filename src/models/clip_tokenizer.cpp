// CLIP BPE and byte-level tokenizers and tokenizer discovery (the Unicode facts they use live in
// models/unicode_class.h, the GPT-2 byte table in models/byte_level.h).
#include "models/clip_tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>

#include "core/file_read.h"
#include "models/bpe.h"
#include "models/byte_level.h"
#include "models/clip_vocab_data.h"
#include "models/unicode_class.h"
#include "models/unicode_nfc.h"
#include "models/utf8.h"

namespace hr {

// Note [CLIP tokenization rule]
// transformers 5 (`tokenizers`) runs CLIPTokenizer as: the literal special tokens
// <|startoftext|> / <|endoftext|> are cut out of the raw text first; the rest is normalised
// (Unicode NFC, every whitespace run -> one space, per-code-point lower-case) and split with
//   <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// keeping only the matches (whitespace is dropped, every digit is its own piece). Each piece's
// UTF-8 bytes go through the GPT-2 byte-to-unicode table, `</w>` is appended to the last symbol,
// and the lowest-ranked adjacent pair of merges.txt is merged until none applies. No HTML
// unescaping and no ftfy (the original OpenAI tokenizer does both). Combining marks are \p{M},
// neither letters nor numbers, so a decomposed "e\u0301" only joins a word after NFC.

namespace {

// NFC, whitespace runs -> ' ', lower-case. Note [CLIP tokenization rule].
std::u32string clip_normalize(std::string_view text) {
  std::u32string nfc = unicode_nfc(utf8_decode(text));
  std::u32string out;
  out.reserve(nfc.size());
  for (size_t i = 0; i < nfc.size(); ++i) {
    if (unicode_is_space(nfc[i])) {
      while (i + 1 < nfc.size() && unicode_is_space(nfc[i + 1])) ++i;
      out.push_back(U' ');
    } else {
      unicode_append_lower(nfc[i], out);
    }
  }
  return out;
}

bool starts_with_at(const std::u32string& s, size_t i, std::u32string_view p) {
  return s.size() - i >= p.size() && std::u32string_view(s).substr(i, p.size()) == p;
}

// Pieces of normalised text by the CLIP pattern (Note [CLIP tokenization rule]).
std::vector<std::string> split_pieces(const std::u32string& s) {
  static constexpr std::u32string_view kSpecials[] = {U"<|startoftext|>", U"<|endoftext|>"};
  static constexpr std::u32string_view kContractions[] = {U"'s", U"'t",  U"'re", U"'ve",
                                                          U"'m", U"'ll", U"'d"};
  std::vector<std::string> pieces;
  size_t i = 0;
  auto emit = [&](size_t begin, size_t end) {
    std::string p;
    for (size_t k = begin; k < end; ++k) utf8_append(s[k], p);
    pieces.push_back(std::move(p));
  };
  while (i < s.size()) {
    size_t matched = 0;
    for (auto p : kSpecials)
      if (!matched && starts_with_at(s, i, p)) matched = p.size();
    for (auto p : kContractions)
      if (!matched && starts_with_at(s, i, p)) matched = p.size();
    if (matched) {
      emit(i, i + matched);
      i += matched;
      continue;
    }
    char32_t c = s[i];
    size_t j = i + 1;
    if (unicode_is_letter(c)) {
      while (j < s.size() && unicode_is_letter(s[j])) ++j;
    } else if (unicode_is_number(c)) {
      // one digit per piece
    } else if (unicode_is_space(c)) {
      i = j;
      continue;
    } else {
      while (j < s.size() && !unicode_is_space(s[j]) && !unicode_is_letter(s[j]) &&
             !unicode_is_number(s[j]))
        ++j;
    }
    emit(i, j);
    i = j;
  }
  return pieces;
}

}  // namespace

Result<std::unique_ptr<CLIPTokenizer>> CLIPTokenizer::load(const std::string& dir) {
  return load_files(dir + "/vocab.json", dir + "/merges.txt");
}

Result<std::unique_ptr<CLIPTokenizer>> CLIPTokenizer::load_files(const std::string& vocab_path,
                                                                 const std::string& merges_path) {
  HR_ASSIGN_OR_RETURN(std::string vocab_text, file_read(vocab_path));
  HR_ASSIGN_OR_RETURN(std::string merges_text, file_read(merges_path));
  return load_text(vocab_text, merges_text, vocab_path, merges_path);
}

Result<std::unique_ptr<CLIPTokenizer>> CLIPTokenizer::load_builtin() {
  return load_text(clip_vocab_json(), clip_merges_txt(), "<built-in vocab.json>",
                   "<built-in merges.txt>");
}

Result<std::unique_ptr<CLIPTokenizer>> CLIPTokenizer::load_text(std::string_view vocab_text,
                                                                std::string_view merges_text,
                                                                const std::string& vocab_name,
                                                                const std::string& merges_name) {
  std::unique_ptr<CLIPTokenizer> t(new CLIPTokenizer());
  HR_ASSIGN_OR_RETURN(t->vocab_, bpe_read_vocab(vocab_text, vocab_name));
  auto special = [&](const char* name, int32_t& id) -> Status {
    auto f = t->vocab_.find(name);
    if (f == t->vocab_.end())
      return make_error(ErrorCode::CORRUPT, "'{}' has no '{}' token", vocab_name, name);
    id = f->second;
    return Status();
  };
  HR_TRY(special("<|startoftext|>", t->bos_));
  HR_TRY(special("<|endoftext|>", t->eos_));

  HR_ASSIGN_OR_RETURN(t->ranks_, bpe_read_merges(merges_text, merges_name));
  return t;
}

void CLIPTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  auto special = vocab_.find(piece);
  if ((piece == "<|startoftext|>" || piece == "<|endoftext|>") && special != vocab_.end()) {
    ids.push_back(special->second);
  } else {
    const auto& sym = byte_level_symbols();
    std::vector<std::string> parts;
    for (char ch : piece) parts.push_back(sym[uint8_t(ch)]);
    if (!parts.empty()) parts.back() += "</w>";
    parts = bpe_merge(std::move(parts), ranks_);
    for (const std::string& p : parts) {
      auto v = vocab_.find(p);
      ids.push_back(v != vocab_.end() ? v->second : eos_);  // unk = <|endoftext|>
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() > 200000) cache_.clear();
  cache_.emplace(piece, std::move(ids));
}

std::vector<int32_t> CLIPTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (const std::string& piece : clip_pretokenize(text)) encode_piece(piece, out);
  return out;
}

std::vector<std::string> clip_pretokenize(std::string_view text) {
  // Literal special tokens are cut out before normalisation (they are case-sensitive there).
  std::vector<std::string> pieces;
  static constexpr std::string_view kSpecials[] = {"<|startoftext|>", "<|endoftext|>"};
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t next = std::string_view::npos, len = 0;
    for (auto sp : kSpecials) {
      size_t f = text.find(sp, pos);
      if (f < next) {
        next = f;
        len = sp.size();
      }
    }
    std::string_view chunk =
        text.substr(pos, next == std::string_view::npos ? text.npos : next - pos);
    for (std::string& p : split_pieces(clip_normalize(chunk))) pieces.push_back(std::move(p));
    if (next == std::string_view::npos) break;
    pieces.emplace_back(text.substr(next, len));
    pos = next + len;
  }
  return pieces;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(int32_t(uint8_t(c)) + 1);
  return out;
}

std::optional<std::string> clip_tokenizer_find(const std::string& models_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("HEADROOM_CLIP_TOKENIZER"); e && *e) candidates.emplace_back(e);
  if (!models_dir.empty()) {
    candidates.push_back(models_dir + "/clip_tokenizer");
    candidates.push_back(models_dir + "/tokenizers/clip");
  }
  for (const std::string& dir : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / "vocab.json", ec) &&
        fs::is_regular_file(fs::path(dir) / "merges.txt", ec))
      return dir;
  }
  return std::nullopt;
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_for_checkpoint(
    const std::map<std::string, std::string>& metadata, const std::string& models_dir) {
  auto kind = metadata.find(kCheckpointTokenizerKey);
  if (kind != metadata.end() && kind->second == "byte")
    return std::shared_ptr<const Tokenizer>(std::make_shared<ByteTokenizer>());
  if (kind != metadata.end() && kind->second != "clip-bpe")
    return make_error(ErrorCode::UNSUPPORTED,
                      "checkpoint names tokenizer '{}' (known: byte, clip-bpe)", kind->second);
  std::optional<std::string> dir = clip_tokenizer_find(models_dir);
  const std::string key = dir.value_or("");  // "" is the built-in vocabulary
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Tokenizer>> loaded;
  std::lock_guard lock(mu);
  auto it = loaded.find(key);
  if (it != loaded.end()) return it->second;
  Result<std::unique_ptr<CLIPTokenizer>> t =
      dir ? CLIPTokenizer::load(*dir) : CLIPTokenizer::load_builtin();
  if (!t.ok()) return t.status();
  std::shared_ptr<const Tokenizer> shared(std::move(t).value());
  loaded.emplace(key, shared);
  return shared;
}

}  // namespace hr
