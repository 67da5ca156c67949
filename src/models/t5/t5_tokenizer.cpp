// The T5 v1.1 Unigram tokenizer: loading (built-in files or a tokenizer.json), the special-token
// split, Metaspace pre-tokenization, Viterbi segmentation, and ComfyUI's T5 chunk options.
#include "models/t5/t5_tokenizer.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/file_read.h"
#include "core/json_parse.h"
#include "models/t5/t5_vocab_data.h"

namespace hr {

// Note [T5 tokenization rule]
// What `tokenizers` does with the T5 v1.1 tokenizer.json (checked field by field in load_json
// and in data/t5_tokenizer/make_t5_vocab.py), and this file with it:
//  1. Added tokens (<pad>, </s>, <unk>, <extra_id_0..99>; special, not normalised, no strip)
//     are cut out of the raw text, leftmost-longest; each becomes its id.
//  2. Every other part is normalised on its own (Note [T5 normalizer]).
//  3. Metaspace (replacement U+2581, split): spaces become U+2581; a U+2581 is prepended when
//     the part is not empty and does not already start with U+2581; the part is split before
//     every U+2581. `tokenizers` with the file's prepend_scheme "first" prepends only to the
//     part at offset 0; transformers 5.17's T5TokenizerFast, which ComfyUI tokenizes with, to
//     every part: they differ on text right after a special token ("x<extra_id_5>y": ... 32094,
//     3, 63 in transformers and ComfyUI, 32094, 63 in tokenizers; t5_tokens_golden.json). This
//     follows ComfyUI.
//  4. Unigram per word, no byte fallback: best-scoring segmentation (scores as doubles; ties
//     keep the path whose last piece starts first); a character with no one-character piece
//     becomes <unk> with score min(score) - 10; consecutive <unk>s fuse into one token whose
//     text is looked up again (and is <unk> unless the vocabulary has it).
//  5. The post-processor appends </s> (id 1).

namespace {

constexpr std::string_view kMetaspace = "\u2581";
constexpr double kUnkPenalty = 10.0;  // tokenizers' K_UNK_PENALTY

size_t utf8_len(char lead) {
  auto b = uint8_t(lead);
  return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
}

bool is_special_name(std::string_view p) {
  if (p == "<pad>" || p == "</s>" || p == "<unk>") return true;
  constexpr std::string_view kExtra = "<extra_id_";
  if (!p.starts_with(kExtra) || !p.ends_with(">") || p.size() == kExtra.size() + 1) return false;
  for (char c : p.substr(kExtra.size(), p.size() - kExtra.size() - 1))
    if (c < '0' || c > '9') return false;
  return true;
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// The parts of tokenizer.json that the code above hard-codes, as make_t5_vocab.py checks them.
Status check_json_layout(const nlohmann::json& j, const std::string& path) {
  auto fail = [&](std::string_view what) {
    return make_error(ErrorCode::UNSUPPORTED,
                      "'{}' is not a T5 v1.1 tokenizer.json as headroom reads it: {}", path, what);
  };
  const nlohmann::json& norm = j.value("normalizer", nlohmann::json());
  const nlohmann::json& seq = norm.value("normalizers", nlohmann::json());
  if (norm.value("type", "") != "Sequence" || !seq.is_array() || seq.size() != 3 ||
      seq[0].value("type", "") != "Precompiled" || seq[1].value("type", "") != "Strip" ||
      seq[1].value("strip_left", true) || !seq[1].value("strip_right", false) ||
      seq[2].value("type", "") != "Replace" ||
      seq[2].value("pattern", nlohmann::json()) != nlohmann::json{{"Regex", " {2,}"}} ||
      seq[2].value("content", "") != kMetaspace)
    return fail("normalizer is not Sequence[Precompiled, Strip(right), Replace(' {2,}', U+2581)]");
  const nlohmann::json& pre = j.value("pre_tokenizer", nlohmann::json());
  if (pre.value("type", "") != "Metaspace" || pre.value("replacement", "") != kMetaspace ||
      pre.value("prepend_scheme", "") != "first" || !pre.value("split", true))
    return fail("pre_tokenizer is not Metaspace(U+2581, prepend_scheme first, split)");
  const nlohmann::json& model = j.value("model", nlohmann::json());
  if (model.value("type", "") != "Unigram" || model.value("unk_id", -1) != T5Tokenizer::kUnk ||
      model.value("byte_fallback", false))
    return fail("model is not Unigram with unk_id 2 and no byte fallback");
  const nlohmann::json& post = j.value("post_processor", nlohmann::json());
  const nlohmann::json single =
      nlohmann::json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                             {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}});
  if (post.value("type", "") != "TemplateProcessing" ||
      post.value("single", nlohmann::json()) != single)
    return fail("post_processor does not append </s>");
  return Status::ok_status();
}

}  // namespace

