// FluxTextEncoder: ComfyUI's CLIPTextEncode for Flux.1 (comfy/text_encoders/flux.py FluxTokenizer,
// FluxClipModel; sd1_clip.py SDClipModel, ClipTokenWeightEncoder) and its loading.
#include "models/flux/flux_text_encoder.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "models/prompt_weights.h"
#include "models/weight_load.h"

namespace hr {
namespace {

// Note [Flux text conditioning]
// FluxTokenizer gives the same text to two tokenizers: "l" is SD1's CLIP tokenizer (77-token
// chunks, BOS, EOS, padded with EOS) and "t5xxl" T5XXLTokenizer (no start token, </s>, padded
// with <pad> = 0 to at least 256 tokens, never split: max_length 99999999). FluxClipModel's
// encode_token_weights returns (T5's conditioning, CLIP-L's pooled output): CLIP-L's context is
// computed and thrown away.
//  - CLIP-L is SDClipModel(layer "last", return_projected_pooled=False): the pooled output is the
//    final-layer-normed last hidden state at the first EOS of the FIRST chunk, without
//    text_projection. Rows of a batch do not see each other and the pooled output is never
//    weighted, so only the first chunk is run, unweighted (no empty-prompt row).
//  - T5 (sd3_clip.T5XXLModel, no attention mask) runs ClipTokenWeightEncoder's weighting: with
//    any weight != 1 the empty row [</s>, <pad>, ...] of the same length is run beside the
//    prompt and a weighted token becomes (z - z_empty) * w + z_empty.
//  - CLIPSetLastLayer reaches both encoders (FluxClipModel.set_clip_options): CLIP-L's choice
//    changes only the discarded context; T5's hidden layer `layer` (when |layer| <= its depth)
//    replaces the last one, with the final layer norm applied (layer_norm_hidden_state=True):
//    the same as running the blocks up to it and the final norm.

// Note [Flux text encoder precision]
// ComfyUI keeps both encoders' weights in 16 bits and computes in float32
// (Note [T5 precision] in models/t5/t5_encoder.cpp; the same SDClipModel code runs CLIP-L):
// comfy/sd.py builds the CLIP with model_management.text_encoder_dtype() = float16, FluxClipModel
// keeps T5 in the file's dtype when it is no wider (pick_weight_dtype: bf16 and fp8 stay, f32
// becomes f16), and manual_cast casts each weight to the f32 activations at use. Here: the
// weights are loaded in that 16-bit dtype (fp8 ones stay fp8), a storage map names every weight's
// stored dtype, and the graphs declare f32, so each weight is CAST at use (Note [fp8 weights] in
// graph/graph.h). T5-XXL's activations overflow float16 (65504); computing in f32 is what keeps
// them finite, whatever the compute dtype of the rest of the workflow.
constexpr DType kCompute = DType::F32;

// Loads the floats of `src` in `store` (fp8 as the file or `at_load` says) with a storage map that
// makes every float weight a cast at use.
Result<std::shared_ptr<WeightSet>> load_stored(const TextEncoderSource& src, DType store,
                                               const LoadOptions& o,
                                               std::shared_ptr<const WeightStorageMap>& storage) {
  HR_ASSIGN_OR_RETURN(WeightFormats formats,
                      weight_formats_for(*src.file, src.prefix, o.text_encoder_weight_dtype));
  auto w = std::make_shared<WeightSet>();
  HR_TRY(weights_load_prefix(*w, src.file, src.prefix, store, &formats));
  auto map = formats.storage ? std::make_shared<WeightStorageMap>(*formats.storage)
                             : std::make_shared<WeightStorageMap>();
  for (const std::string& name : w->names()) {
    const HostTensor* t = w->find(name);
    if (!dtype_is_float(t->dtype()) || formats.scales.count(name) || map->count(name)) continue;
    (*map)[name] = WeightStorage{t->dtype(), "", false};
  }
  storage = map;
  w->set_storage(storage);
  return w;
}

// T5's stored dtype: the file's when it is 16-bit, else float16 (Note [Flux text encoder
// precision]; fp8 tensors keep their own format).
DType t5_store_dtype(const TextEncoderSource& src) {
  const SafetensorsEntry* e = src.file->find(src.prefix + "encoder.final_layer_norm.weight");
  if (e && (e->dtype == DType::F16 || e->dtype == DType::BF16)) return e->dtype;
  return DType::F16;
}

// ComfyUI set_clip_options for T5: how many blocks run before the final norm.
int t5_blocks_for_layer(int layer, int layers) {
  if (layer == 0 || layer >= layers || -layer > layers) return layers;
  return layer < 0 ? layers + layer + 1 : layer + 1;
}

Status ids_check(const std::vector<std::vector<int32_t>>& rows, int64_t vocab, const char* what) {
  for (const auto& row : rows)
    for (int32_t id : row)
      if (id < 0 || id >= vocab)
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "token id {} is outside the {}'s {}-entry vocabulary (is the tokenizer "
                          "the one this encoder was trained with?)",
                          id, what, vocab);
  return Status::ok_status();
}

}  // namespace

