// Sampling nodes: EmptyLatentImage, KSampler, KSamplerAdvanced (comfy.sample.sample's flow).
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "backend/backend.h"
#include "core/bytes.h"
#include "sampling/latent_preview.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "sampling/cfg.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/samplers.h"
#include "sampling/schedulers.h"
#include "sampling/torch_rng.h"
#include "workflow/execute.h"

namespace hr {
namespace {

struct SamplerInputs {
  std::shared_ptr<const ModelValue> model;
  std::shared_ptr<const Conditioning> positive, negative;
  std::shared_ptr<const Latent> latent;
  uint64_t seed = 0;
  int steps = 20;
  double cfg = 8.0;
  std::string sampler, scheduler;
  double denoise = 1.0;
  bool disable_noise = false;
  int start_step = -1, last_step = -1;
  bool force_full_denoise = false;
};

// Says when a UNet call streamed weights (Note [streamed execution] in graph/stream_copies.cpp) or
// recovered from a failed allocation, once per change.
void residency_report(ExecContext& ctx, Executor& ex, uint64_t recoveries_before) {
  const ResidencyPlan& r = ex.last_residency();
  if (ex.recoveries() > recoveries_before)
    ctx.memory_decision("UNet: an allocation failed; planned again and " + ex.last_residency_text());
  else if (r.streams())
    ctx.memory_decision(fmt::format("UNet {}: weights {} > {} left beside the arena",
                                    ex.last_residency_text(),
                                    bytes_format(r.resident_bytes + r.streamed_bytes),
                                    bytes_format(r.room)));
}

// A step's denoised estimate as a latent2rgb PNG for the preview stream; a preview that cannot
// be made is skipped (it never fails the sampler).
void preview_send(const ExecContext& ctx, const HostTensor& x0, const LatentFormat& format) {
  Result<Image8> img = latent_preview(x0, format);
  if (!img.ok()) return;
  Result<std::string> png = png_encode(*img);
  if (png.ok()) ctx.preview(std::make_shared<const std::string>(std::move(png).value()));
}

// The model call for one conditioning entry (or the batched positive+negative pair).
Result<HostTensor> model_call(ExecContext& ctx, const ModelValue& mv, const HostTensor& x_in,
                              float t, const std::vector<const CondEntry*>& entries) {
  DiffusionModel& m = *mv.model->diffusion;
  int64_t n = x_in.shape()[0];
  HostTensor ts(DType::F32, Shape{n});
  for (int64_t i = 0; i < n; ++i) ts.f32()[i] = t;
  HR_TRY(ctx.check_interrupt());
  WeightSource& weights = mv.weights();
  weights.bind(ctx.opts.backend, ctx.opts.allocator);
  Executor& ex = *ctx.opts.executor;
  const uint64_t recoveries = ex.recoveries();
  Result<HostTensor> out = m.run(ex, weights, x_in, ts, entries);
  if (out.ok()) residency_report(ctx, ex, recoveries);
  return out;
}

// Mean of the outputs for several entries (ComfyUI averages conditionings without areas).
ModelFn entries_fn(ExecContext& ctx, const ModelValue& m, const Conditioning& c) {
  return [&ctx, &m, &c](const HostTensor& x_in, float t) -> Result<HostTensor> {
    HostTensor acc;
    for (size_t i = 0; i < c.entries.size(); ++i) {
      HR_ASSIGN_OR_RETURN(HostTensor o, model_call(ctx, m, x_in, t, {&c.entries[i]}));
      if (i == 0) {
        acc = std::move(o);
      } else {
        for (int64_t k = 0; k < acc.numel(); ++k) acc.f32()[k] += o.f32()[k];
      }
    }
    float inv = 1.0f / float(c.entries.size());
    if (c.entries.size() > 1)
      for (int64_t k = 0; k < acc.numel(); ++k) acc.f32()[k] *= inv;
    return acc;
  };
}

// Note [cond/uncond split]
// Batching cond and uncond (Note [batched cfg]) doubles the UNet's activations. When that call
// cannot run within the room the budget leaves even with every weight streamed (its arena plus
// the smallest staging room, Executor::min_device_bytes) but one entry's call can, the two run
// one after the other. Returns why, or "" to keep them batched. A plan runs this same code (Note [plan run]).
Result<std::string> cfg_split_reason(ExecContext& ctx, DiffusionModel& m, const Shape& latent,
                                     const Conditioning& pos, const Conditioning& neg) {
  Executor& ex = *ctx.opts.executor;
  const uint64_t room = ex.arena_room();
  if (room == UINT64_MAX) return std::string();
  const int64_t B = latent[0], h = latent[2], w = latent[3];
  const int64_t tp = pos.entries[0].cond->shape()[1], tn = neg.entries[0].cond->shape()[1];
  const Shape pair{2 * B, latent[1], h, w}, one_batch{B, latent[1], h, w};
  HR_ASSIGN_OR_RETURN(uint64_t both, m.min_device_bytes(ex, pair, std::lcm(tp, tn)));
  if (both <= room) return std::string();
  HR_ASSIGN_OR_RETURN(uint64_t one_p, m.min_device_bytes(ex, one_batch, tp));
  HR_ASSIGN_OR_RETURN(uint64_t one_n, m.min_device_bytes(ex, one_batch, tn));
  const uint64_t one = std::max(one_p, one_n);
  if (one > room) return std::string();  // neither fits: the batched call fails and says why
  return fmt::format("UNet cond and uncond one after the other: batch {} needs at least {} "
                     "> {} left; batch {} needs {}",
                     2 * B, bytes_format(both), bytes_format(room), B, bytes_format(one));
}

// ComfyUI's fix_empty_latent_channels (comfy/sample.py): an all-zero latent whose channel count
// is not the model's (EmptyLatentImage's 4 channels before a 16-channel model) becomes zeros of
// the model's channels.
HostTensor empty_latent_fit(const HostTensor& lat, int channels) {
  const Shape& s = lat.shape();
  if (s.rank != 4 || s[1] == channels) return lat.clone();
  for (int64_t i = 0; i < lat.numel(); ++i)
    if (lat.f32()[i] != 0.0f) return lat.clone();
  return HostTensor(DType::F32, Shape{s[0], channels, s[2], s[3]});
}

// CFGGuider.inner_sample's process_latent_in, which leaves an all-zero latent as it is (Note
// [latent format shift]).
void latent_process_in(const LatentFormat& format, HostTensor& x) {
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.f32()[i] != 0.0f) return format.process_in(x.f32(), x.numel());
}

// Note [plan steps]
// Every step of a sampler calls the model with the same shapes, so the allocator reaches its
// fixed point within the first step (weights uploaded or streamed, the arena and the ring
// allocated, the cond/uncond split decided) and later steps hold and free the same bytes. A plan
// run (Note [plan run] in workflow/workflow_plan.cpp) therefore samples the first kPlanSteps of
// the schedule only: a 10,000-step job plans as fast as a 3-step one, and the bisection for the
// smallest budget, which runs the prompt some 20 times, stays cheap. The plan's graph_runs count
// the calls of those steps.
constexpr size_t kPlanSteps = 3;

Result<std::vector<std::any>> ksampler_run(ExecContext& ctx, const SamplerInputs& s) {
  if (!s.model || !s.positive || !s.negative || !s.latent)
    return make_error(ErrorCode::INVALID_ARGUMENT, "sampler inputs missing");
  if (s.positive->entries.empty() || s.negative->entries.empty())
    return make_error(ErrorCode::INVALID_ARGUMENT, "empty conditioning");
  LoadedModel& loaded = *s.model->model;
  if (!loaded.diffusion)
    return make_error(ErrorCode::INVALID_ARGUMENT, "model input has no diffusion model loaded");
  DiffusionModel& m = *loaded.diffusion;
  const std::unique_ptr<ModelSampling> sampling = model_sampling_create(s.model->sampling_spec());
  const ModelSampling& ms = *sampling;
  HR_ASSIGN_OR_RETURN(std::vector<float> sigmas,
                      ksampler_sigmas(ms, s.scheduler, s.sampler, s.steps, s.denoise, s.start_step,
                                      s.last_step, s.force_full_denoise));
  if (ctx.opts.plan_run && sigmas.size() > kPlanSteps + 1) sigmas.resize(kPlanSteps + 1);
  const LatentFormat& format = loaded.latent_format();
  HostTensor latent_in = empty_latent_fit(*s.latent->samples, format.channels);
  const Shape lat_shape = latent_in.shape();
  HostTensor noise = s.disable_noise ? HostTensor(DType::F32, lat_shape)
                                     : prepare_noise(lat_shape, s.seed, s.latent->batch_index);
  latent_process_in(format, latent_in);

  DenoiseFn denoise;
  const Conditioning& pos = *s.positive;
  const Conditioning& neg = *s.negative;
  bool batched = pos.entries.size() == 1 && neg.entries.size() == 1;
  if (batched && !cfg_skips_uncond(float(s.cfg))) {
    HR_ASSIGN_OR_RETURN(std::string split, cfg_split_reason(ctx, m, lat_shape, pos, neg));
    if (!split.empty()) {
      batched = false;
      ctx.memory_decision(split);
    }
  }
  if (batched) {
    // Note [batched cfg]: positive and negative share one model call when both are single
    // entries, halving launches; cfg_denoiser_batched splits the output halves again.
    denoise = cfg_denoiser_batched(
        ms,
        [&](const HostTensor& x_in, float t) -> Result<HostTensor> {
          int64_t b = lat_shape[0];
          if (x_in.shape()[0] == b) return model_call(ctx, *s.model, x_in, t, {&pos.entries[0]});
          return model_call(ctx, *s.model, x_in, t, {&pos.entries[0], &neg.entries[0]});
        },
        float(s.cfg));
  } else {
    denoise = cfg_denoiser(ms, entries_fn(ctx, *s.model, pos), entries_fn(ctx, *s.model, neg),
                           float(s.cfg));
  }
  SampleParams p;
  p.sampler = s.sampler;
  p.sigmas = sigmas;
  p.seed = s.seed;
  p.noise_device = ctx.opts.backend && ctx.opts.backend->torch_generator() ==
                    TorchGenerator::CUDA_PHILOX ? NoiseDevice::CUDA : NoiseDevice::CPU;
  int total = int(sigmas.size()) - 1;
  p.callback = [&ctx, total, &format](int step, int, const HostTensor&, const HostTensor& x0) {
    ctx.progress(step + 1, total);
    if (ctx.opts.preview) preview_send(ctx, x0, format);
  };
  p.interrupted = [&ctx] { return ctx.interrupted(); };
  HR_ASSIGN_OR_RETURN(HostTensor x, sample(ms, denoise, noise, latent_in, p));
  format.process_out(x.f32(), x.numel());
  Latent out;
  out.samples = std::make_shared<const HostTensor>(std::move(x));
  out.batch_index = s.latent->batch_index;
  return std::vector<std::any>{std::make_shared<const Latent>(std::move(out))};
}

void read_common(const NodeInputs& in, SamplerInputs& s) {
  if (auto v = in.get<std::shared_ptr<const ModelValue>>("model")) s.model = *v;
  if (auto v = in.get<std::shared_ptr<const Conditioning>>("positive")) s.positive = *v;
  if (auto v = in.get<std::shared_ptr<const Conditioning>>("negative")) s.negative = *v;
  if (auto v = in.get<std::shared_ptr<const Latent>>("latent_image")) s.latent = *v;
  s.steps = int(in.get_int("steps"));
  s.cfg = in.get_float("cfg");
  s.sampler = in.get_string("sampler_name");
  s.scheduler = in.get_string("scheduler");
}

uint64_t get_seed(const NodeInputs& in, const std::string& name) {
  const Json* j = in.literal(name);
  if (j && j->is_number_unsigned()) return j->get<uint64_t>();
  return uint64_t(in.get_int(name));
}

}  // namespace