Result<std::unique_ptr<T5Tokenizer>> T5Tokenizer::load_builtin() {
  std::string_view text = t5_pieces_txt();
  std::vector<std::string> pieces;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    pieces.emplace_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string_view raw = t5_scores_f32();
  std::vector<float> scores(raw.size() / sizeof(float));
  std::memcpy(scores.data(), raw.data(), scores.size() * sizeof(float));  // little-endian host
  return load_pieces(std::move(pieces), std::move(scores), t5_charsmap_bin(),
                     "<built-in T5 tokenizer>");
}

Result<std::unique_ptr<T5Tokenizer>> T5Tokenizer::load_json(const std::string& path_in) {
  std::string path = path_in;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path += "/tokenizer.json";
  HR_ASSIGN_OR_RETURN(std::string text, file_read(path));
  Result<nlohmann::json> parsed = json_parse(text);
  if (!parsed.ok())
    return make_error(ErrorCode::CORRUPT, "'{}': {}", path, parsed.status().message());
  const nlohmann::json j = std::move(parsed).value();
  if (!j.is_object()) return make_error(ErrorCode::CORRUPT, "'{}' is not a JSON object", path);
  try {
    return load_json_document(j, path);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
    return make_error(ErrorCode::UNSUPPORTED,
                      "'{}' is not a T5 v1.1 tokenizer.json as headroom reads it: {}", path,
                      e.what());
  }
}

Result<std::unique_ptr<T5Tokenizer>> T5Tokenizer::load_json_document(const nlohmann::json& j,
                                                                     const std::string& path) {
  HR_TRY(check_json_layout(j, path));
  const nlohmann::json& vocab = j["model"].value("vocab", nlohmann::json());
  if (!vocab.is_array()) return make_error(ErrorCode::CORRUPT, "'{}': model.vocab", path);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (const nlohmann::json& e : vocab) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      return make_error(ErrorCode::CORRUPT, "'{}': vocab entry {} is not [piece, score]", path,
                        pieces.size());
    pieces.push_back(e[0].get<std::string>());
    double d = e[1].get<double>();
    scores.push_back(float(d));
    if (double(scores.back()) != d)  // SentencePiece scores are float32
      return make_error(ErrorCode::CORRUPT, "'{}': score of '{}' is not a float32", path,
                        pieces.back());
  }
  for (const nlohmann::json& t : j.value("added_tokens", nlohmann::json::array())) {
    size_t id = t.value("id", size_t(-1));
    std::string name = t.value("content", "");
    if (id >= pieces.size() || pieces[id] != name || !is_special_name(name) ||
        t.value("normalized", true) || t.value("lstrip", true) || t.value("rstrip", true))
      return make_error(ErrorCode::UNSUPPORTED, "'{}': added token '{}' is not one headroom knows",
                        path, name);
  }
  std::optional<std::string> charsmap =
      base64_decode(j["normalizer"]["normalizers"][0].value("precompiled_charsmap", ""));
  if (!charsmap) return make_error(ErrorCode::CORRUPT, "'{}': precompiled_charsmap", path);
  return load_pieces(std::move(pieces), std::move(scores), *charsmap, path);
}

Result<std::unique_ptr<T5Tokenizer>> T5Tokenizer::load_pieces(std::vector<std::string> pieces,
                                                              std::vector<float> scores,
                                                              std::string_view charsmap,
                                                              const std::string& name) {
  if (pieces.size() != scores.size() || pieces.size() <= size_t(kUnk))
    return make_error(ErrorCode::CORRUPT, "'{}': {} pieces and {} scores", name, pieces.size(),
                      scores.size());
  if (pieces[kPad] != "<pad>" || pieces[kEOS] != "</s>" || pieces[kUnk] != "<unk>")
    return make_error(ErrorCode::CORRUPT, "'{}': ids 0, 1, 2 are not <pad>, </s>, <unk>", name);
  std::unique_ptr<T5Tokenizer> t(new T5Tokenizer());
  HR_ASSIGN_OR_RETURN(t->charsmap_, PrecompiledCharsmap::parse(charsmap, name));
  t->pieces_ = std::move(pieces);
  double min_score = std::numeric_limits<double>::infinity();
  for (float s : scores) {
    t->scores_.push_back(double(s));
    min_score = std::min(min_score, double(s));
  }
  t->unk_score_ = min_score - kUnkPenalty;
  for (size_t id = 0; id < t->pieces_.size(); ++id) {
    const std::string& p = t->pieces_[id];
    if (p.empty() || !t->ids_.emplace(std::string_view(p), int32_t(id)).second)
      return make_error(ErrorCode::CORRUPT, "'{}': piece {} is empty or repeated", name, id);
    t->max_piece_bytes_ = std::max(t->max_piece_bytes_, p.size());
    if (is_special_name(p)) t->specials_.emplace_back(p, int32_t(id));
  }
  return t;
}

