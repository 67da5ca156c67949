// The CLIP BPE vocabulary headroom ships, compiled in (Note [embedded vocabulary]).
#pragma once

#include <string_view>

namespace hr {

std::string_view clip_vocab_json();  // data/clip_tokenizer/vocab.json
std::string_view clip_merges_txt();  // data/clip_tokenizer/merges.txt

}  // namespace hr
