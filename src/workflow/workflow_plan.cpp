// workflow_plan: what a workflow would allocate, node by node, without loading or running it.
#include "workflow/workflow_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/bytes.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "models/checkpoint.h"
#include "models/clip_text.h"
#include "models/clip_tokenizer.h"
#include "graph/residency.h"
#include "models/prompt_weights.h"
#include "models/vae_tiled.h"
#include "nodes/encoder_settings.h"
#include "nodes/model_paths.h"
#include "nodes/nodes.h"
#include "sampling/cfg.h"
#include "sampling/model_sampling.h"
#include "sampling/schedulers.h"
#include "workflow/execute.h"

namespace hr {

// Note [workflow plan]
// The plan replays what a run allocates through the Allocator, from the same graphs the nodes
// build (same configs, shapes and dtype) planned by an Executor on the same backend:
// - the Executor keeps ONE arena and reallocates it (freeing first) only when a plan needs more,
//   so the activations held are the running maximum of the arenas planned so far;
// - on a backend that is not host-visible, each model's weights are uploaded into Pool::WEIGHTS
//   on first use, per name and layout after the graph passes, in node order, and stay until an
//   allocation that does not fit reclaims the shortfall from idle models, least recently used
//   model first and within it least recently used tensors first, whole tensors at a time
//   (Note [reclaim] in allocator.cpp, WeightSet::reclaim);
//   on a host-visible backend (the CPU) the host copies are counted the same way (adopted);
// - a graph whose weights and arena exceed the budget streams weights: residency_plan within
//   the budget less its arena (every other holder is idle then), the streamed weights' copies
//   dropped, the staging ring allocated after the arena (Note [streamed execution]);
// - VAEDecode / VAEEncode decide whole / per image / tiled with vae_decide_for against the room
//   arena_room() would give: the budget less the VAE's own resident weights (or, as the fallback,
//   the whole budget with the VAE's weights streamed).
// The build step (headers, tokenization, shapes, graph plans) runs once; the replay is cheap, so
// the smallest fitting budget is found by bisection over it. Not modelled: the --lowvram weights
// cap (trimmed after runs and applied to residency), reclaim of the idle arena between
// runs (the executor is an idle holder while vae_weights_upload runs), and the CUDA context
// outside the allocator.

namespace {

// What flows along a link, as far as memory is concerned.
struct PlanValue {
  int model = -1;  // MODEL / VAE: index into Build::models
  int clip = -1;   // CLIP: index into Build::clips
  int layer = 0;   // CLIP: CLIPSetLastLayer's value
  Shape shape;     // LATENT [B, C, h, w]; IMAGE [B, H, W, C]
  std::vector<int64_t> cond_tokens;  // CONDITIONING: tokens of each entry
};

struct PlanModel {
  std::string key;  // the file path
  bool has_unet = false, has_vae = false;
  UNetConfig unet;
  VAEConfig vae;
};

struct PlanCLIP {
  std::string key;
  ModelFamily family = ModelFamily::SD1;
  std::vector<std::pair<TextEncoderKind, CLIPTextConfig>> encoders;
  std::shared_ptr<const Tokenizer> tokenizer;
};

// One kind of graph run of a node.
struct GraphRun {
  std::string weights_key;     // whose weights ("<file>#unet")
  uint64_t weight_bytes = 0;   // this graph's weights (rounded as the allocator does)
  // Its weights ("name@layout", bytes) in the order a run asks for them (node order).
  std::vector<std::pair<std::string, uint64_t>> tensors;
  std::vector<WeightUse> uses;  // the same weights with their node ranges (residency planning)
  uint64_t arena = 0, workspace = 0;
  int count = 1;
};

struct VAECall {
  VAEConfig cfg;
  Shape shape;
  bool decode = true;
  GraphRun weights;  // weights of the untiled graph (tiles read the same)
};

struct PlanStep {
  std::string node_id, class_type;
  std::vector<GraphRun> runs;
  std::optional<VAECall> vae;
  std::string decision;
  // Note [cond/uncond split]: the runs when the batched call cannot fit but these can.
  std::vector<GraphRun> split_runs;
  std::string split_decision;
};

class Builder {
 public:
  Builder(const Prompt& p, const WorkflowPlanOptions& o, Executor& ex)
      : prompt_(p), opts_(o), ex_(ex),
        paths_(o.model_paths ? o.model_paths : model_paths_of(NodeEnv{.models_dir = o.models_dir})) {}

