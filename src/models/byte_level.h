// The GPT-2 byte-to-unicode table of byte-level BPE tokenizers (CLIP, Qwen): every byte is a
// printable symbol in vocab.json and merges.txt.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace hr {

// The UTF-8 symbol of each byte: printable bytes (33-126, 161-172, 174-255) map to themselves,
// the other 68 to U+0100 upwards in byte order.
const std::array<std::string, 256>& byte_level_symbols();

// The byte of a symbol of that table (a whole UTF-8 character), or -1 when it is none.
int byte_level_byte(char32_t symbol);

}  // namespace hr