FluxTextEncoder::FluxTextEncoder(const ModelFamily& family, FluxClipL clip_l, FluxT5 t5,
                                 std::shared_ptr<const Tokenizer> clip_tokenizer,
                                 std::shared_ptr<const T5Tokenizer> t5_tokenizer)
    : family_(&family),
      clip_l_(std::move(clip_l)),
      t5_(std::move(t5)),
      clip_tokenizer_(std::move(clip_tokenizer)),
      t5_tokenizer_(std::move(t5_tokenizer)) {}

std::vector<std::string> FluxTextEncoder::parts() const { return {"l", "t5xxl"}; }

std::vector<std::shared_ptr<WeightSet>> FluxTextEncoder::stores() const {
  return {clip_l_.weights, t5_.weights};
}

std::string FluxTextEncoder::comfy_key_prefix(size_t i) const {
  if (i == 0) return "clip_l.transformer.";
  if (i == 1) return "t5xxl.transformer.";
  return "";
}

Result<HostTensor> FluxTextEncoder::encode_clip_l(Executor& ex, WeightSource* source,
                                                  const std::string& text) const {
  ChunkOptions co;
  co.pad = clip_tokenizer_->eos();
  TokenChunks all = prompt_tokenize(*clip_tokenizer_, text, co);
  TokenChunks first;  // Note [Flux text conditioning]: the first chunk, unweighted
  first.ids.push_back(all.ids.at(0));
  first.weights.push_back(std::vector<double>(first.ids[0].size(), 1.0));
  HR_TRY(ids_check(first.ids, clip_l_.config.vocab, "CLIP-L encoder"));
  CLIPEncodeOptions eo;
  eo.layer = -1;
  eo.layer_final_norm = true;
  eo.pad = clip_tokenizer_->eos();
  eo.bos = clip_tokenizer_->bos();
  eo.eos = clip_tokenizer_->eos();
  eo.project_pooled = false;
  WeightSource& run = source ? *source : *clip_l_.weights;
  run.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(CLIPConditioning c,
                      clip_text_encode(ex, run, *clip_l_.weights, clip_l_.config, first, eo));
  return std::move(c.pooled);
}

Result<HostTensor> FluxTextEncoder::encode_t5(Executor& ex, WeightSource* source,
                                              const std::string& text, int layer) const {
  const TokenChunks chunks = prompt_tokenize(*t5_tokenizer_, text, t5xxl_chunk_options(256));
  std::vector<std::vector<int32_t>> rows = chunks.ids;
  const bool weighted = !chunks.unweighted();
  if (weighted) {  // gen_empty_tokens: [</s>, <pad>, ...] as long as the longest row
    size_t longest = 0;
    for (const auto& r : rows) longest = std::max(longest, r.size());
    std::vector<int32_t> empty(longest, T5Tokenizer::kPad);
    empty[0] = T5Tokenizer::kEOS;
    rows.push_back(std::move(empty));
  }
  HR_TRY(ids_check(rows, t5_.config.vocab, "T5 encoder"));
  T5Config c = t5_.config;
  c.layers = t5_blocks_for_layer(layer, c.layers);
  WeightSource& run = source ? *source : *t5_.weights;
  run.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(HostTensor z, t5_encoder_run(ex, run, c, rows, kCompute));

  const int64_t L = z.shape()[1], D = z.shape()[2];
  const int64_t sections = int64_t(chunks.size());
  HostTensor out(DType::F32, {1, sections * L, D});
  std::memcpy(out.f32(), z.f32(), size_t(sections * L * D) * sizeof(float));
  if (!weighted) return out;
  const float* e = z.f32() + sections * L * D;  // the empty row's output
  for (int64_t k = 0; k < sections; ++k)
    for (int64_t j = 0; j < L; ++j) {
      const double wt = chunks.weights[size_t(k)][size_t(j)];
      if (wt == 1.0) continue;
      const float fw = float(wt);  // float32 arithmetic, as torch with a Python scalar
      float* dst = out.f32() + (k * L + j) * D;
      for (int64_t ch = 0; ch < D; ++ch) dst[ch] = (dst[ch] - e[j * D + ch]) * fw + e[j * D + ch];
    }
  return out;
}

