// The Z-Image prompt template (Qwen3's chat template for one user message).
#include "models/qwen/qwen_chat_template.h"

#include "models/prompt_weights.h"
#include "models/qwen/qwen_tokenizer.h"

namespace hr {

// Note [Z-Image prompt template]
// diffusers' ZImagePipeline._encode_prompt wraps each prompt with the tokenizer's chat template:
// messages = [{"role": "user", "content": prompt}], add_generation_prompt=True,
// enable_thinking=True. Qwen3's template writes no default system message, a user message as
// "<|im_start|>user\n" + content + "<|im_end|>\n", and for the generation prompt
// "<|im_start|>assistant\n", adding "<think>\n\n</think>\n\n" only when enable_thinking is false.
// ComfyUI's ZImageTokenizer (comfy/text_encoders/z_image.py) formats the same string by hand
// (llama_template "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"), tokenizes it
// without start/end tokens and without padding (pad_to_max_length=False, min_length=1), and
// diffusers pads to 512 but keeps only the positions of its attention mask, so both read exactly
// the template's ids. The prompt is inserted as is (no stripping, no escaping).
// ComfyUI's SDTokenizer.tokenize_with_weights(disable_weights=True) still runs escape_important /
// unescape_important ("\(" -> "(") and tokenizes the words before and after each " embedding:"
// separately; Qwen3Tokenizer passes no embedding_directory to SDTokenizer, so no embedding is
// looked up (zimage_comfy_prompt_ids).
std::string zimage_prompt_template(std::string_view prompt) {
  std::string text = "<|im_start|>user\n";
  text.append(prompt);
  text.append("<|im_end|>\n<|im_start|>assistant\n");
  return text;
}

std::vector<int32_t> zimage_prompt_ids(const QwenTokenizer& tokenizer, std::string_view prompt) {
  return tokenizer.encode(zimage_prompt_template(prompt));
}

std::vector<int32_t> zimage_comfy_prompt_ids(const QwenTokenizer& tokenizer,
                                             std::string_view prompt) {
  std::vector<int32_t> ids;
  for (const std::string& word :
       prompt_split_words(prompt_unescape_parens(zimage_prompt_template(prompt)))) {
    std::vector<int32_t> w = tokenizer.encode(word);
    ids.insert(ids.end(), w.begin(), w.end());
  }
  return ids;
}

}  // namespace hr
