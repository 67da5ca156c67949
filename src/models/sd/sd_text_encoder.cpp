// SDTextEncoder: ComfyUI's CLIPTextEncode / CLIPTextEncodeSDXL(Refiner) text side for SD1, SD2
// and SDXL.
#include "models/weight_load.h"
#include "models/sd/sd_text_encoder.h"

#include "models/checkpoint.h"
#include "models/prompt_weights.h"

namespace hr {
namespace {

const char* part_of(const std::string& kind) {
  if (kind == kSDClipL) return "l";
  if (kind == kSDOpenClipH) return "h";
  return "g";
}

}  // namespace

SDTextEncoder::SDTextEncoder(const ModelFamily& family, SDClipDefaults defaults,
                             std::vector<SDClipEncoder> encoders,
                             std::shared_ptr<const Tokenizer> tokenizer)
    : family_(&family),
      defaults_(defaults),
      encoders_(std::move(encoders)),
      tokenizer_(std::move(tokenizer)) {}

std::vector<std::string> SDTextEncoder::parts() const {
  std::vector<std::string> p;
  for (const SDClipEncoder& e : encoders_) p.push_back(part_of(e.kind));
  return p;
}

EncoderSettings SDTextEncoder::settings(const SDClipEncoder& enc, int layer) const {
  return encoder_settings(defaults_, enc.kind == kSDClipL, layer, enc.config.layers);
}

// The padding id of this encoder's token rows: EOS (CLIP-L) or 0 (OpenCLIP).
TokenChunks SDTextEncoder::tokenize(const SDClipEncoder& enc, const std::string& text,
                                    int layer) const {
  ChunkOptions co;
  co.pad = settings(enc, layer).pad_with_end ? tokenizer_->eos() : 0;
  return prompt_tokenize(*tokenizer_, text, co);
}

Result<CLIPConditioning> SDTextEncoder::encode_chunks(Executor& ex, const SDClipEncoder& enc,
                                                      WeightSource* source,
                                                      const TokenChunks& chunks,
                                                      int layer) const {
  const EncoderSettings s = settings(enc, layer);
  for (const auto& row : chunks.ids)
    for (int32_t id : row)
      if (id < 0 || id >= enc.config.vocab)
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "token id {} is outside the text encoder's {}-entry vocabulary "
                          "(is the tokenizer the one this checkpoint was trained with?)",
                          id, enc.config.vocab);
  CLIPEncodeOptions eo;
  eo.layer = s.layer;
  eo.layer_final_norm = s.final_norm;
  eo.pad = s.pad_with_end ? tokenizer_->eos() : 0;
  eo.bos = tokenizer_->bos();
  eo.eos = tokenizer_->eos();
  WeightSource& run = source ? *source : *enc.weights;
  run.bind(&ex.backend(), &ex.allocator());
  return clip_text_encode(ex, run, *enc.weights, enc.config, chunks, eo);
}

std::string SDTextEncoder::comfy_key_prefix(size_t i) const {
  if (i >= encoders_.size()) return "";
  const SDClipEncoder& e = encoders_[i];
  const bool hf = e.kind == kSDClipL && e.config.layout == CLIPLayout::HF &&
                  e.config.hf_root == "text_model.";
  return hf ? "clip_l.transformer." : "";
}

std::vector<std::shared_ptr<WeightSet>> SDTextEncoder::stores() const {
  std::vector<std::shared_ptr<WeightSet>> out;
  for (const SDClipEncoder& e : encoders_) out.push_back(e.weights);
  return out;
}

Result<CondEntry> SDTextEncoder::encode(Executor& ex,
                                        const std::map<std::string, std::string>& texts,
                                        int layer, const EncoderSources& sources) const {
  std::vector<const SDClipEncoder*> used;
  std::vector<WeightSource*> used_sources;
  std::vector<TokenChunks> chunks;
  for (const SDClipEncoder& e : encoders_) {
    auto it = texts.find(part_of(e.kind));
    if (it == texts.end()) continue;
    used.push_back(&e);
    const size_t index = size_t(&e - encoders_.data());
    used_sources.push_back(index < sources.size() ? sources[index] : nullptr);
    chunks.push_back(tokenize(e, it->second, layer));
  }
  if (used.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT, "no prompt for this text encoder's parts");
  // ComfyUI pads the shorter prompt with empty chunks so both encoders see as many chunks.
  size_t most = 0;
  for (const TokenChunks& c : chunks) most = std::max(most, c.size());
  for (size_t i = 0; i < used.size(); ++i) {
    if (chunks[i].size() == most) continue;
    TokenChunks empty = tokenize(*used[i], "", layer);
    while (chunks[i].size() < most) {
      chunks[i].ids.push_back(empty.ids[0]);
      chunks[i].weights.push_back(empty.weights[0]);
    }
  }
  std::vector<CLIPConditioning> outs;
  for (size_t i = 0; i < used.size(); ++i) {
    HR_ASSIGN_OR_RETURN(CLIPConditioning o, encode_chunks(ex, *used[i], used_sources[i], chunks[i], layer));
    outs.push_back(std::move(o));
  }
  CLIPConditioning out;
  if (outs.size() == 2) {
    HR_ASSIGN_OR_RETURN(out, clip_sdxl_combine(outs[0], outs[1]));
  } else if (outs.size() == 1) {
    out = std::move(outs[0]);
  } else {
    return make_error(ErrorCode::UNSUPPORTED, "{} text encoders do not combine", outs.size());
  }
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(std::move(out.cond));
  e.extras.set(kCondPooledOutput, std::make_shared<const HostTensor>(std::move(out.pooled)));
  return e;
}

Result<std::unique_ptr<TextEncoder>> sd_text_encoder_create(const ComponentLoad& load,
                                                            const SDClipDefaults& defaults) {
  const CheckpointInfo& info = load.info;
  std::vector<SDClipEncoder> encoders;
  for (size_t i = 0; i < info.text_encoders.size(); ++i) {
    const TextEncoderPart& part = info.text_encoders[i];
    SDClipEncoder enc;
    enc.kind = part.kind;
    enc.weights = std::make_shared<WeightSet>();
    HR_ASSIGN_OR_RETURN(WeightFormats formats,
                        weight_formats_for(*load.file, part.prefix,
                                           load.options.text_encoder_weight_dtype));
    HR_TRY(weights_load_prefix(*enc.weights, load.file, part.prefix, load.options.text_encoder_dtype,
                               &formats));
    // Heads: the settings (config file, metadata; Note [model settings order]) or detection.
    HR_ASSIGN_OR_RETURN(enc.config,
                        clip_text_detect(*enc.weights, info.settings.text_encoder_heads_at(i)));
    if (formats.any()) {  // Note [fp8 weights]: the graph computes in the compute dtype
      enc.config.storage = formats.storage;
      enc.weights->set_storage(formats.storage);
      enc.config.dtype = load.options.text_encoder_dtype;
    }
    encoders.push_back(std::move(enc));
  }
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                      tokenizer_for_checkpoint(load.file->metadata(), load.options.models_dir));
  return std::unique_ptr<TextEncoder>(
      new SDTextEncoder(*info.family, defaults, std::move(encoders), std::move(tokenizer)));
}

}  // namespace hr
