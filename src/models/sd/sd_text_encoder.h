// The SD families' text-encoder component: one or two CLIP encoders (CLIP-L, OpenCLIP-H or
// bigG) with the checkpoint's tokenizer, doing ComfyUI's tokenize + encode per prompt part.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/clip_tokenizer.h"
#include "models/family.h"
#include "models/sd/clip_text.h"
#include "models/sd/encoder_settings.h"
#include "models/text_encoder.h"
#include "memory/weight_set.h"

namespace hr {

// The SD families' text-encoder kinds (TextEncoderPart::kind).
inline constexpr const char* kSDClipL = "clip_l";               // HF CLIPTextModel layout
inline constexpr const char* kSDOpenClipH = "openclip_h";       // SD2's OpenCLIP ViT-H tower
inline constexpr const char* kSDOpenClipBigG = "openclip_bigg";  // SDXL's OpenCLIP ViT-bigG

// One CLIP encoder of the component.
struct SDClipEncoder {
  std::string kind;  // kSDClipL, kSDOpenClipH or kSDOpenClipBigG
  CLIPTextConfig config;
  std::shared_ptr<WeightSet> weights;
};

class SDTextEncoder final : public TextEncoder {
 public:
  SDTextEncoder(const ModelFamily& family, SDClipDefaults defaults,
                std::vector<SDClipEncoder> encoders, std::shared_ptr<const Tokenizer> tokenizer);

  const ModelFamily& family() const override { return *family_; }
  // "l" (CLIP-L), "h" (OpenCLIP-H), "g" (bigG), in the encoders' order.
  std::vector<std::string> parts() const override;
  // ComfyUI: several parts are padded with empty chunks to one chunk count and combined as
  // SDXL's (clip_sdxl_combine: contexts on channels, bigG's pooled output); one part is that
  // encoder's context and pooled output.
  Result<CondEntry> encode(Executor& ex, const std::map<std::string, std::string>& texts,
                           int layer, const EncoderSources& sources) const override;
  std::vector<std::shared_ptr<WeightSet>> stores() const override;
  // CLIP-L in the HF layout: "clip_l.transformer."; OpenCLIP stores (converted by ComfyUI): "".
  std::string comfy_key_prefix(size_t i) const override;

  const std::vector<SDClipEncoder>& encoders() const { return encoders_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  TokenChunks tokenize(const SDClipEncoder& enc, const std::string& text, int layer) const;
  Result<CLIPConditioning> encode_chunks(Executor& ex, const SDClipEncoder& enc,
                                         WeightSource* source, const TokenChunks& chunks,
                                         int layer) const;
  EncoderSettings settings(const SDClipEncoder& enc, int layer) const;

  const ModelFamily* family_;
  SDClipDefaults defaults_;
  std::vector<SDClipEncoder> encoders_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

// The family's factory: loads every encoder of load.info.text_encoders (heads from the
// settings, else detected) and the checkpoint's tokenizer.
Result<std::unique_ptr<TextEncoder>> sd_text_encoder_create(const ComponentLoad& load,
                                                            const SDClipDefaults& defaults);

}  // namespace hr
