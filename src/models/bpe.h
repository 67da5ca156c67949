// Byte-level BPE shared by the CLIP and Qwen tokenizers: reading vocab.json and merges.txt, and
// merging a piece's symbols by merge rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace hr {

// Piece -> id (vocab.json), or "a b" -> rank (merges.txt, in file order).
using BpeTable = std::unordered_map<std::string, int32_t>;

// vocab.json's object of piece -> id; CORRUPT naming `name` and the piece when an id is not a
// non-negative integer.
Result<BpeTable> bpe_read_vocab(std::string_view json_text, const std::string& name);

// merges.txt's lines "a b" (an optional "#version" first line, blank lines and CRs skipped);
// CORRUPT naming `name` and the line when a line is not two symbols, or when there is none.
Result<BpeTable> bpe_read_merges(std::string_view text, const std::string& name);

// Merges `parts` (a piece's symbols) as BPE does: while some adjacent pair has a rank, every
// occurrence of the lowest-ranked pair is joined, left to right.
std::vector<std::string> bpe_merge(std::vector<std::string> parts, const BpeTable& ranks);

}  // namespace hr
