// The chat-template wrapping of a prompt before a Qwen text encoder reads it (Z-Image's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hr {

class QwenTokenizer;

// Z-Image's text for a prompt (Note [Z-Image prompt template] in the .cpp):
// "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n".
std::string zimage_prompt_template(std::string_view prompt);

// The token ids Z-Image's text encoder reads for a prompt: the template's text encoded, with no
// padding (every id is a real token; the reference keeps exactly these positions).
std::vector<int32_t> zimage_prompt_ids(const QwenTokenizer& tokenizer, std::string_view prompt);

// The ids ComfyUI's CLIPTextEncode gives Z-Image's text encoder for a prompt (ZImageTokenizer
// with its Qwen3Tokenizer, weights disabled): the template's text with "\(" and "\)" unescaped,
// split before every " embedding:" / "\nembedding:" (Qwen3Tokenizer has no embedding folder, so
// such words stay text), each word encoded alone, the ids concatenated. Equal to
// zimage_prompt_ids for a prompt with neither.
std::vector<int32_t> zimage_comfy_prompt_ids(const QwenTokenizer& tokenizer,
                                             std::string_view prompt);

}  // namespace hr
