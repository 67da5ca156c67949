// The Qwen2 pre-tokenizer: NFC, then the split of text into the pieces that byte-level BPE
// encodes one by one (Note [Qwen2 pre-tokenizer] in the .cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hr {

// The pieces (UTF-8) of `text`, which holds no added token: NFC (models/unicode_nfc.h), then the
// matches of the Qwen2 split pattern in order. Their concatenation is the NFC text: no character is
// dropped.
std::vector<std::string> qwen_pretokenize(std::string_view text);

}  // namespace hr