  Result<std::vector<PlanStep>> build() {
    std::vector<PlanStep> steps;
    for (const std::string& id : PromptExecutor::execution_order(prompt_)) {
      const PromptNode& n = prompt_.nodes.at(id);
      PlanStep s{id, n.class_type, {}, std::nullopt, "whole"};
      Status st = node(n, s);
      if (!st.ok()) return st.with_context(fmt::format("node {} ({})", id, n.class_type));
      steps.push_back(std::move(s));
    }
    return steps;
  }

  // g as the executor runs it: its arena, workspace and weights.
  Result<GraphRun> graph_run(const std::string& key, const Graph& g, int count) {
    HR_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGraph> c, ex_.compile(g));
    GraphRun r;
    r.weights_key = key;
    r.count = count;
    r.arena = c->plan->arena_bytes;
    r.workspace = c->plan->workspace_peak;
    r.uses = c->weights;  // the order the executor binds them in
    for (const WeightUse& u : c->weights) {
      const Value& v = c->graph.values()[size_t(u.value)];
      r.tensors.emplace_back(fmt::format("{}@{}", v.name, int(v.layout)), u.bytes);
      r.weight_bytes += u.bytes;
    }
    return r;
  }

 private:
  const PlanValue& input(const PromptNode& n, const std::string& name) {
    static const PlanValue kNone;
    const Json& v = n.inputs.at(name);
    auto it = values_.find({v[0].get<std::string>(), v[1].get<int>()});
    return it == values_.end() ? kNone : it->second;
  }
  void output(const PromptNode& n, int slot, PlanValue v) { values_[{n.id, slot}] = std::move(v); }

  Result<int> load(const std::string& folder, const std::string& name, bool unet, bool vae,
                   bool clip) {
    HR_ASSIGN_OR_RETURN(std::string path, paths_->file_path(folder, name));
    HR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
    HR_ASSIGN_OR_RETURN(CheckpointInfo info, checkpoint_inspect(*file));
    PlanModel m;
    m.key = path;
    if (unet && info.has_unet) {
      HR_ASSIGN_OR_RETURN(m.unet, unet_config_detect(*file, info.unet_prefix));
      // As model_load: the heads from the settings (Note [model settings order]).
      if (info.settings.unet_num_heads.value) {
        m.unet.num_heads = *info.settings.unet_num_heads.value;
        m.unet.num_head_channels = -1;
      } else if (info.settings.unet_num_head_channels.value) {
        m.unet.num_heads = -1;
        m.unet.num_head_channels = *info.settings.unet_num_head_channels.value;
      }
      m.has_unet = true;
    }
    if (vae && info.has_vae) {
      HR_ASSIGN_OR_RETURN(m.vae, vae_config_detect(*file, info.vae_prefix));
      m.has_vae = true;
    }
    if (clip && !info.text_encoders.empty()) {
      PlanCLIP c;
      c.key = path;
      c.family = info.family == ModelFamily::UNKNOWN ? ModelFamily::SD1 : info.family;
      for (size_t i = 0; i < info.text_encoders.size(); ++i) {
        HR_ASSIGN_OR_RETURN(CLIPTextConfig cfg,
                            clip_text_detect(*file, info.text_encoders[i].prefix,
                                             opts_.compute_dtype,
                                             info.settings.text_encoder_heads_at(i)));
        c.encoders.emplace_back(info.text_encoders[i].kind, cfg);
      }
      HR_ASSIGN_OR_RETURN(c.tokenizer, tokenizer_for_checkpoint(file->metadata(), opts_.models_dir));
      clips_.push_back(std::move(c));
    }
    models_.push_back(std::move(m));
    return int(models_.size()) - 1;
  }

