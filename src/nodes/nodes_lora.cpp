// LoRA nodes: LoraLoader and LoraLoaderModelOnly (ComfyUI's inputs and outputs). A LoRA becomes
// a patch set on a view of the model's weight stores (Note [patched weights] in
// memory/patched_weights.h); the stores, and every other holder of the model, are unchanged.
#include <algorithm>
#include <filesystem>
#include <list>
#include <mutex>
#include <optional>

#include "nodes/loader_files.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "models/lora_file.h"
#include "workflow/execute.h"

namespace hr {
namespace {

constexpr const char* kLoraFolder = "loras";
constexpr size_t kNotLoadedShown = 5;
constexpr const char* kDiffusionPrefix = "diffusion_model.";  // ComfyUI's, every family

// `prev`'s patches (cloned: a patch set is immutable) followed by `add`'s, for the LoRA chain.
std::shared_ptr<const PatchSet> patch_set_stack(const PatchedWeights* prev,
                                                std::map<std::string, std::vector<WeightPatch>> add,
                                                const std::string& id,
                                                const std::string& comfy_prefix) {
  auto set = std::make_shared<PatchSet>();
  set->id = prev ? prev->patches().id + "|" + id : id;
  set->comfy_prefix = comfy_prefix;
  if (prev)
    for (const auto& [w, ps] : prev->patches().by_weight)
      for (const WeightPatch& p : ps) set->by_weight[w].push_back(p.clone());
  for (auto& [w, ps] : add)
    for (WeightPatch& p : ps) set->by_weight[w].push_back(std::move(p));
  return set;
}

// Every patched weight exists in `store` and its patches fit its shape.
Status patches_fit(const WeightSet& store, const std::map<std::string, std::vector<WeightPatch>>& by,
                   const std::string& what) {
  for (const auto& [w, ps] : by) {
    const HostTensor* t = store.find(w);
    if (!t)
      return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}' targets '{}', which the {} "
                        "does not have", ps.front().source, w, what);
    HR_TRY(patches_check(w, t->shape(), ps));
  }
  return Status();
}

// Note [LoRA view cache]
// A patched view holds its patched device copies, so a job that applies a LoRA set with the
// same strengths to the same model as a recent job reuses the view and patches nothing. The
// views of the last kViews (base store, LoRA chain) pairs are kept in the executor's shared
// resources (cleared with the loaded models); a view whose model nobody else holds any more
// (its base's owners are cached views only) goes at the next lookup, so a switched checkpoint
// does not stay in memory through its LoRA views.
class LoraViewCache {
 public:
  static constexpr size_t kViews = 8;

  // The view cached under `key` (null: the LoRA has no patches for that store), or nullopt.
  std::optional<std::shared_ptr<PatchedWeights>> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    prune();
    for (auto it = views_.begin(); it != views_.end(); ++it)
      if (it->first == key) {
        views_.splice(views_.begin(), views_, it);  // most recent first
        return it->second;
      }
    return std::nullopt;
  }
  void put(const std::string& key, std::shared_ptr<PatchedWeights> view) {
    std::lock_guard<std::mutex> lock(mu_);
    views_.emplace_front(key, std::move(view));
    while (views_.size() > kViews) views_.pop_back();
  }

 private:
  void prune() {
    std::map<const WeightSet*, long> cached;
    for (const auto& [k, v] : views_)
      if (v) ++cached[v->base_ptr().get()];
    std::erase_if(views_, [&](const auto& e) {
      return e.second && e.second->base_ptr().use_count() <= cached[e.second->base_ptr().get()];
    });
  }
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<PatchedWeights>>> views_;
};

LoraViewCache* view_cache(ExecContext& ctx) {
  if (!ctx.opts.resources) return nullptr;
  std::shared_ptr<void>& slot = (*ctx.opts.resources)["LoraLoader.views"];
  if (!slot) slot = std::make_shared<LoraViewCache>();
  return static_cast<LoraViewCache*>(slot.get());
}

// The cache key of the view of `base` with the chain `prev` then `id`.
std::string view_key(const WeightSet* base, const PatchedWeights* prev, const std::string& id) {
  return fmt::format("{}|{}|{}", static_cast<const void*>(base), prev ? prev->patches().id : "",
                     id);
}

// A view of `base` with `add` after the patches `prev` has (null prev: none).
Result<std::shared_ptr<PatchedWeights>> view_make(
    std::shared_ptr<WeightSet> base, const PatchedWeights* prev,
    std::map<std::string, std::vector<WeightPatch>> add, const std::string& id,
    const std::string& path, const std::string& what, const std::string& comfy_prefix) {
  HR_TRY(patches_fit(*base, add, what).with_context(path));
  return std::make_shared<PatchedWeights>(
      std::move(base), patch_set_stack(prev, std::move(add), id, comfy_prefix));
}

