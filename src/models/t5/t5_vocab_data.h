// The T5 v1.1 tokenizer files headroom ships, compiled in (Note [embedded vocabulary]).
#pragma once

#include <string_view>

namespace hr {

std::string_view t5_pieces_txt();    // data/t5_tokenizer/pieces.txt
std::string_view t5_scores_f32();    // data/t5_tokenizer/scores.f32
std::string_view t5_charsmap_bin();  // data/t5_tokenizer/charsmap.bin

}  // namespace hr
