// The CLIP BPE vocabulary compiled into headroom (data/clip_tokenizer: vocab.json and
// merges.txt, MIT-licensed by OpenAI; see the LICENSE there), so real SD1.x/SD2.x/SDXL
// checkpoints run with nothing else installed.
#include "models/clip_vocab_data.h"

#include "models/incbin.h"

// Note [embedded vocabulary]
// Data files go into .rodata with the assembler's .incbin (gcc 12 has no #embed): no
// generated 8 MB C array to compile, and the object is rebuilt when a file changes because
// CMakeLists.txt lists them as OBJECT_DEPENDS of this source. HR_CLIP_VOCAB_DIR is an absolute
// path set by CMake. The T5 vocabulary (models/t5/t5_vocab_data.cpp) is embedded the same way.
HR_INCBIN(hr_clip_vocab_json, HR_STR(HR_CLIP_VOCAB_DIR) "/vocab.json");
HR_INCBIN(hr_clip_merges_txt, HR_STR(HR_CLIP_VOCAB_DIR) "/merges.txt");
HR_INCBIN_EXTERN(hr_clip_vocab_json);
HR_INCBIN_EXTERN(hr_clip_merges_txt);

namespace hr {

std::string_view clip_vocab_json() { return HR_INCBIN_VIEW(hr_clip_vocab_json); }
std::string_view clip_merges_txt() { return HR_INCBIN_VIEW(hr_clip_merges_txt); }

}  // namespace hr
