// ZImageTextEncoder: ComfyUI's CLIPTextEncode for Z-Image (newer comfy/text_encoders/z_image.py
// ZImageTokenizer, Qwen3_4BModel on llama.py's Llama2_) and its loading.
#include "models/zimage/zimage_text_encoder.h"

#include <optional>

#include "models/llm/llm_encoder.h"
#include "models/qwen/qwen_chat_template.h"
#include "models/weight_load.h"
#include "models/zimage/zimage_family.h"

namespace hr {
namespace {

// Note [Z-Image text conditioning]
// ZImageTokenizer wraps the prompt in Qwen's chat template (zimage_comfy_prompt_ids: no padding,
// weights disabled) and Qwen3_4BModel returns hidden_states[-2] unnormed for every token
// (Note [LLM hidden state] in models/llm/llm_config.h), which the DiT reads as its caption: the
// conditioning is [1, tokens, 2560] with no pooled output. Its attention mask is all ones, so
// ComfyUI's Lumina2 extra_conds adds no mask and num_tokens is the token count: the DiT sees
// exactly these tokens.
constexpr const char* kPart = "qwen3_4b";
constexpr DType kCompute = DType::F32;  // Note [LLM encoder precision]

// The dtype the weights are kept in: the file's when it is 16-bit or f32 (ComfyUI builds the
// model in the state dict's dtype), else bf16 (fp8 tensors keep their own format).
DType store_dtype(const SafetensorsFile& file, const std::string& prefix) {
  const SafetensorsEntry* e = file.find(prefix + "model.embed_tokens.weight");
  if (e && (e->dtype == DType::F16 || e->dtype == DType::BF16 || e->dtype == DType::F32))
    return e->dtype;
  return DType::BF16;
}

}  // namespace

ZImageTextEncoder::ZImageTextEncoder(const ModelFamily& family, LLMConfig config,
                                     std::shared_ptr<WeightSet> weights,
                                     std::shared_ptr<const QwenTokenizer> tokenizer)
    : family_(&family),
      config_(std::move(config)),
      weights_(std::move(weights)),
      tokenizer_(std::move(tokenizer)) {}

std::vector<std::string> ZImageTextEncoder::parts() const { return {kPart}; }

std::string ZImageTextEncoder::comfy_key_prefix(size_t i) const {
  return i == 0 ? "qwen3_4b.transformer." : "";
}

Result<CondEntry> ZImageTextEncoder::encode(Executor& ex,
                                            const std::map<std::string, std::string>& texts,
                                            int layer, const EncoderSources& sources) const {
  auto text = texts.find(kPart);
  if (text == texts.end())
    return make_error(ErrorCode::INVALID_ARGUMENT, "Z-Image's text encoder needs the '{}' prompt",
                      kPart);
  if (layer != 0)
    return make_error(ErrorCode::UNSUPPORTED,
                      "CLIPSetLastLayer ({}) is not supported for Z-Image's Qwen3 text encoder, "
                      "which always reads the second-to-last hidden state",
                      layer);
  std::vector<std::vector<int32_t>> rows = {zimage_comfy_prompt_ids(*tokenizer_, text->second)};
  WeightSource& run = !sources.empty() && sources[0] ? *sources[0] : *weights_;
  run.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(HostTensor z, llm_encoder_run(ex, run, config_, rows, kCompute));
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(std::move(z));
  return e;
}

Result<std::unique_ptr<TextEncoder>> zimage_text_encoder_load(
    const ModelFamily& family, const std::shared_ptr<const SafetensorsFile>& file,
    const std::string& prefix, const LoadOptions& options) {
  HR_ASSIGN_OR_RETURN(WeightFormats formats,
                      weight_formats_for(*file, prefix, options.text_encoder_weight_dtype));
  const DType store = store_dtype(*file, prefix);
  auto w = std::make_shared<WeightSet>();
  HR_TRY(weights_load_prefix(*w, file, prefix, store, &formats)
             .with_context("loading Z-Image's Qwen3 text encoder"));
  // Every stored weight narrower than f32 is cast at use (Note [fp8 weights] in graph/graph.h).
  auto map = formats.storage ? std::make_shared<WeightStorageMap>(*formats.storage)
                             : std::make_shared<WeightStorageMap>();
  for (const std::string& name : w->names()) {
    const HostTensor* t = w->find(name);
    if (!dtype_is_float(t->dtype()) || t->dtype() == kCompute || formats.scales.count(name) ||
        map->count(name))
      continue;
    (*map)[name] = WeightStorage{t->dtype(), "", false};
  }
  HR_ASSIGN_OR_RETURN(LLMConfig config, llm_config_detect(*w));
  if (!map->empty()) {
    w->set_storage(map);
    config.storage = map;
  }
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const QwenTokenizer> tok,
                      qwen_tokenizer_shared(options.models_dir, QwenAddedTokens::CONFIG));
  return std::unique_ptr<TextEncoder>(
      new ZImageTextEncoder(family, std::move(config), std::move(w), std::move(tok)));
}

Result<std::unique_ptr<TextEncoder>> zimage_text_encoder_create(const ComponentLoad& load) {
  const CheckpointInfo& info = load.info;
  std::optional<std::string> prefix;
  for (const TextEncoderPart& part : info.text_encoders)
    if (part.kind == kZImageQwen3) prefix = part.prefix;
  if (!prefix)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: Z-Image's text encoder is Qwen3-4B ('model.embed_tokens.weight', bare "
                      "or under '{}'); the file has none",
                      load.file->path(), kZImageQwen3Prefix);
  return zimage_text_encoder_load(*info.family, load.file, *prefix, load.options);
}

}  // namespace hr
