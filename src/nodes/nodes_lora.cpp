// LoRA nodes: LoraLoader and LoraLoaderModelOnly (ComfyUI's inputs and outputs). A LoRA becomes
// a patch set on a view of the model's weight stores (Note [patched weights] in
// memory/patched_weights.h); the stores, and every other holder of the model, are unchanged.
#include <algorithm>

#include "nodes/loader_files.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "models/lora_file.h"
#include "workflow/execute.h"

namespace hr {
namespace {

constexpr const char* kLoraFolder = "loras";
constexpr size_t kNotLoadedShown = 5;

// `prev`'s patches (cloned: a patch set is immutable) followed by `add`'s, for the LoRA chain.
std::shared_ptr<const PatchSet> patch_set_stack(const PatchedWeights* prev,
                                                std::map<std::string, std::vector<WeightPatch>> add,
                                                const std::string& id) {
  auto set = std::make_shared<PatchSet>();
  set->id = prev ? prev->patches().id + "|" + id : id;
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

// A view of `base` with `add` after the patches `prev` has (null prev: none).
Result<std::shared_ptr<PatchedWeights>> view_make(
    std::shared_ptr<WeightSet> base, const PatchedWeights* prev,
    std::map<std::string, std::vector<WeightPatch>> add, const std::string& id,
    const std::string& what) {
  HR_TRY(patches_fit(*base, add, what));
  return std::make_shared<PatchedWeights>(std::move(base),
                                          patch_set_stack(prev, std::move(add), id));
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

// `in`'s model and CLIP with `p`'s patches after those they have (`out`: the inputs as outputs).
Result<std::vector<std::any>> lora_apply(const LoraInputs& in, const std::string& path,
                                         LoraPatches p, std::vector<std::any> out) {
  const std::string id = fmt::format("{}@{}/{}", path, in.strengths.model, in.strengths.clip);
  if (in.model && !p.diffusion.empty()) {
    const ModelValue& mv = *in.model;
    std::shared_ptr<WeightSet> base =
        mv.patched ? mv.patched->base_ptr()
                   : std::shared_ptr<WeightSet>(mv.model, &mv.model->diffusion->weights());
    ModelValue next{mv.model, nullptr};
    HR_ASSIGN_OR_RETURN(next.patched, view_make(base, mv.patched.get(), std::move(p.diffusion), id,
                                                "diffusion model"));
    out[0] = std::make_shared<const ModelValue>(std::move(next));
  }
  if (in.clip && !p.encoders.empty()) {
    CLIPValue next = *in.clip;
    const auto stores = next.encoder->stores();
    next.patched.resize(stores.size());
    for (size_t i = 0; i < p.encoders.size() && i < stores.size(); ++i) {
      if (p.encoders[i].empty()) continue;
      const PatchedWeights* prev = next.patched[i].get();
      std::shared_ptr<WeightSet> base = prev ? prev->base_ptr() : stores[i];
      HR_ASSIGN_OR_RETURN(next.patched[i], view_make(base, prev, std::move(p.encoders[i]), id,
                                                     "text encoder"));
    }
    out[1] = std::make_shared<const CLIPValue>(std::move(next));
  }
  return out;
}

// Note [LoRA files in a plan run]: a plan run's loaders hand out placeholder tensors (Note
// [placeholder tensors] in core/tensor.h), but lora_patches_read computes with the factors it
// reads (alpha's value, the scale folded into the first factor, LoCon's mid and LoHa's CP
// products): scaling a placeholder in place writes to its read-only zero pages, and the plan run
// crashed there (lora_file.cpp's times()). A LoRA file is small beside the checkpoint it patches
// (its factors are the LoRA's own bytes), so it is read in full in a plan run too; the checkpoint
// stays headers only. Once lora_patches_read takes placeholders, open_file can serve here.
// LoraNodesTest.PlanRunOfTheLoraWorkflow and plan_coverage_test's LoRA case run it.
Result<std::shared_ptr<const SafetensorsFile>> lora_open(const std::string& path) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f,
                      SafetensorsFile::open(path, TensorData::READ));
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

Result<std::vector<std::any>> lora_run(ExecContext& ctx, const LoraInputs& in) {
  std::vector<std::any> out{in.model};
  if (in.clip) out.emplace_back(in.clip);
  if (in.strengths.model == 0 && (!in.clip || in.strengths.clip == 0)) return out;  // unchanged
  HR_ASSIGN_OR_RETURN(std::string path, model_file(ctx, kLoraFolder, in.name));
  HR_ASSIGN_OR_RETURN(auto file, lora_open(path));
  HR_ASSIGN_OR_RETURN(LoraPatches p, lora_read(ctx, in, path, *file));
  Result<std::vector<std::any>> done = lora_apply(in, path, std::move(p), std::move(out));
  if (!done.ok()) return done.status().with_context(path);  // a factor that does not fit
  return done;
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
