// FluxModel: the DiT's inputs from latents and conditioning entries (ComfyUI a125cd84
// comfy/model_base.py Flux.extra_conds / _apply_model, comfy/ldm/flux/model.py Flux._forward),
// the graph cache, and the family's factory.
#include "models/flux/flux_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "graph/graph_cache.h"
#include "models/checkpoint.h"
#include "models/flux/flux_tokens.h"
#include "models/latent_crop.h"
#include "models/weight_load.h"

namespace hr {
namespace {

// The conditioning key ComfyUI's ReferenceLatent node sets for Flux Kontext.
constexpr const char* kCondReferenceLatents = "reference_latents";

// Note [graph reuse] in graph/graph_cache.cpp.
Result<std::shared_ptr<const Graph>> flux_graph_shared(const FluxConfig& cfg, int64_t batch,
                                                       int64_t h_tokens, int64_t w_tokens,
                                                       int64_t txt_tokens, DType dtype) {
  static GraphCache cache;
  const std::string key = fmt::format("{}|{}|{}x{}x{}|{}|{}", cfg.str(), cfg.storage_key, batch,
                                      h_tokens, w_tokens, txt_tokens, dtype_name(dtype));
  return cache.get(key,
                   [&] { return flux_dit_graph(cfg, batch, h_tokens, w_tokens, txt_tokens, dtype); });
}

// ComfyUI's pad_to_patch_size (comfy/ldm/common_dit.py): an odd height or width gets one more
// row / column at the bottom / right, circular (the first row / column again).
HostTensor pad_even(const HostTensor& x) {
  const Shape& s = x.shape();
  const int64_t b = s[0], c = s[1], h = s[2], w = s[3];
  const int64_t hp = h + h % 2, wp = w + w % 2;
  if (hp == h && wp == w) return x.clone();
  HostTensor out(DType::F32, Shape{b, c, hp, wp});
  for (int64_t p = 0; p < b * c; ++p)
    for (int64_t y = 0; y < hp; ++y)
      for (int64_t xx = 0; xx < wp; ++xx)
        out.f32()[(p * hp + y) * wp + xx] = x.f32()[(p * h + y % h) * w + xx % w];
  return out;
}

const HostTensor* as_dtype(const HostTensor& t, DType d, HostTensor& tmp) {
  if (t.dtype() == d) return &t;
  tmp = t.to(d);
  return &tmp;
}

Status inputs_check(const FluxConfig& cfg, const FluxInputs& in) {
  if (!in.x || !in.timesteps || !in.txt || !in.y)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_dit_run: x, timesteps, txt and y are needed");
  const Shape &x = in.x->shape(), &t = in.timesteps->shape(), &txt = in.txt->shape(),
              &y = in.y->shape();
  const int64_t b = x.rank == 4 ? x[0] : -1;
  if (x.rank != 4 || in.x->dtype() != DType::F32 || x[1] * 4 != cfg.in_channels || t.rank != 1 ||
      t[0] != b || txt.rank != 3 || txt[0] != b || txt[2] != cfg.context_in_dim || y.rank != 2 ||
      y[0] != b || y[1] != cfg.vec_in_dim)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_dit_run: x {} must be f32 [B, {}, H, W], timesteps {} [B], txt {} "
                      "[B, L, {}], y {} [B, {}]",
                      in.x->desc().str(), cfg.in_channels / 4, in.timesteps->desc().str(),
                      in.txt->desc().str(), cfg.context_in_dim, in.y->desc().str(), cfg.vec_in_dim);
  if (cfg.guidance_embed && (!in.guidance || in.guidance->shape() != Shape{b}))
    return make_error(ErrorCode::INVALID_ARGUMENT, "flux_dit_run: this model needs guidance [{}]",
                      b);
  if (cfg.axes_dim.size() != 3)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "flux_dit_run: no RoPE axes for head width {} (Flux's are 16/56/56 for 128)",
                      cfg.head_dim());
  return Status();
}

}  // namespace

Result<HostTensor> flux_dit_run(Executor& ex, const FluxConfig& cfg_in, WeightSource& weights,
                                DType dtype, const FluxInputs& in) {
  // A guidance-distilled model called without guidance skips the embedding (forward_orig).
  FluxConfig cfg = cfg_in;
  if (!in.guidance) cfg.guidance_embed = false;
  HR_TRY(inputs_check(cfg, in));
  const Shape& xs = in.x->shape();
  const int64_t b = xs[0], h = xs[2], w = xs[3];
  const int64_t ht = (h + 1) / 2, wt = (w + 1) / 2, txt_len = in.txt->shape()[1];
  HR_ASSIGN_OR_RETURN(HostTensor img, flux_patchify(pad_even(*in.x)));
  HR_ASSIGN_OR_RETURN(HostTensor pe, flux_pe_table(txt_len, ht, wt, cfg.axes_dim, cfg.theta));
  HR_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> g,
                      flux_graph_shared(cfg, b, ht, wt, txt_len, dtype));
  HostTensor ic, tc, cc, yc, gc;
  HostInputs inputs = {{"img", as_dtype(img, dtype, ic)},
                       {"txt", as_dtype(*in.txt, dtype, cc)},
                       {"timesteps", as_dtype(*in.timesteps, DType::F32, tc)},
                       {"y", as_dtype(*in.y, dtype, yc)},
                       {"pe", &pe}};
  if (cfg.guidance_embed) inputs.push_back({"guidance", as_dtype(*in.guidance, DType::F32, gc)});
  weights.bind(&ex.backend(), &ex.allocator());
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, ex.run(*g, inputs, weights));
  if (outs.size() != 1)
    return make_error(ErrorCode::INTERNAL, "Flux graph returned {} outputs", outs.size());
  HostTensor tokens = outs[0].dtype() == DType::F32 ? std::move(outs[0]) : outs[0].to(DType::F32);
  HR_ASSIGN_OR_RETURN(HostTensor out,
                      flux_unpatchify(tokens, cfg.out_channels / 4, 2 * ht, 2 * wt));
  return latent_crop(std::move(out), h, w);
}