void nodes_register_sampling(NodeRegistry& r, const NodeEnv&) {
  NodeDef empty;
  empty.class_type = "EmptyLatentImage";
  empty.display_name = "Empty Latent Image";
  empty.category = "latent";
  InputSpec w = spec_int("width", 512, 16, kMaxResolution, 8);
  InputSpec h = spec_int("height", 512, 16, kMaxResolution, 8);
  w.enforce_step = h.enforce_step = true;
  empty.inputs = {w, h, spec_int("batch_size", 1, 1, 4096)};
  empty.outputs = {{IoType::LATENT, "LATENT"}};
  empty.run = [](ExecContext&, const NodeInputs& in) -> Result<std::vector<std::any>> {
    int64_t b = in.get_int("batch_size"), hh = in.get_int("height") / 8, ww = in.get_int("width") / 8;
    // 4 x h x w floats per image; refuse what cannot be held on the host rather than abort.
    if (double(b) * double(hh) * double(ww) * 16.0 > double(1ull << 36))
      return make_error(ErrorCode::INVALID_ARGUMENT, "latent batch {}x4x{}x{} is too large", b, hh, ww);
    Latent l;
    l.samples = std::make_shared<const HostTensor>(DType::F32, Shape{b, 4, hh, ww});
    return std::vector<std::any>{std::make_shared<const Latent>(std::move(l))};
  };
  r.add(empty);

  auto common_inputs = [](const std::string& seed_name) {
    InputSpec seed = spec_int(seed_name, 0, 0, 18446744073709551615.0);
    return std::vector<InputSpec>{spec_link("model", IoType::MODEL), seed,
                                  spec_int("steps", 20, 1, 10000),
                                  spec_float("cfg", 8.0, 0.0, 100.0, 0.1),
                                  spec_combo("sampler_name", sampler_names()),
                                  spec_combo("scheduler", scheduler_names()),
                                  spec_link("positive", IoType::CONDITIONING),
                                  spec_link("negative", IoType::CONDITIONING),
                                  spec_link("latent_image", IoType::LATENT)};
  };

  NodeDef ks;
  ks.class_type = "KSampler";
  ks.category = "sampling";
  ks.inputs = common_inputs("seed");
  ks.inputs.push_back(spec_float("denoise", 1.0, 0.0, 1.0, 0.01));
  ks.outputs = {{IoType::LATENT, "LATENT"}};
  ks.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    SamplerInputs s;
    read_common(in, s);
    s.seed = get_seed(in, "seed");
    s.denoise = in.get_float("denoise");
    return ksampler_run(ctx, s);
  };
  r.add(ks);

  NodeDef adv;
  adv.class_type = "KSamplerAdvanced";
  adv.display_name = "KSampler (Advanced)";
  adv.category = "sampling";
  std::vector<InputSpec> ci = common_inputs("noise_seed");
  adv.inputs = {ci[0], spec_combo("add_noise", {"enable", "disable"})};
  adv.inputs.insert(adv.inputs.end(), ci.begin() + 1, ci.end());
  adv.inputs.push_back(spec_int("start_at_step", 0, 0, 10000));
  adv.inputs.push_back(spec_int("end_at_step", 10000, 0, 10000));
  adv.inputs.push_back(spec_combo("return_with_leftover_noise", {"disable", "enable"}));
  adv.outputs = {{IoType::LATENT, "LATENT"}};
  adv.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    SamplerInputs s;
    read_common(in, s);
    s.seed = get_seed(in, "noise_seed");
    s.disable_noise = in.get_string("add_noise") == "disable";
    s.force_full_denoise = in.get_string("return_with_leftover_noise") != "enable";
    s.start_step = int(in.get_int("start_at_step"));
    s.last_step = int(in.get_int("end_at_step"));
    return ksampler_run(ctx, s);
  };
  r.add(adv);
}

}  // namespace hr
