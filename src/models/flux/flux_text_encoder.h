// Flux.1's text-encoder component (ComfyUI's FluxClipModel + FluxTokenizer): CLIP-L, whose pooled
// output is the DiT's vector input, and T5-XXL, whose last hidden state is the context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memory/weight_set.h"
#include "models/checkpoint.h"
#include "models/clip_tokenizer.h"
#include "models/family.h"
#include "models/sd/clip_text.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_tokenizer.h"
#include "models/text_encoder.h"

namespace hr {

// Flux's text-encoder kinds (TextEncoderPart::kind) and the prefixes of a single-file Flux
// checkpoint (comfy/supported_models.py Flux: text_encoder_key_prefix "text_encoders.", then
// FluxClipModel's module names "clip_l" / "t5xxl" and their "transformer").
inline constexpr const char* kFluxClipL = "clip_l";
inline constexpr const char* kFluxT5XXL = "t5xxl";
inline constexpr const char* kFluxClipLPrefix = "text_encoders.clip_l.transformer.";
inline constexpr const char* kFluxT5XXLPrefix = "text_encoders.t5xxl.transformer.";

// Where one encoder's tensors are: a file and the prefix in front of ComfyUI's names
// ("text_model...." for CLIP-L, "encoder.block...." / "shared.weight" for T5); "" for a bare
// text-encoder file.
struct TextEncoderSource {
  std::shared_ptr<const SafetensorsFile> file;
  std::string prefix;
  int heads = 0;  // CLIP heads (settings); 0: width / 64 (12 for CLIP-L)
};

struct FluxClipL {
  CLIPTextConfig config;
  std::shared_ptr<WeightSet> weights;
};
struct FluxT5 {
  T5Config config;
  std::shared_ptr<WeightSet> weights;
};

class FluxTextEncoder final : public TextEncoder {
 public:
  FluxTextEncoder(const ModelFamily& family, FluxClipL clip_l, FluxT5 t5,
                  std::shared_ptr<const Tokenizer> clip_tokenizer,
                  std::shared_ptr<const T5Tokenizer> t5_tokenizer);

  const ModelFamily& family() const override { return *family_; }
  // {"l", "t5xxl"}: CLIP-L's and T5's prompts (CLIPTextEncodeFlux's clip_l and t5xxl).
  std::vector<std::string> parts() const override;
  // {CLIP-L, T5}.
  std::vector<std::shared_ptr<WeightSet>> stores() const override;
  // "clip_l.transformer." and "t5xxl.transformer." (FluxClipModel's state-dict keys).
  std::string comfy_key_prefix(size_t i) const override;
  // Both parts must be given. The entry's context is T5's [1, tokens (>= 256), d_model] and its
  // pooled output CLIP-L's [1, width] (Note [Flux text conditioning]).
  Result<CondEntry> encode(Executor& ex, const std::map<std::string, std::string>& texts, int layer,
                           const EncoderSources& sources) const override;

  const FluxClipL& clip_l() const { return clip_l_; }
  const FluxT5& t5() const { return t5_; }

 private:
  Result<HostTensor> encode_clip_l(Executor& ex, WeightSource* source,
                                   const std::string& text) const;
  Result<HostTensor> encode_t5(Executor& ex, WeightSource* source, const std::string& text,
                               int layer) const;

  const ModelFamily* family_;
  FluxClipL clip_l_;
  FluxT5 t5_;
  std::shared_ptr<const Tokenizer> clip_tokenizer_;
  std::shared_ptr<const T5Tokenizer> t5_tokenizer_;
};

// Loads CLIP-L and T5 from their sources (one file for both, or two files) as ComfyUI stores
// them: 16-bit weights (fp8 files keep fp8, `options.text_encoder_weight_dtype` stores them in
// fp8 at load), computing in f32 (Note [Flux text encoder precision]). The tokenizers come from
// options.models_dir or the built-in vocabularies.
Result<std::unique_ptr<TextEncoder>> flux_text_encoder_load(const ModelFamily& family,
                                                            const TextEncoderSource& clip_l,
                                                            const TextEncoderSource& t5,
                                                            const LoadOptions& options);

// The family a Flux text-encoder component loaded from separate files belongs to
// (DualCLIPLoader): the first registered family whose text_encoder_kinds hold kFluxClipL and
// kFluxT5XXL (Flux dev and schnell declare the same encoders and LoRA key map), else the family
// named "flux"; null when there is none.
const ModelFamily* flux_text_encoder_family();

// The Flux family's factory for a single-file checkpoint: load.info.text_encoders must name one
// kFluxClipL part and one kFluxT5XXL part (their prefixes, normally kFluxClipLPrefix and
// kFluxT5XXLPrefix); the family is load.info.family.
Result<std::unique_ptr<TextEncoder>> flux_text_encoder_create(const ComponentLoad& load);

}  // namespace hr