  Status encode(const PromptNode& n, PlanStep& s, const PlanValue& clip, const std::string& text) {
    if (clip.clip < 0)
      return make_error(ErrorCode::INVALID_ARGUMENT, "clip input is invalid: no text encoder");
    const PlanCLIP& c = clips_[size_t(clip.clip)];
    const size_t count = c.family == ModelFamily::SDXL && c.encoders.size() == 2 ? 2 : 1;
    int64_t tokens = 0;
    for (size_t i = 0; i < count; ++i) {
      const auto& [kind, cfg] = c.encoders[i];
      const EncoderSettings es = encoder_settings(c.family, kind, clip.layer, cfg.layers);
      ChunkOptions co;
      co.pad = es.pad_with_end ? c.tokenizer->eos() : 0;
      TokenChunks chunks = prompt_tokenize(*c.tokenizer, text, co);
      const int64_t rows = int64_t(chunks.size()) + (!chunks.unweighted() || chunks.size() == 0);
      CLIPTextGraphOptions go;
      go.batch = rows;
      go.layer = es.layer;
      go.layer_final_norm = es.final_norm;
      go.last_hidden_state = true;
      HR_ASSIGN_OR_RETURN(CLIPTextGraph g, clip_text_graph(cfg, go));
      HR_ASSIGN_OR_RETURN(GraphRun r, graph_run(fmt::format("{}#clip{}", c.key, i), g.graph, 1));
      s.runs.push_back(r);
      tokens = std::max<int64_t>(tokens, std::max<int64_t>(1, int64_t(chunks.size())) * cfg.positions);
      s.decision = fmt::format("{} row(s) of {} tokens", rows, cfg.positions);
    }
    PlanValue out;
    out.cond_tokens = {tokens};
    output(n, 0, out);
    return Status();
  }

  Status sample(const PromptNode& n, PlanStep& s, bool advanced) {
    const PlanValue& model = input(n, "model");
    const PlanValue& pos = input(n, "positive");
    const PlanValue& neg = input(n, "negative");
    const PlanValue& lat = input(n, "latent_image");
    if (model.model < 0 || !models_[size_t(model.model)].has_unet || pos.cond_tokens.empty() ||
        neg.cond_tokens.empty() || lat.shape.rank != 4)
      return make_error(ErrorCode::INVALID_ARGUMENT, "sampler inputs missing");
    const PlanModel& m = models_[size_t(model.model)];
    const Json& in = n.inputs;
    const double cfg = in.at("cfg").get<double>();
    ModelSamplingDiscrete ms;
    HR_ASSIGN_OR_RETURN(
        std::vector<float> sigmas,
        advanced ? ksampler_sigmas(ms, in.at("scheduler").get<std::string>(),
                                   in.at("sampler_name").get<std::string>(),
                                   in.at("steps").get<int>(), 1.0,
                                   in.at("start_at_step").get<int>(),
                                   in.at("end_at_step").get<int>(),
                                   in.at("return_with_leftover_noise").get<std::string>() != "enable")
                 : ksampler_sigmas(ms, in.at("scheduler").get<std::string>(),
                                   in.at("sampler_name").get<std::string>(),
                                   in.at("steps").get<int>(), in.at("denoise").get<double>()));
    const int steps = std::max<int>(0, int(sigmas.size()) - 1);
    const int64_t B = lat.shape[0], h = lat.shape[2], w = lat.shape[3];
    const std::string key = m.key + "#unet";
    auto call = [&](int64_t batch, int64_t tokens) -> Status {
      HR_ASSIGN_OR_RETURN(Graph g, unet_graph(m.unet, batch, h, w, tokens, opts_.compute_dtype));
      HR_ASSIGN_OR_RETURN(GraphRun r, graph_run(key, g, steps));
      s.runs.push_back(r);
      return Status();
    };
    // As ksampler_run: Note [batched cfg] in nodes_sampling.cpp.
    const bool skip = cfg_skips_uncond(float(cfg));
    if (pos.cond_tokens.size() == 1 && neg.cond_tokens.size() == 1) {
      const int64_t t = skip ? pos.cond_tokens[0] : std::lcm(pos.cond_tokens[0], neg.cond_tokens[0]);
      HR_TRY(call(skip ? B : 2 * B, t));
      s.decision = fmt::format("UNet batch {}{} x {} steps", skip ? B : 2 * B,
                               skip ? "" : " (cond+uncond)", steps);
      if (!skip) {  // Note [cond/uncond split] in nodes_sampling.cpp: the alternative
        std::swap(s.runs, s.split_runs);
        HR_TRY(call(B, pos.cond_tokens[0]));
        HR_TRY(call(B, neg.cond_tokens[0]));
        std::swap(s.runs, s.split_runs);
        s.split_decision = fmt::format("UNet batch {} cond and uncond one after the other x {} "
                                       "steps", B, steps);
      }
    } else {
      for (int64_t t : pos.cond_tokens) HR_TRY(call(B, t));
      if (!skip)
        for (int64_t t : neg.cond_tokens) HR_TRY(call(B, t));
      s.decision = fmt::format("UNet batch {} per entry x {} steps", B, steps);
    }
    PlanValue out;
    out.shape = lat.shape;
    output(n, 0, out);
    return Status();
  }

