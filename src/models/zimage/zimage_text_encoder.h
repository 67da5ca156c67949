// Z-Image's text-encoder component (ComfyUI's ZImageTokenizer + Qwen3_4BModel): the prompt in
// Qwen's chat template, Qwen3-4B's second-to-last hidden state as the DiT's caption context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memory/weight_set.h"
#include "models/checkpoint.h"
#include "models/family.h"
#include "models/llm/llm_config.h"
#include "models/qwen/qwen_tokenizer.h"
#include "models/text_encoder.h"

namespace hr {

class ZImageTextEncoder final : public TextEncoder {
 public:
  ZImageTextEncoder(const ModelFamily& family, LLMConfig config, std::shared_ptr<WeightSet> weights,
                    std::shared_ptr<const QwenTokenizer> tokenizer);

  const ModelFamily& family() const override { return *family_; }
  // {"qwen3_4b"}: ComfyUI's token dict key (the tokenizer's clip name).
  std::vector<std::string> parts() const override;
  std::vector<std::shared_ptr<WeightSet>> stores() const override { return {weights_}; }
  // "qwen3_4b.transformer." (ZImage.clip_target's module, whose names are the HF ones).
  std::string comfy_key_prefix(size_t i) const override;
  // The entry's context is [1, tokens, hidden] (Note [Z-Image text conditioning]); no pooled
  // output. `layer` must be 0: CLIPSetLastLayer is not supported for Z-Image.
  Result<CondEntry> encode(Executor& ex, const std::map<std::string, std::string>& texts, int layer,
                           const EncoderSources& sources) const override;

  const LLMConfig& config() const { return config_; }

 private:
  const ModelFamily* family_;
  LLMConfig config_;
  std::shared_ptr<WeightSet> weights_;
  std::shared_ptr<const QwenTokenizer> tokenizer_;
};

// Loads the Qwen3 model under `prefix` of `file` (HF names after the prefix): weights kept in the
// file's 16-bit dtype (fp8 kept fp8; options.text_encoder_weight_dtype stores them in fp8 at
// load), computed in f32 (Note [LLM encoder precision] in models/llm/llm_encoder.cpp); the
// tokenizer from options.models_dir or the built-in files.
Result<std::unique_ptr<TextEncoder>> zimage_text_encoder_load(
    const ModelFamily& family, const std::shared_ptr<const SafetensorsFile>& file,
    const std::string& prefix, const LoadOptions& options);

// The family's factory: load.info.text_encoders must name one kZImageQwen3 part.
Result<std::unique_ptr<TextEncoder>> zimage_text_encoder_create(const ComponentLoad& load);

}  // namespace hr
