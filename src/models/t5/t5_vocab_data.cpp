// The T5 v1.1 (google/t5-v1_1-xxl) tokenizer compiled into headroom (data/t5_tokenizer, derived
// from its tokenizer.json by make_t5_vocab.py there; Apache-2.0, see the LICENSE there), so real
// T5-XXL text encoders run with nothing else installed.
#include "models/t5/t5_vocab_data.h"

#include "models/incbin.h"

// Note [embedded vocabulary]; HR_T5_VOCAB_DIR is an absolute path set by CMake.
HR_INCBIN(hr_t5_pieces_txt, HR_STR(HR_T5_VOCAB_DIR) "/pieces.txt");
HR_INCBIN(hr_t5_scores_f32, HR_STR(HR_T5_VOCAB_DIR) "/scores.f32");
HR_INCBIN(hr_t5_charsmap_bin, HR_STR(HR_T5_VOCAB_DIR) "/charsmap.bin");
HR_INCBIN_EXTERN(hr_t5_pieces_txt);
HR_INCBIN_EXTERN(hr_t5_scores_f32);
HR_INCBIN_EXTERN(hr_t5_charsmap_bin);

namespace hr {

std::string_view t5_pieces_txt() { return HR_INCBIN_VIEW(hr_t5_pieces_txt); }
std::string_view t5_scores_f32() { return HR_INCBIN_VIEW(hr_t5_scores_f32); }
std::string_view t5_charsmap_bin() { return HR_INCBIN_VIEW(hr_t5_charsmap_bin); }

}  // namespace hr