Result<uint64_t> flux_dit_min_device_bytes(Executor& ex, const FluxConfig& cfg, const Shape& latent,
                                           int64_t tokens, DType dtype) {
  HR_ASSIGN_OR_RETURN(
      std::shared_ptr<const Graph> g,
      flux_graph_shared(cfg, latent[0], (latent[2] + 1) / 2, (latent[3] + 1) / 2, tokens, dtype));
  return ex.min_device_bytes(*g);
}

Result<uint64_t> FluxModel::min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) {
  return flux_dit_min_device_bytes(ex, config, latent, tokens, dtype);
}

namespace {

// Note [flux guidance dtype]
// ComfyUI's _apply_model converts every extra condition to the model's dtype, guidance among
// them, and Flux's timestep_embedding then computes 1000 * guidance in that dtype before its
// float32 sines: in bf16, guidance 3.5 embeds as 3504, not 3500. The graph scales its f32
// "guidance" input by 1000 in f32, so the host passes the value whose f32 product is the one
// ComfyUI embeds: round(1000 * round(g)) / 1000, rounding in the compute dtype (exact in f32).
float guidance_value(double g, DType dtype) {
  if (dtype == DType::F32) return float(g);
  HostTensor t(DType::F32, Shape{1});
  t.f32()[0] = float(g);
  HostTensor r = t.to(dtype).to(DType::F32);
  r.f32()[0] *= 1000.0f;
  HostTensor p = r.to(dtype).to(DType::F32);
  return p.f32()[0] / 1000.0f;
}

// One entry's txt, y and guidance, `rows` times.
struct EntryInputs {
  HostTensor txt, y, guidance;
  bool has_guidance = false;
};

Result<EntryInputs> entry_inputs(const FluxConfig& cfg, DType dtype, const CondEntry& e,
                                 int64_t rows) {
  EntryInputs r;
  if (!e.cond || e.cond->shape().rank != 3 || e.cond->shape()[2] != cfg.context_in_dim)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux needs a [1, tokens, {}] text context (T5-XXL); got {}",
                      cfg.context_in_dim, e.cond ? e.cond->desc().str() : "none");
  if (e.extras.has(kCondReferenceLatents))
    return make_error(ErrorCode::UNSUPPORTED,
                      "Flux Kontext reference latents (ReferenceLatent) are not supported");
  const HostTensor* pooled = e.pooled();
  if (!pooled || pooled->numel() < cfg.vec_in_dim || pooled->dtype() != DType::F32)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux needs the conditioning's pooled output (CLIP-L, width {}); got {}",
                      cfg.vec_in_dim, pooled ? pooled->desc().str() : "none");
  r.txt = context_repeat(*e.cond, rows, e.cond->shape()[1]);
  // encode_adm returns pooled_output; forward_orig reads y[:, :vec_in_dim]; CONDRegular repeats
  // the entry's one row over the batch.
  r.y = HostTensor(DType::F32, Shape{rows, cfg.vec_in_dim});
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(r.y.f32() + i * cfg.vec_in_dim, pooled->f32(), size_t(cfg.vec_in_dim) * 4);
  // extra_conds: kwargs.get("guidance", 3.5); None drops it (Note [flux guidance dtype]).
  std::optional<double> g = cond_guidance(e.extras);
  r.has_guidance = cfg.guidance_embed && g.has_value();
  if (r.has_guidance) {
    r.guidance = HostTensor(DType::F32, Shape{rows});
    for (int64_t i = 0; i < rows; ++i) r.guidance.f32()[i] = guidance_value(*g, dtype);
  }
  return r;
}

}  // namespace