// What a file whose keys matched nothing seems to be for, from its key names.
std::string lora_family_guess(const SafetensorsFile& f) {
  auto any = [&](std::string_view prefix) {
    return std::any_of(f.entries().begin(), f.entries().end(),
                       [&](const SafetensorsEntry& e) { return e.name.starts_with(prefix); });
  };
  if (any("lora_unet_double_blocks") || any("lora_unet_single_blocks")) return "Flux";
  if (any("diffusion_model.layers.") || any("lora_unet_layers_")) return "Z-Image/Lumina";
  if (any("transformer.transformer_blocks.") || any("transformer_blocks.")) return "a DiT (Flux, SD3, Qwen-Image)";
  if (any("lora_te2_") || any("text_encoder_2.")) return "SDXL";
  if (any("lora_unet_") || any("unet.") || any("lora_te_")) return "SD1.x/SD2.x or SDXL";
  return "an unknown model";
}

std::string not_loaded_text(const std::string& path, const std::vector<std::string>& keys) {
  std::string shown;
  for (size_t i = 0; i < std::min(keys.size(), kNotLoadedShown); ++i)
    shown += (i ? ", " : "") + keys[i];
  return fmt::format("{}: {} lora key(s) not loaded: {}{}", path, keys.size(), shown,
                     keys.size() > kNotLoadedShown ? ", ..." : "");
}

struct LoraInputs {
  std::shared_ptr<const ModelValue> model;
  std::shared_ptr<const CLIPValue> clip;  // null: LoraLoaderModelOnly
  std::string name;
  LoraStrengths strengths;
};

// Reads the file against the model's (and CLIP's) key map; fails when nothing matches.
Result<LoraPatches> lora_read(ExecContext& ctx, const LoraInputs& in, const std::string& path,
                              const SafetensorsFile& file) {
  const DiffusionModel* diffusion = in.model ? in.model->model->diffusion.get() : nullptr;
  const TextEncoder* text = in.clip ? in.clip->encoder.get() : nullptr;
  const ModelFamily& family = diffusion ? diffusion->family() : text->family();
  if (!family.lora_keys)
    return make_error(ErrorCode::UNSUPPORTED, "{}: the {} family has no LoRA support yet", path,
                      family.display_name);
  HR_ASSIGN_OR_RETURN(LoraKeyMap map, family.lora_keys(diffusion, text));
  Result<LoraPatches> read = lora_patches_read(file, map, in.strengths);
  if (!read.ok()) return read.status().with_context(path);
  LoraPatches p = std::move(read).value();
  if (p.targets == 0 && p.not_loaded.size() == file.entries().size())
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: no key matches a weight of this {} model; "
                      "the file looks like a LoRA for {}", path, family.display_name,
                      lora_family_guess(file));
  if (!p.not_loaded.empty()) ctx.warn(not_loaded_text(path, p.not_loaded));
  return p;
}

// One weight store a LoRA may patch: the diffusion model's (encoder -1) or a text encoder's,
// the view it is seen through now (null: none), and the view the LoRA gives it.
struct Slot {
  int encoder = -1;
  std::string comfy_prefix;  // PatchSet::comfy_prefix of its views
  std::shared_ptr<WeightSet> base;
  const PatchedWeights* prev = nullptr;
  std::shared_ptr<PatchedWeights> view;  // null: the LoRA has no patches for this store
  bool known = false;                    // `view` came from the cache
};

// The stores of the components the strengths leave patched.
std::vector<Slot> slots_of(const LoraInputs& in) {
  std::vector<Slot> slots;
  if (in.model && in.strengths.model != 0) {
    const ModelValue& mv = *in.model;
    slots.push_back({-1, kDiffusionPrefix, mv.patched ? mv.patched->base_ptr()
                                    : std::shared_ptr<WeightSet>(mv.model, &mv.model->diffusion->weights()),
                     mv.patched.get()});
  }
  if (in.clip && in.strengths.clip != 0) {
    const std::vector<std::shared_ptr<WeightSet>> stores = in.clip->encoder->stores();
    for (size_t i = 0; i < stores.size(); ++i) {
      const PatchedWeights* prev = i < in.clip->patched.size() ? in.clip->patched[i].get() : nullptr;
      slots.push_back({int(i), in.clip->encoder->comfy_key_prefix(i),
                       prev ? prev->base_ptr() : stores[i], prev});
    }
  }
  return slots;
}

// The file's identity for the cache: path, size and modification time, and the strengths.
std::string lora_id(const std::string& path, const LoraStrengths& s) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto time = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  return fmt::format("{}:{}:{}@{}/{}", path, size, time, s.model, s.clip);
}