  Status vae(const PromptNode& n, PlanStep& s, bool decode) {
    const PlanValue& v = input(n, "vae");
    const PlanValue& x = input(n, decode ? "samples" : "pixels");
    if (v.model < 0 || !models_[size_t(v.model)].has_vae || x.shape.rank != 4)
      return make_error(ErrorCode::INVALID_ARGUMENT, "VAE inputs missing");
    const PlanModel& m = models_[size_t(v.model)];
    VAECall c;
    c.cfg = m.vae;
    c.decode = decode;
    const int64_t down = m.vae.downscale();
    PlanValue out;
    if (decode) {
      c.shape = x.shape;
      out.shape = Shape{x.shape[0], x.shape[2] * down, x.shape[3] * down, 3};
    } else {
      // VAEEncode crops to multiples of 8.
      c.shape = Shape{x.shape[0], 3, x.shape[1] / 8 * 8, x.shape[2] / 8 * 8};
      out.shape = Shape{x.shape[0], m.vae.embed_dim, c.shape[2] / down, c.shape[3] / down};
    }
    HR_ASSIGN_OR_RETURN(Graph g, decode ? vae_decode_graph(c.cfg, c.shape[0], c.shape[2], c.shape[3],
                                                           opts_.compute_dtype)
                                        : vae_encode_graph(c.cfg, c.shape[0], c.shape[2], c.shape[3],
                                                           opts_.compute_dtype));
    HR_ASSIGN_OR_RETURN(c.weights, graph_run(m.key + "#vae", g, 1));
    s.vae = c;
    output(n, 0, out);
    return Status();
  }

