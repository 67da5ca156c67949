// The Qwen byte-level BPE files headroom ships, compiled in (Note [embedded vocabulary]).
#pragma once

#include <string_view>

namespace hr {

std::string_view qwen_vocab_json();             // data/qwen_tokenizer/vocab.json
std::string_view qwen_merges_txt();             // data/qwen_tokenizer/merges.txt
std::string_view qwen_tokenizer_config_json();  // data/qwen_tokenizer/tokenizer_config.json

}  // namespace hr
