// The Qwen2 pre-tokenizer (NFC and the split pattern) written out as a scanner.
#include "models/qwen/qwen_pretokenizer.h"

#include "models/unicode_class.h"
#include "models/unicode_nfc.h"
#include "models/utf8.h"

namespace hr {

// Note [Qwen2 pre-tokenizer]
// transformers' Qwen2Tokenizer (slow: NFC in prepare_for_tokenization, then python `regex`) and
// Qwen2TokenizerFast (`tokenizers`: normalizer NFC, pre-tokenizer Split with behaviour Isolated,
// then ByteLevel without its own regex) cut text with
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// Every character lands in some match, so the matches tile the text. At each position the first
// alternative that matches wins, and what each one takes, with the regex engine's backtracking
// worked out by hand, is:
//  1. an ASCII apostrophe and s|t|m|d|re|ve|ll in either case (ſ, U+017F, case-folds to s);
//  2. a letter run, with one character before it that is neither CR, LF, letter nor number
//     (a space, a tab, punctuation, a mark...) taken along;
//  3. one number character (digits are never grouped);
//  4. an optional U+0020, a run of characters that are neither whitespace, letters nor numbers,
//     and the CR/LF characters right after it;
//  5-7. a whitespace run [i, e): if it holds CR or LF, up to and including its last CR/LF (5);
//     else all of it when it ends the text, else all but its last character, which then
//     prefixes the next piece (6: `\s+(?!\S)`); a single whitespace character before a
//     non-whitespace one that alternatives 2 and 4 did not take is a piece of its own (7).
// \s is Unicode White_Space; \p{L} and \p{N} are general categories (models/unicode_class.h).

namespace {

bool is_crlf(char32_t c) { return c == U'\r' || c == U'\n'; }

bool is_other(char32_t c) {
  return !unicode_is_space(c) && !unicode_is_letter(c) && !unicode_is_number(c);
}

char32_t ascii_fold(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c + 32;
  if (c == 0x17F) return U's';  // LATIN SMALL LETTER LONG S folds to s
  return c;
}

// Length of the contraction at i (alternative 1), or 0.
size_t contraction_at(const std::u32string& s, size_t i) {
  if (s[i] != U'\'' || i + 1 >= s.size()) return 0;
  char32_t a = ascii_fold(s[i + 1]);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= s.size()) return 0;
  char32_t b = ascii_fold(s[i + 2]);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

size_t letters_end(const std::u32string& s, size_t j) {
  while (j < s.size() && unicode_is_letter(s[j])) ++j;
  return j;
}

// End of the match that starts at i (Note [Qwen2 pre-tokenizer]); always > i.
size_t match_end(const std::u32string& s, size_t i) {
  const size_t n = s.size();
  const char32_t c = s[i];
  if (size_t len = contraction_at(s, i)) return i + len;
  if (unicode_is_letter(c)) return letters_end(s, i + 1);
  if (!is_crlf(c) && !unicode_is_number(c) && i + 1 < n && unicode_is_letter(s[i + 1]))
    return letters_end(s, i + 2);
  if (unicode_is_number(c)) return i + 1;
  size_t k = c == U' ' && i + 1 < n && is_other(s[i + 1]) ? i + 1 : i;
  if (is_other(s[k])) {
    size_t j = k + 1;
    while (j < n && is_other(s[j])) ++j;
    while (j < n && is_crlf(s[j])) ++j;
    return j;
  }
  // s[i] is whitespace: alternatives 5-7.
  size_t e = i;
  size_t last_crlf = n;
  while (e < n && unicode_is_space(s[e])) {
    if (is_crlf(s[e])) last_crlf = e;
    ++e;
  }
  if (last_crlf != n) return last_crlf + 1;
  if (e == n) return e;
  if (e - 1 > i) return e - 1;
  return e;
}

}  // namespace

std::vector<std::string> qwen_pretokenize(std::string_view text) {
  const std::u32string s = unicode_nfc(utf8_decode(text));
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = match_end(s, i);
    pieces.push_back(utf8_encode(std::u32string_view(s).substr(i, j - i)));
    i = j;
  }
  return pieces;
}

}  // namespace hr
