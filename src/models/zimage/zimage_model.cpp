// ZImageModel: the DiT's caption context from conditioning entries (ComfyUI's model_base.Lumina2
// extra_conds, c_crossattn a CONDRegular), its calls, and the family's factory.
#include "models/zimage/zimage_model.h"

#include <fmt/format.h>

#include <vector>

#include "models/checkpoint.h"
#include "models/weight_load.h"
#include "models/zimage/zimage_dit.h"

namespace hr {
namespace {

// One entry's context [rows, L, cap_feat_dim] f32.
Result<HostTensor> entry_context(const ZImageConfig& cfg, const CondEntry& e, int64_t rows) {
  const HostTensor* c = e.cond.get();
  if (!c || c->shape().rank != 3 || c->shape()[0] != 1 || c->shape()[1] < 1 ||
      c->shape()[2] != cfg.cap_feat_dim)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Z-Image needs a [1, tokens, {}] text context (its Qwen3 text encoder, "
                      "CLIPLoader type lumina2); got {}",
                      cfg.cap_feat_dim, c ? c->desc().str() : "none");
  HostTensor f = c->dtype() == DType::F32 ? c->clone() : c->to(DType::F32);
  return context_repeat(f, rows, f.shape()[1]);
}

}  // namespace

Result<uint64_t> ZImageModel::min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) {
  return zimage_dit_min_device_bytes(ex, config, latent, tokens, dtype);
}

// Note [z-image entries]
// ComfyUI batches conditionings into one model call only when their conds can concatenate
// (comfy/samplers.py can_concat): Lumina2's caption context is a CONDRegular, equal shapes only.
// Repeating caption tokens to a common length, as SD's cross-attention allows, would change
// Z-Image's joint attention (the caption is part of the sequence), so consecutive entries of
// equal token counts share a call and the others run one call each, as ComfyUI runs them.
// ConditioningZeroOut keeps the positive's length, so the template's pair is one batch.
Result<HostTensor> ZImageModel::run(Executor& ex, WeightSource& weights, const HostTensor& x,
                                    const HostTensor& timesteps,
                                    std::span<const CondEntry* const> entries) {
  if (config.axes_dim.size() != 3)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: the Z-Image DiT's heads are {} wide; Z-Image's RoPE axes [32, 48, 48] "
                      "fit 128 only",
                      path.empty() ? "Z-Image" : path, config.head_dim());
  if (entries.empty() || x.shape().rank != 4 || x.shape()[0] % int64_t(entries.size()))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Z-Image: latent {} does not split over {} conditioning entries",
                      x.desc().str(), entries.size());
  const int64_t per = x.shape()[0] / int64_t(entries.size());
  std::vector<HostTensor> ctx;
  for (const CondEntry* e : entries) {
    HR_ASSIGN_OR_RETURN(HostTensor c, entry_context(config, *e, per));
    ctx.push_back(std::move(c));
  }
  HostTensor result;
  for (size_t i = 0; i < ctx.size();) {
    size_t j = i + 1;
    while (j < ctx.size() && ctx[j].shape() == ctx[i].shape()) ++j;
    HostTensor context = std::move(ctx[i]);
    for (size_t k = i + 1; k < j; ++k) context = tensor_concat0(context, ctx[k]);
    const int64_t from = int64_t(i) * per, n = int64_t(j - i) * per;
    HostTensor xs = tensor_rows0(x, from, n), ts = tensor_rows0(timesteps, from, n);
    ZImageInputs in{&xs, &ts, &context};
    HR_ASSIGN_OR_RETURN(HostTensor out, zimage_dit_run(ex, config, weights, dtype, in));
    result = i == 0 ? std::move(out) : tensor_concat0(result, out);
    i = j;
  }
  return result;
}

Result<std::unique_ptr<DiffusionModel>> zimage_model_create(const ComponentLoad& load) {
  const CheckpointInfo& ci = load.info;
  HR_ASSIGN_OR_RETURN(ZImageConfig cfg, zimage_config_detect(*load.file, ci.diffusion_prefix));
  HR_ASSIGN_OR_RETURN(WeightFormats formats, dit_weight_formats(load, cfg));
  return dit_model_load<ZImageModel>(load, std::move(cfg), formats, "the Z-Image diffusion model");
}

ZImageModel* zimage_model(LoadedModel& model) {
  return dynamic_cast<ZImageModel*>(model.diffusion.get());
}

}  // namespace hr