  Status node(const PromptNode& n, PlanStep& s) {
    const std::string& k = n.class_type;
    const Json& in = n.inputs;
    auto str = [&](const char* name) { return in.at(name).get<std::string>(); };
    auto num = [&](const char* name) { return in.at(name).get<int64_t>(); };
    s.decision = "";
    if (k == "CheckpointLoaderSimple") {
      HR_ASSIGN_OR_RETURN(int m, load("checkpoints", str("ckpt_name"), true, true, true));
      output(n, 0, PlanValue{.model = m});
      output(n, 1, PlanValue{.clip = int(clips_.size()) - 1});
      output(n, 2, PlanValue{.model = m});
    } else if (k == "UNETLoader") {
      HR_ASSIGN_OR_RETURN(int m, load("diffusion_models", str("unet_name"), true, false, false));
      output(n, 0, PlanValue{.model = m});
    } else if (k == "VAELoader") {
      HR_ASSIGN_OR_RETURN(int m, load("vae", str("vae_name"), false, true, false));
      output(n, 0, PlanValue{.model = m});
    } else if (k == "CLIPLoader") {
      const size_t before = clips_.size();
      HR_TRY(load("text_encoders", str("clip_name"), false, false, true).status());
      output(n, 0, PlanValue{.clip = clips_.size() > before ? int(clips_.size()) - 1 : -1});
    } else if (k == "CLIPSetLastLayer") {
      PlanValue v = input(n, "clip");
      v.layer = int(num("stop_at_clip_layer"));
      output(n, 0, v);
    } else if (k == "CLIPTextEncode") {
      return encode(n, s, input(n, "clip"), str("text"));
    } else if (k == "ConditioningCombine") {
      PlanValue v = input(n, "conditioning_1");
      const PlanValue& b = input(n, "conditioning_2");
      v.cond_tokens.insert(v.cond_tokens.end(), b.cond_tokens.begin(), b.cond_tokens.end());
      output(n, 0, v);
    } else if (k == "EmptyLatentImage") {
      output(n, 0, PlanValue{.shape = Shape{num("batch_size"), 4, num("height") / 8, num("width") / 8}});
    } else if (k == "KSampler" || k == "KSamplerAdvanced") {
      return sample(n, s, k == "KSamplerAdvanced");
    } else if (k == "VAEDecode" || k == "VAEEncode") {
      return vae(n, s, k == "VAEDecode");
    } else if (k == "LatentUpscale") {
      PlanValue v = input(n, "samples");
      const Shape& sh = v.shape;
      int64_t w = num("width"), h = num("height");
      if (w != 0 || h != 0) {
        if (w == 0) {
          h = std::max<int64_t>(64, h);
          w = std::max<int64_t>(64, int64_t(std::nearbyint(double(sh[3]) * double(h) / double(sh[2]))));
        } else if (h == 0) {
          w = std::max<int64_t>(64, w);
          h = std::max<int64_t>(64, int64_t(std::nearbyint(double(sh[2]) * double(w) / double(sh[3]))));
        } else {
          w = std::max<int64_t>(64, w);
          h = std::max<int64_t>(64, h);
        }
        v.shape = Shape{sh[0], sh[1], h / 8, w / 8};
      }
      output(n, 0, v);
    } else if (k == "LatentUpscaleBy") {
      PlanValue v = input(n, "samples");
      const double f = in.at("scale_by").get<double>();
      v.shape = Shape{v.shape[0], v.shape[1], int64_t(std::nearbyint(double(v.shape[2]) * f)),
                      int64_t(std::nearbyint(double(v.shape[3]) * f))};
      output(n, 0, v);
    } else if (k == "ImageScale") {
      PlanValue v = input(n, "image");
      const Shape& sh = v.shape;
      int64_t w = num("width"), h = num("height");
      if (w != 0 || h != 0) {
        if (w == 0) w = std::max<int64_t>(1, int64_t(std::nearbyint(double(sh[2]) * double(h) / double(sh[1]))));
        if (h == 0) h = std::max<int64_t>(1, int64_t(std::nearbyint(double(sh[1]) * double(w) / double(sh[2]))));
        v.shape = Shape{sh[0], h, w, sh[3]};
      }
      output(n, 0, v);
    } else if (k == "SaveImage" || k == "PreviewImage") {
      s.decision = "no model";
    } else {
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "cannot plan node {} (class {}): its memory is not modelled", n.id, k);
    }
    if (s.decision.empty()) s.decision = "no model";
    return Status();
  }

  const Prompt& prompt_;
  const WorkflowPlanOptions& opts_;
  Executor& ex_;
  std::shared_ptr<const ModelPaths> paths_;
  std::map<std::pair<std::string, int>, PlanValue> values_;
  std::vector<PlanModel> models_;
  std::vector<PlanCLIP> clips_;
};

// Replays the allocations of `steps` under `budget` (Note [workflow plan]).
class Replay {
 public:
  Replay(Executor& ex, bool weights_counted, uint64_t budget, DType dtype)
      : ex_(ex), counted_(weights_counted), budget_(budget), dtype_(dtype) {}

  Result<WorkflowPlan> run(const std::vector<PlanStep>& steps) {
    WorkflowPlan p;
    p.budget = budget_;
    p.weights_counted = counted_;
    for (const PlanStep& s : steps) {
      NodePlan np;
      np.node_id = s.node_id;
      np.class_type = s.class_type;
      const bool split = split_needed(s);
      np.decision = split ? s.split_decision : s.decision;
      node_peak_ = total();
      node_weights_.clear();
      std::string why;
      for (const GraphRun& r : split ? s.split_runs : s.runs)
        if (!graph(r, np, why)) break;
      if (why.empty() && s.vae) HR_TRY(vae(*s.vae, np, why));
      // A node's models (SDXL's two text encoders) add up.
      for (const auto& [k, b] : node_weights_) {
        np.weight_bytes += b;
        np.resident_bytes += holder_bytes(k);
      }
      np.total_after = total();
      np.peak = node_peak_;
      p.peak = std::max(p.peak, node_peak_);
      if (!why.empty()) {
        np.fits = false;
        if (p.fits) p.why_not = fmt::format("node {} ({}): {}", s.node_id, s.class_type, why);
        p.fits = false;
      }
      p.nodes.push_back(std::move(np));
    }
    return p;
  }

