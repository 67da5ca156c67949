// The CLIP BPE vocabulary compiled into headroom (data/clip_tokenizer: vocab.json and
// merges.txt, MIT-licensed by OpenAI; see the LICENSE there), so real SD1.x/SD2.x/SDXL
// checkpoints run with nothing else installed.
#include "models/clip_vocab_data.h"

// Note [embedded vocabulary]
// The two files go into .rodata with the assembler's .incbin (gcc 12 has no #embed): no
// generated 8 MB C array to compile, and the object is rebuilt when a file changes because
// CMakeLists.txt lists them as OBJECT_DEPENDS of this source. HR_CLIP_VOCAB_DIR is an absolute
// path set by CMake.
#define HR_STR2(x) #x
#define HR_STR(x) HR_STR2(x)
#define HR_INCBIN(sym, file)                                   \
  __asm__(".section .rodata\n"                                 \
          ".global " #sym "_begin\n"                           \
          ".global " #sym "_end\n"                             \
          ".balign 16\n" #sym "_begin:\n"                      \
          ".incbin \"" HR_STR(HR_CLIP_VOCAB_DIR) "/" file "\"\n" \
          #sym "_end:\n"                                       \
          ".previous\n")

HR_INCBIN(hr_clip_vocab_json, "vocab.json");
HR_INCBIN(hr_clip_merges_txt, "merges.txt");

extern "C" {
extern const char hr_clip_vocab_json_begin[], hr_clip_vocab_json_end[];
extern const char hr_clip_merges_txt_begin[], hr_clip_merges_txt_end[];
}

namespace hr {

std::string_view clip_vocab_json() {
  return {hr_clip_vocab_json_begin, size_t(hr_clip_vocab_json_end - hr_clip_vocab_json_begin)};
}
std::string_view clip_merges_txt() {
  return {hr_clip_merges_txt_begin, size_t(hr_clip_merges_txt_end - hr_clip_merges_txt_begin)};
}

}  // namespace hr