// The views of the slots the cache did not know, from the file (Note [LoRA view cache]).
Status slots_read(ExecContext& ctx, const LoraInputs& in, const std::string& path,
                  const std::string& id, std::vector<Slot>& slots, LoraViewCache* cache) {
  HR_ASSIGN_OR_RETURN(auto file, open_file(ctx, path));
  HR_ASSIGN_OR_RETURN(LoraPatches p, lora_read(ctx, in, path, *file));
  for (Slot& s : slots) {
    if (s.known) continue;
    if (s.encoder >= 0 && p.encoders.size() <= size_t(s.encoder)) p.encoders.resize(size_t(s.encoder) + 1);
    auto& add = s.encoder < 0 ? p.diffusion : p.encoders[size_t(s.encoder)];
    if (!add.empty()) {
      HR_ASSIGN_OR_RETURN(s.view, view_make(s.base, s.prev, std::move(add), id, path,
                                            s.encoder < 0 ? "diffusion model" : "text encoder",
                                            s.comfy_prefix));
    }
    if (cache) cache->put(view_key(s.base.get(), s.prev, id), s.view);
  }
  return Status();
}

Result<std::vector<std::any>> lora_run(ExecContext& ctx, const LoraInputs& in) {
  std::vector<std::any> out{in.model};
  if (in.clip) out.emplace_back(in.clip);
  if (in.strengths.model == 0 && (!in.clip || in.strengths.clip == 0)) return out;  // unchanged
  HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kLoraFolder, in.name));
  const std::string id = lora_id(path, in.strengths);
  std::vector<Slot> slots = slots_of(in);
  LoraViewCache* cache = ctx.opts.plan_run ? nullptr : view_cache(ctx);
  bool all = cache != nullptr;  // Note [LoRA view cache]: every view this LoRA makes may exist
  for (Slot& s : slots) {
    std::optional<std::shared_ptr<PatchedWeights>> hit;
    if (cache) hit = cache->find(view_key(s.base.get(), s.prev, id));
    s.known = hit.has_value();
    if (hit) s.view = *hit;
    all = all && s.known;
  }
  if (!all) HR_TRY(slots_read(ctx, in, path, id, slots, cache));
  CLIPValue clip = in.clip ? *in.clip : CLIPValue();
  bool clip_changed = false;
  for (const Slot& s : slots) {
    if (!s.view) continue;
    if (s.encoder < 0) {
      ModelValue mv = *in.model;  // keeps a ModelSamplingFlux patch, as ComfyUI's clone does
      mv.patched = s.view;
      out[0] = std::make_shared<const ModelValue>(std::move(mv));
      continue;
    }
    clip.patched.resize(std::max(clip.patched.size(), size_t(s.encoder) + 1));
    clip.patched[size_t(s.encoder)] = s.view;
    clip_changed = true;
  }
  if (clip_changed) out[1] = std::make_shared<const CLIPValue>(std::move(clip));
  return out;
}

InputSpec strength(const std::string& name) { return spec_float(name, 1.0, -100.0, 100.0, 0.01); }

}  // namespace

void nodes_register_lora(NodeRegistry& r, const NodeEnv& env) {
  NodeDef both;
  both.class_type = "LoraLoader";
  both.display_name = "Load LoRA";
  both.category = "loaders";
  both.inputs = {spec_link("model", IoType::MODEL), spec_link("clip", IoType::CLIP),
                 file_combo("lora_name", env, kLoraFolder), strength("strength_model"),
                 strength("strength_clip")};
  both.outputs = {{IoType::MODEL, "MODEL"}, {IoType::CLIP, "CLIP"}};
  both.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    LoraInputs li;
    if (auto m = in.get<std::shared_ptr<const ModelValue>>("model")) li.model = *m;
    if (auto c = in.get<std::shared_ptr<const CLIPValue>>("clip")) li.clip = *c;
    if (!li.model || !li.clip)
      return make_error(ErrorCode::INVALID_ARGUMENT, "LoraLoader needs a model and a clip");
    li.name = in.get_string("lora_name");
    li.strengths = {float(in.get_float("strength_model")), float(in.get_float("strength_clip"))};
    return lora_run(ctx, li);
  };
  r.add(both);

  NodeDef model_only;
  model_only.class_type = "LoraLoaderModelOnly";
  model_only.display_name = "LoraLoaderModelOnly";
  model_only.category = "loaders";
  model_only.inputs = {spec_link("model", IoType::MODEL), file_combo("lora_name", env, kLoraFolder),
                       strength("strength_model")};
  model_only.outputs = {{IoType::MODEL, "MODEL"}};
  model_only.run = [](ExecContext& ctx, const NodeInputs& in) -> Result<std::vector<std::any>> {
    LoraInputs li;
    if (auto m = in.get<std::shared_ptr<const ModelValue>>("model")) li.model = *m;
    if (!li.model) return make_error(ErrorCode::INVALID_ARGUMENT, "LoraLoaderModelOnly needs a model");
    li.name = in.get_string("lora_name");
    li.strengths = {float(in.get_float("strength_model")), 0.0f};
    return lora_run(ctx, li);
  };
  r.add(model_only);
}

}  // namespace hr
