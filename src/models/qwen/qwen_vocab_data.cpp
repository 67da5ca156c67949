// The Qwen byte-level BPE tokenizer compiled into headroom (data/qwen_tokenizer: vocab.json,
// merges.txt and tokenizer_config.json as ComfyUI ships them; Apache-2.0, see the LICENSE there),
// so real Qwen text encoders run with nothing else installed.
#include "models/qwen/qwen_vocab_data.h"

#include "models/incbin.h"

// Note [embedded vocabulary]; HR_QWEN_VOCAB_DIR is an absolute path set by CMake.
HR_INCBIN(hr_qwen_vocab_json, HR_STR(HR_QWEN_VOCAB_DIR) "/vocab.json");
HR_INCBIN(hr_qwen_merges_txt, HR_STR(HR_QWEN_VOCAB_DIR) "/merges.txt");
HR_INCBIN(hr_qwen_tokenizer_config_json, HR_STR(HR_QWEN_VOCAB_DIR) "/tokenizer_config.json");
HR_INCBIN_EXTERN(hr_qwen_vocab_json);
HR_INCBIN_EXTERN(hr_qwen_merges_txt);
HR_INCBIN_EXTERN(hr_qwen_tokenizer_config_json);

namespace hr {

std::string_view qwen_vocab_json() { return HR_INCBIN_VIEW(hr_qwen_vocab_json); }
std::string_view qwen_merges_txt() { return HR_INCBIN_VIEW(hr_qwen_merges_txt); }
std::string_view qwen_tokenizer_config_json() {
  return HR_INCBIN_VIEW(hr_qwen_tokenizer_config_json);
}

}  // namespace hr