 private:
  struct Resident {
    uint64_t bytes = 0, last_use = 0;
  };
  struct Holder {  // one WeightSet's device copies
    uint64_t last_use = 0;
    std::map<std::string, Resident> tensors;
  };

  // Note [cond/uncond split]: every other holder is idle, so the room is the budget.
  bool split_needed(const PlanStep& s) const {
    if (s.split_runs.empty() || budget_ == UINT64_MAX) return false;
    auto need = [](const std::vector<GraphRun>& runs) {
      uint64_t most = 0;
      for (const GraphRun& r : runs) most = std::max(most, r.arena + residency_min_room(r.uses));
      return most;
    };
    return need(s.runs) > budget_ && need(s.split_runs) <= budget_;
  }

  uint64_t holder_bytes(const std::string& key) const {
    auto it = holders_.find(key);
    uint64_t n = 0;
    if (it != holders_.end())
      for (const auto& [k, t] : it->second.tensors) n += t.bytes;
    return n;
  }
  uint64_t total() const {
    uint64_t t = arena_ + ring_;
    for (const auto& [k, h] : holders_)
      for (const auto& [n, r] : h.tensors) t += r.bytes;
    return t;
  }
  void mark() { node_peak_ = std::max(node_peak_, total()); }

  // Allocator::allocate's retry: idle holders other than `keep`, least recently used first, free
  // their least recently used tensors until the shortfall is covered (WeightSet::reclaim).
  bool make_room(uint64_t bytes, const std::string& keep) {
    if (budget_ == UINT64_MAX) return true;
    const uint64_t held = total();
    if (held + bytes <= budget_) return true;
    const uint64_t missing = held < budget_ ? held + bytes - budget_ : bytes;
    std::vector<std::pair<uint64_t, std::string>> order;
    for (const auto& [k, h] : holders_)
      if (k != keep) order.emplace_back(h.last_use, k);
    std::sort(order.begin(), order.end());
    uint64_t freed = 0;
    for (const auto& [t, k] : order) {
      if (freed >= missing) break;
      std::vector<std::pair<uint64_t, std::string>> lru;
      for (const auto& [n, r] : holders_[k].tensors) lru.emplace_back(r.last_use, n);
      std::sort(lru.begin(), lru.end());
      for (const auto& [u, n] : lru) {
        if (freed >= missing) break;
        freed += holders_[k].tensors[n].bytes;
        holders_[k].tensors.erase(n);
      }
    }
    return total() + bytes <= budget_;
  }

  // WeightSet::weight_get for each resident weight of r, in the order the run asks.
  bool upload(const GraphRun& r, const ResidencyPlan& res, std::string& why) {
    if (!counted_) return true;
    holders_[r.weights_key].last_use = ++tick_;
    for (size_t k = 0; k < r.tensors.size(); ++k) {
      if (res.streamed(k)) continue;
      const auto& [name, bytes] = r.tensors[k];
      Holder& h = holders_[r.weights_key];
      auto it = h.tensors.find(name);
      if (it == h.tensors.end()) {
        if (!make_room(bytes, r.weights_key)) {
          why = fmt::format("weights of {} ({}) do not fit beside {} held", r.weights_key,
                            bytes_format(r.weight_bytes), bytes_format(total()));
          return false;
        }
        it = holders_[r.weights_key].tensors.emplace(name, Resident{bytes, 0}).first;
        mark();
      }
      it->second.last_use = ++tick_;
    }
    holders_[r.weights_key].last_use = ++tick_;
    return true;
  }