Result<CondEntry> FluxTextEncoder::encode(Executor& ex,
                                          const std::map<std::string, std::string>& texts,
                                          int layer, const EncoderSources& sources) const {
  auto l = texts.find("l");
  auto t5 = texts.find("t5xxl");
  if (l == texts.end() || t5 == texts.end())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux's text encoder needs both prompts, 'l' (CLIP-L) and 't5xxl' (T5-XXL); "
                      "'{}' is missing",
                      l == texts.end() ? "l" : "t5xxl");
  WeightSource* clip_source = sources.size() > 0 ? sources[0] : nullptr;
  WeightSource* t5_source = sources.size() > 1 ? sources[1] : nullptr;
  HR_ASSIGN_OR_RETURN(HostTensor cond, encode_t5(ex, t5_source, t5->second, layer));
  HR_ASSIGN_OR_RETURN(HostTensor pooled, encode_clip_l(ex, clip_source, l->second));
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(std::move(cond));
  e.extras.set(kCondPooledOutput, std::make_shared<const HostTensor>(std::move(pooled)));
  return e;
}

Result<std::unique_ptr<TextEncoder>> flux_text_encoder_load(const ModelFamily& family,
                                                            const TextEncoderSource& clip_src,
                                                            const TextEncoderSource& t5_src,
                                                            const LoadOptions& options) {
  FluxClipL clip;
  std::shared_ptr<const WeightStorageMap> clip_storage;
  HR_ASSIGN_OR_RETURN(clip.weights, load_stored(clip_src, DType::F16, options, clip_storage));
  HR_ASSIGN_OR_RETURN(clip.config, clip_text_detect(*clip.weights, clip_src.heads));
  clip.config.storage = clip_storage;
  clip.config.dtype = kCompute;

  FluxT5 t5;
  std::shared_ptr<const WeightStorageMap> t5_storage;
  HR_ASSIGN_OR_RETURN(t5.weights, load_stored(t5_src, t5_store_dtype(t5_src), options, t5_storage));
  HR_ASSIGN_OR_RETURN(t5.config, t5_encoder_detect(*t5.weights));
  t5.config.storage = t5_storage;

  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> clip_tok,
                      tokenizer_for_checkpoint(clip_src.file->metadata(), options.models_dir));
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const T5Tokenizer> t5_tok,
                      t5_tokenizer_shared(options.models_dir));
  return std::unique_ptr<TextEncoder>(new FluxTextEncoder(family, std::move(clip), std::move(t5),
                                                          std::move(clip_tok), std::move(t5_tok)));
}

const ModelFamily* flux_text_encoder_family() {
  for (const ModelFamily* f : model_families()) {
    const auto& k = f->text_encoder_kinds;
    if (std::find(k.begin(), k.end(), kFluxClipL) != k.end() &&
        std::find(k.begin(), k.end(), kFluxT5XXL) != k.end())
      return f;
  }
  return model_family_find("flux");
}

Result<std::unique_ptr<TextEncoder>> flux_text_encoder_create(const ComponentLoad& load) {
  const CheckpointInfo& info = load.info;
  std::optional<TextEncoderSource> clip, t5;
  for (size_t i = 0; i < info.text_encoders.size(); ++i) {
    const TextEncoderPart& part = info.text_encoders[i];
    TextEncoderSource src{load.file, part.prefix, info.settings.text_encoder_heads_at(i)};
    if (part.kind == kFluxClipL) clip = src;
    if (part.kind == kFluxT5XXL) t5 = src;
  }
  if (!clip || !t5)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: a Flux checkpoint's text encoders are CLIP-L ('{}') and T5-XXL ('{}'); "
                      "{} is missing",
                      load.file->path(), kFluxClipLPrefix, kFluxT5XXLPrefix,
                      clip ? "T5-XXL" : "CLIP-L");
  return flux_text_encoder_load(*info.family, *clip, *t5, load.options);
}

}  // namespace hr
