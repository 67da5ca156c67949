// The model-family registry: the built-in families, run-time registration and detection.
#include "models/family.h"

#include <algorithm>
#include <deque>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/flux/flux_family.h"
#include "models/sd/sd_family.h"
#include "models/zimage/zimage_family.h"

namespace hr {
namespace {

// The built-in families in detection order (Note [model families]): one line per family folder.
const std::vector<const ModelFamily*>& model_families_builtin() {
  static const std::vector<const ModelFamily*> families = [] {
    std::vector<const ModelFamily*> v;
    for (const ModelFamily* f : sd_families()) v.push_back(f);
    for (const ModelFamily* f : flux_families()) v.push_back(f);
    for (const ModelFamily* f : zimage_families()) v.push_back(f);
    return v;
  }();
  return families;
}

struct Registered {
  std::mutex mu;
  std::deque<ModelFamily> families;  // a deque keeps the pointers handed out stable
  std::vector<const ModelFamily*> removed;  // kept alive: infos may still point at them
};
Registered& registered() {
  static Registered r;
  return r;
}

Status unsupported(const SafetensorsFile& f, const std::vector<const ModelFamily*>& families) {
  std::vector<std::string> names, expected;
  std::string hint;
  for (const ModelFamily* fam : families) {
    if (std::find(names.begin(), names.end(), fam->display_name) == names.end())
      names.push_back(fam->display_name);
    if (std::find(expected.begin(), expected.end(), fam->expected_keys) == expected.end())
      expected.push_back(fam->expected_keys);
    if (hint.empty() && fam->unsupported_hint) hint = fam->unsupported_hint(f);
  }
  // "A", "A or B", "A, B or C".
  std::string listed;
  for (size_t i = 0; i < names.size(); ++i)
    listed += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  std::string found;
  const auto& es = f.entries();
  for (size_t i = 0; i < es.size() && i < 6; ++i)
    found += fmt::format("{}'{}' {}", i ? ", " : "", es[i].name, es[i].shape.str());
  return make_error(ErrorCode::UNSUPPORTED,
                    "{}: not a supported {} checkpoint{}. Expected {}. Found {} tensors: {}{}",
                    f.path(), listed, hint, fmt::join(expected, "; or "), es.size(), found,
                    es.size() > 6 ? ", ..." : "");
}

}  // namespace

const char* model_sampling_kind_name(ModelSamplingSpec::Kind k) {
  switch (k) {
    case ModelSamplingSpec::Kind::DISCRETE: return "discrete";
    case ModelSamplingSpec::Kind::FLOW: return "flow";
    case ModelSamplingSpec::Kind::FLUX: return "flux";
  }
  return "?";
}

// Note [latent format shift]
// ComfyUI's LatentFormat.process_in is latent * scale_factor, and the formats with a shift (SD3,
// Flux) override it with (latent - shift_factor) * scale_factor; process_out is latent /
// scale_factor, or latent / scale_factor + shift_factor. Both are float32 tensor arithmetic with
// Python floats as scalars. A format whose shift is 0 takes the plain path, so SD results stay
// bitwise what they were (x / s + 0 would turn -0 into +0). ComfyUI applies them where a latent
// enters or leaves a model: the sampler's input latent (not when it is all zeros) and its
// result (comfy/samplers.py CFGGuider.inner_sample), reference latents and concat images; VAE
// encode and decode work in VAE space and the latent2rgb preview reads the model-space x0, so
// neither applies them.
void LatentFormat::process_in(float* x, int64_t n) const {
  if (shift_factor == 0.0f) {
    for (int64_t i = 0; i < n; ++i) x[i] *= scale_factor;
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] - shift_factor) * scale_factor;
}

void LatentFormat::process_out(float* x, int64_t n) const {
  if (shift_factor == 0.0f) {
    for (int64_t i = 0; i < n; ++i) x[i] /= scale_factor;
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / scale_factor + shift_factor;
}

std::vector<const ModelFamily*> model_families() {
  std::vector<const ModelFamily*> v = model_families_builtin();
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ModelFamily& f : r.families)
    if (std::find(r.removed.begin(), r.removed.end(), &f) == r.removed.end()) v.push_back(&f);
  return v;
}

const ModelFamily* model_family_find(std::string_view name) {
  for (const ModelFamily* f : model_families())
    if (f->name == name) return f;
  return nullptr;
}

Status model_family_register(ModelFamily family) {
  if (family.name.empty() || !family.detect)
    return make_error(ErrorCode::INVALID_ARGUMENT, "a model family needs a name and a detection");
  if (model_family_find(family.name))
    return make_error(ErrorCode::INVALID_ARGUMENT, "model family '{}' is already registered",
                      family.name);
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  r.families.push_back(std::move(family));
  return Status();
}

void model_family_unregister(std::string_view name) {
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ModelFamily& f : r.families)
    if (f.name == name && std::find(r.removed.begin(), r.removed.end(), &f) == r.removed.end())
      r.removed.push_back(&f);
}

Result<FamilyDetected> model_family_detect(const SafetensorsFile& file) {
  const std::vector<const ModelFamily*> families = model_families();
  for (const ModelFamily* f : families)
    if (std::optional<FamilyMatch> m = f->detect(file)) return FamilyDetected{f, std::move(*m)};
  return unsupported(file, families);
}

}  // namespace hr