  // Executor::residency_decide: every other holder is idle while a graph runs, so the room for
  // its weights is the budget less its arena (Note [streamed execution]).
  bool residency(const GraphRun& r, ResidencyPlan& res, std::string& why) {
    if (budget_ == UINT64_MAX || r.weight_bytes + r.arena <= budget_) return true;
    Result<ResidencyPlan> p = residency_plan(r.uses, budget_ > r.arena ? budget_ - r.arena : 0,
                                            ex_.residency_options());
    if (!p.ok()) {
      why = fmt::format("activation arena {} and {} of weights: {}", bytes_format(r.arena),
                        bytes_format(r.weight_bytes), p.status().message());
      return false;
    }
    res = std::move(p).value();
    return true;
  }

  bool graph(const GraphRun& r, NodePlan& np, std::string& why) {
    node_weights_[r.weights_key] = std::max(node_weights_[r.weights_key], r.weight_bytes);
    np.arena_bytes = std::max(np.arena_bytes, r.arena);
    np.workspace_bytes = std::max(np.workspace_bytes, r.workspace);
    np.graph_runs += r.count;
    ResidencyPlan res;
    if (counted_ && !residency(r, res, why)) return false;
    if (res.streams()) {  // Executor::buffers_prepare: streamed weights lose their copies
      for (size_t k = 0; k < r.tensors.size(); ++k)
        if (res.streamed(k)) holders_[r.weights_key].tensors.erase(r.tensors[k].first);
      np.streamed_bytes = std::max(np.streamed_bytes, res.streamed_bytes);
      np.ring_bytes = std::max(np.ring_bytes, res.ring_bytes);
      np.residency = residency_describe(res, r.uses);
    }
    if (ring_ != res.ring_bytes) ring_ = 0;  // Executor::buffers_prepare: the plan's ring
    if (r.arena > arena_) {
      arena_ = 0;  // freed before the larger one is allocated
      if (!make_room(r.arena, r.weights_key)) {
        why = fmt::format("activation arena {} does not fit: budget {}, {} held by weights in use",
                          bytes_format(r.arena), bytes_format(budget_), bytes_format(total()));
        return false;
      }
      arena_ = r.arena;
      mark();
    }
    if (res.streams() && ring_ == 0) {
      if (!make_room(res.ring_bytes, r.weights_key)) {
        why = fmt::format("staging ring {} does not fit beside {} held",
                          bytes_format(res.ring_bytes), bytes_format(total()));
        return false;
      }
      ring_ = res.ring_bytes;
      mark();
    }
    return upload(r, res, why);
  }

  // vae_decode_auto / vae_encode_auto: weights first, then the decision against arena_room().
  Status vae(const VAECall& c, NodePlan& np, std::string& why) {
    // vae_weights_upload skips weights that cannot all be resident (every other holder is idle,
    // so the room is the budget).
    if ((budget_ == UINT64_MAX || c.weights.weight_bytes <= budget_) &&
        !upload(c.weights, ResidencyPlan(), why))
      return Status();
    const uint64_t own = holder_bytes(c.weights.weights_key);
    const uint64_t room =
        budget_ == UINT64_MAX ? UINT64_MAX : (budget_ > own ? budget_ - own : 0);
    Result<VAEDecision> d = vae_decide_for(ex_, c.cfg, dtype_, c.shape, c.decode, room, budget_);
    if (!d.ok()) {
      if (d.status().code() != ErrorCode::OUT_OF_MEMORY) return d.status();
      why = d.status().message();
      return Status();
    }
    np.decision = d->reason;
    GraphRun r = c.weights;
    r.arena = d->run_arena_bytes;
    r.count = d->tiled() ? int(d->rows * d->cols)
                         : d->mode == VAEMode::PER_IMAGE ? int(c.shape[0]) : 1;
    graph(r, np, why);
    return Status();
  }

  Executor& ex_;
  bool counted_;
  uint64_t budget_;
  DType dtype_;
  uint64_t arena_ = 0;
  uint64_t ring_ = 0;  // the executor's staging ring
  uint64_t node_peak_ = 0;
  uint64_t tick_ = 0;
  std::map<std::string, Holder> holders_;
  std::map<std::string, uint64_t> node_weights_;  // the current node's graph weights per model
};

}  // namespace