// Note [flux entries]
// ComfyUI batches conditionings into one model call only when every condition can concatenate
// (comfy/samplers.py can_concat): Flux's text context is a CONDRegular, equal shapes only, and a
// guidance set to None is a missing key. Entries of other token counts or guidance presence
// therefore run one call each here too (repeating text tokens, as SD's cond_context_batch does,
// would change Flux's joint attention); consecutive compatible entries share a call.
Result<HostTensor> FluxModel::run(Executor& ex, WeightSource& weights, const HostTensor& x,
                                  const HostTensor& timesteps,
                                  std::span<const CondEntry* const> entries) {
  if (config.axes_dim.empty())  // Note [flux rope axes]
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: the Flux DiT's heads are {} wide, and Flux's RoPE axes [16, 56, 56] fit "
                      "128 only: state three even widths summing to {} as 'headroom.flux.axes_dim' "
                      "in the file's metadata (\"a,b,c\") or in the YAML file beside it",
                      path.empty() ? "Flux" : path, config.head_dim(), config.head_dim());
  if (entries.empty() || x.shape().rank != 4 || x.shape()[0] % int64_t(entries.size()))
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "Flux: latent {} does not split over {} conditioning entries", x.desc().str(),
                      entries.size());
  const int64_t per = x.shape()[0] / int64_t(entries.size());
  std::vector<EntryInputs> ins;
  for (const CondEntry* e : entries) {
    HR_ASSIGN_OR_RETURN(EntryInputs in, entry_inputs(config, dtype, *e, per));
    ins.push_back(std::move(in));
  }
  HostTensor result;
  for (size_t i = 0; i < ins.size();) {
    size_t j = i + 1;
    while (j < ins.size() && ins[j].has_guidance == ins[i].has_guidance &&
           ins[j].txt.shape() == ins[i].txt.shape())
      ++j;
    HostTensor txt = std::move(ins[i].txt), y = std::move(ins[i].y), g = std::move(ins[i].guidance);
    for (size_t k = i + 1; k < j; ++k) {
      txt = tensor_concat0(txt, ins[k].txt);
      y = tensor_concat0(y, ins[k].y);
      if (ins[i].has_guidance) g = tensor_concat0(g, ins[k].guidance);
    }
    const int64_t from = int64_t(i) * per, n = int64_t(j - i) * per;
    HostTensor xs = tensor_rows0(x, from, n), ts = tensor_rows0(timesteps, from, n);
    FluxInputs in{&xs, &ts, &txt, &y, ins[i].has_guidance ? &g : nullptr};
    HR_ASSIGN_OR_RETURN(HostTensor out, flux_dit_run(ex, config, weights, dtype, in));
    result = i == 0 ? std::move(out) : tensor_concat0(result, out);
    i = j;
  }
  return result;
}

// Note [flux rope axes]
// The RoPE axes (EmbedND's axes_dim: how the head width splits over the token index, row and
// column) shape no tensor, so no file shows them. ComfyUI fixes [16, 56, 56] (model_detection.py),
// which fits Flux's 128-wide heads only (flux_config_detect leaves the axes empty for any other
// width). A DiT with other heads (the tiny test checkpoints) states them as
// headroom.flux.axes_dim, in its metadata or the YAML beside it (Note [model settings order]);
// a stated value must be three even widths (each axis rotates pairs) summing to the head width.
// A model without axes loads (tests set them on the config) and refuses to run, naming the key.
Status flux_axes_apply(FluxConfig& cfg, const ModelSettings& settings, const std::string& path) {
  const ModelSetting<std::vector<int>>& axes = settings.flux_axes_dim;
  if (!axes.value) return Status();
  const std::vector<int>& a = *axes.value;
  bool ok = a.size() == 3;
  int sum = 0;
  for (int v : a) {
    ok = ok && v > 0 && v % 2 == 0;
    sum += v;
  }
  if (!ok || sum != cfg.head_dim())
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: {} gives RoPE axes [{}]; this Flux DiT needs three even widths summing "
                      "to its head width {} (hidden {} / {} heads)",
                      path, axes.source, fmt::join(a, ", "), cfg.head_dim(), cfg.hidden_size,
                      cfg.num_heads);
  cfg.axes_dim = a;
  return Status();
}

Result<std::unique_ptr<DiffusionModel>> flux_model_create(const ComponentLoad& load) {
  const CheckpointInfo& ci = load.info;
  HR_ASSIGN_OR_RETURN(FluxConfig cfg, flux_config_detect(*load.file, ci.diffusion_prefix));
  // Note [flux variants] in flux_family.cpp: img_in wider than 64 is Fill (384) or a control
  // model, whose extra input channels come from nodes headroom does not have.
  if (cfg.in_channels != cfg.out_channels)
    return make_error(ErrorCode::UNSUPPORTED,
                      "{}: a Flux model with {} input channels ({}) is not supported: Flux Fill "
                      "(384, inpainting) and the control models (Canny/Depth, 128) need image "
                      "conditioning headroom does not have; Flux dev/schnell have 64",
                      load.file->path(), cfg.in_channels,
                      cfg.in_channels == 384 ? "Flux Fill" : "not dev or schnell");
  HR_ASSIGN_OR_RETURN(WeightFormats formats, dit_weight_formats(load, cfg));
  HR_TRY(flux_axes_apply(cfg, ci.settings, load.file->path()));
  return dit_model_load<FluxModel>(load, std::move(cfg), formats, "the Flux diffusion model");
}

FluxModel* flux_model(LoadedModel& model) {
  return dynamic_cast<FluxModel*>(model.diffusion.get());
}

}  // namespace hr