std::optional<int32_t> T5Tokenizer::id_of(std::string_view piece) const {
  auto it = ids_.find(piece);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void T5Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Best {
    double score = 0;
    int32_t id = -1;
    size_t start = std::string_view::npos;  // npos: not reached yet
  };
  const size_t n = word.size();
  std::vector<Best> best(n + 1);
  for (size_t s = 0; s < n;) {
    const size_t char_len = std::min(utf8_len(word[s]), n - s);
    const double here = best[s].score;
    bool has_single = false;
    auto offer = [&](size_t end, int32_t id, double score) {
      Best& b = best[end];
      if (b.start == std::string_view::npos || here + score > b.score) b = {here + score, id, s};
    };
    for (size_t len = char_len; len <= std::min(max_piece_bytes_, n - s);) {
      if (auto it = ids_.find(word.substr(s, len)); it != ids_.end()) {
        offer(s + len, it->second, scores_[size_t(it->second)]);
        has_single = has_single || len == char_len;
      }
      if (s + len >= n) break;
      len += utf8_len(word[s + len]);
    }
    if (!has_single) offer(s + char_len, kUnk, unk_score_);
    s += char_len;
  }
  // Back from the end; runs of <unk> fuse into one token (looked up by its text again).
  std::vector<int32_t> rev;
  size_t end = n, unk_begin = std::string_view::npos;
  auto flush_unk = [&] {
    if (unk_begin == std::string_view::npos) return;
    rev.push_back(id_of(word.substr(end, unk_begin - end)).value_or(kUnk));
    unk_begin = std::string_view::npos;
  };
  while (end > 0) {
    const Best& b = best[end];
    if (b.id == kUnk) {
      if (unk_begin == std::string_view::npos) unk_begin = end;
    } else {
      flush_unk();
      rev.push_back(b.id);
    }
    end = b.start;
  }
  flush_unk();
  out.insert(out.end(), rev.rbegin(), rev.rend());
}

void T5Tokenizer::encode_part(std::string_view part, bool at_start,
                              std::vector<int32_t>& out) const {
  std::string normalized = normalize(part);
  std::string text;
  text.reserve(normalized.size() + 8);
  for (char c : normalized) {
    if (c == ' ')
      text.append(kMetaspace);
    else
      text.push_back(c);
  }
  if (at_start && !text.empty() && !std::string_view(text).starts_with(kMetaspace))
    text.insert(0, kMetaspace);
  // Split before every U+2581 (MergedWithNext); its bytes never occur inside another character.
  for (size_t begin = 0; begin < text.size();) {
    size_t next = text.find(kMetaspace, begin + 1);
    if (next == std::string::npos) next = text.size();
    encode_word(std::string_view(text).substr(begin, next - begin), out);
    begin = next;
  }
}

std::vector<int32_t> T5Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t part_begin = 0;
  for (size_t i = 0; i < text.size();) {
    size_t match_len = 0;
    int32_t match_id = -1;
    if (text[i] == '<') {
      for (const auto& [name, id] : specials_) {
        if (name.size() > match_len && text.substr(i).starts_with(name)) {
          match_len = name.size();
          match_id = id;
        }
      }
    }
    if (match_len == 0) {
      ++i;
      continue;
    }
    if (i > part_begin) encode_part(text.substr(part_begin, i - part_begin), true, out);
    out.push_back(match_id);
    i += match_len;
    part_begin = i;
  }
  if (part_begin < text.size()) encode_part(text.substr(part_begin), true, out);
  return out;
}

std::vector<int32_t> T5Tokenizer::encode_with_eos(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  ids.push_back(kEOS);
  return ids;
}

ChunkOptions t5xxl_chunk_options(int min_length) {
  ChunkOptions o;
  o.max_length = 99999999;
  o.pad = T5Tokenizer::kPad;
  o.max_word_length = 8;
  o.start_token = false;
  o.pad_to_max_length = false;
  o.min_length = min_length;
  return o;
}

std::optional<std::string> t5_tokenizer_find(const std::string& models_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("HEADROOM_T5_TOKENIZER"); e && *e) {
    candidates.emplace_back(e);
    candidates.push_back(std::string(e) + "/tokenizer.json");
  }
  if (!models_dir.empty()) candidates.push_back(models_dir + "/t5_tokenizer/tokenizer.json");
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path;
  }
  return std::nullopt;
}

Result<std::shared_ptr<const T5Tokenizer>> t5_tokenizer_shared(const std::string& models_dir) {
  std::optional<std::string> path = t5_tokenizer_find(models_dir);
  const std::string key = path.value_or("");  // "" is the built-in vocabulary
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const T5Tokenizer>> loaded;
  std::lock_guard lock(mu);
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  Result<std::unique_ptr<T5Tokenizer>> t =
      path ? T5Tokenizer::load_json(*path) : T5Tokenizer::load_builtin();
  if (!t.ok()) return t.status();
  std::shared_ptr<const T5Tokenizer> shared(std::move(t).value());
  loaded.emplace(key, shared);
  return shared;
}

}  // namespace hr