Result<WorkflowPlan> workflow_plan(const Prompt& prompt, const WorkflowPlanOptions& options) {
  if (!options.backend) return make_error(ErrorCode::INVALID_ARGUMENT, "workflow_plan: no backend");
  Backend& backend = *options.backend;
  Allocator allocator(backend);  // plans only: nothing is allocated through it
  Executor ex(backend, allocator);
  Builder builder(prompt, options, ex);
  HR_ASSIGN_OR_RETURN(std::vector<PlanStep> steps, builder.build());
  const bool counted = true;  // on the CPU too (Note [adopted bytes] in allocator.cpp)
  auto replay = [&](uint64_t budget) {
    Replay r(ex, counted, budget, options.compute_dtype);
    return r.run(steps);
  };
  HR_ASSIGN_OR_RETURN(WorkflowPlan plan, replay(options.budget));
  plan.device = backend.info().name;
  plan.compute_dtype = options.compute_dtype;
  // The smallest budget that fits: no budget needs more than the unlimited run's peak, and
  // fitting is monotone in the budget (more room never makes a step fail), so bisect.
  HR_ASSIGN_OR_RETURN(WorkflowPlan free_run, replay(UINT64_MAX));
  if (!free_run.fits) {
    plan.smallest_budget = 0;
    return plan;
  }
  uint64_t lo = 0, hi = free_run.peak;  // fits at hi; lo does not (or is 0)
  while (hi - lo > Allocator::kAlignment) {
    const uint64_t mid = lo + (hi - lo) / 2 / Allocator::kAlignment * Allocator::kAlignment;
    if (mid == lo) break;
    HR_ASSIGN_OR_RETURN(WorkflowPlan p, replay(mid));
    (p.fits ? hi : lo) = mid;
  }
  plan.smallest_budget = hi;
  return plan;
}

Json workflow_plan_json(const WorkflowPlan& p) {
  Json j;
  j["device"] = p.device;
  j["dtype"] = dtype_name(p.compute_dtype);
  j["budget"] = p.budget == UINT64_MAX ? Json(nullptr) : Json(p.budget);
  j["fits"] = p.fits;
  j["peak"] = p.peak;
  j["smallest_budget"] = p.smallest_budget;
  j["weights_counted"] = p.weights_counted;
  if (!p.fits) j["why_not"] = p.why_not;
  j["nodes"] = Json::array();
  for (const NodePlan& n : p.nodes)
    j["nodes"].push_back({{"node_id", n.node_id},
                          {"class_type", n.class_type},
                          {"weight_bytes", n.weight_bytes},
                          {"resident_bytes", n.resident_bytes},
                          {"streamed_bytes", n.streamed_bytes},
                          {"ring_bytes", n.ring_bytes},
                          {"residency", n.residency},
                          {"arena_bytes", n.arena_bytes},
                          {"workspace_bytes", n.workspace_bytes},
                          {"graph_runs", n.graph_runs},
                          {"decision", n.decision},
                          {"total_after", n.total_after},
                          {"peak", n.peak},
                          {"fits", n.fits}});
  return j;
}

std::string workflow_plan_format(const WorkflowPlan& p) {
  std::string s = fmt::format(
      "plan on {} in {}, budget {} (allocator level; weights {})\n\n",
      p.device, dtype_name(p.compute_dtype),
      p.budget == UINT64_MAX ? std::string("none") : bytes_format(p.budget),
      p.weights_counted ? "held for the device count" : "are host memory, not counted");
  s += "| node | class | weights | resident | streamed | arena | workspace | runs | held after | "
       "peak | decision |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const NodePlan& n : p.nodes)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} |\n", n.node_id,
                     n.class_type, bytes_format(n.weight_bytes), bytes_format(n.resident_bytes),
                     bytes_format(n.streamed_bytes), bytes_format(n.arena_bytes),
                     bytes_format(n.workspace_bytes), n.graph_runs, bytes_format(n.total_after),
                     bytes_format(n.peak), n.fits ? "" : "DOES NOT FIT: ",
                     n.residency.empty() ? n.decision : n.decision + "; " + n.residency);
  s += fmt::format("\npredicted peak {} ({} bytes); {}; smallest budget that fits: {} ({} bytes)\n",
                   bytes_format(p.peak), p.peak, p.fits ? "fits" : "does not fit: " + p.why_not,
                   bytes_format(p.smallest_budget), p.smallest_budget);
  return s;
}

}  // namespace hr
