// Shared by the LoRA tests: the cases of tests/data/lora/cases.json (LoRA files and ComfyUI's
// patched tensors, make_lora_golden.py) applied to their checkpoint as PatchedWeights views on a
// backend, and the comparison with ComfyUI's tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/patched_weights.h"
#include "models/checkpoint.h"
#include "models/lora_file.h"
#include "models/sd/sd_unet.h"
#include "models/sd/unet.h"
#include "test_paths.h"

namespace hr::test {

using nlohmann::json;

inline json cases() {
  std::ifstream in(test::data_path("lora/cases.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str())["cases"];
}

inline std::unique_ptr<SafetensorsFile> open_file(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().str();
  return f.ok() ? std::move(*f) : nullptr;
}

inline std::vector<float> as_f32(const void* p, DType dtype, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  dtype_convert(p, dtype, v.data(), DType::F32, size_t(n));
  return v;
}

// One case's model on the CPU with its LoRAs applied as patched views per component.
struct Applied {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Allocator> alloc;
  std::shared_ptr<LoadedModel> model;
  std::unique_ptr<TextEncoder> text;
  std::shared_ptr<PatchedWeights> diffusion;
  std::vector<std::shared_ptr<PatchedWeights>> encoders;
};

inline void patches_append(std::map<std::string, std::vector<WeightPatch>>& to,
                    std::map<std::string, std::vector<WeightPatch>>& from) {
  for (auto& [w, ps] : from)
    for (WeightPatch& p : ps) to[w].push_back(std::move(p));
}

inline std::shared_ptr<PatchedWeights> view(std::shared_ptr<WeightSet> base,
                                     std::map<std::string, std::vector<WeightPatch>> by,
                                     Applied& a) {
  auto set = std::make_shared<PatchSet>();
  set->by_weight.insert(std::make_move_iterator(by.begin()), std::make_move_iterator(by.end()));
  set->id = "test";
  auto v = std::make_shared<PatchedWeights>(std::move(base), std::move(set));
  v->bind(a.backend.get(), a.alloc.get());
  return v;
}

inline void apply(const json& c, DType dtype, Applied& a) {
  if (!a.backend) a.backend = cpu_backend_create(1);
  a.alloc = std::make_unique<Allocator>(*a.backend, Allocator::kUnlimited, eviction_policy());
  LoadOptions o;
  o.diffusion_dtype = o.text_encoder_dtype = o.vae_dtype = dtype;
  auto m = model_load(test::data_path(c["checkpoint"]), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  a.model = std::move(*m);
  auto te = text_encoder_load(a.model->file, a.model->info, o);
  ASSERT_TRUE(te.ok()) << te.status().str();
  a.text = std::move(*te);
  auto map = a.model->family().lora_keys(a.model->diffusion.get(), a.text.get());
  ASSERT_TRUE(map.ok()) << map.status().str();
  std::map<std::string, std::vector<WeightPatch>> diffusion;
  std::vector<std::map<std::string, std::vector<WeightPatch>>> encoders(a.text->stores().size());
  for (const json& l : c["loras"]) {
    const std::string file = l["file"];
    auto f = open_file(test::data_path("lora/" + file));
    ASSERT_TRUE(f);
    LoraStrengths s{float(l["strength_model"]), float(l["strength_clip"])};
    auto p = lora_patches_read(*f, *map, s);
    ASSERT_TRUE(p.ok()) << p.status().str();
    const std::vector<std::string> want = c["not_loaded"][file];
    EXPECT_EQ(p->not_loaded, want) << file;
    patches_append(diffusion, p->diffusion);
    for (size_t i = 0; i < p->encoders.size(); ++i) patches_append(encoders[i], p->encoders[i]);
  }
  a.diffusion = view(std::shared_ptr<WeightSet>(a.model, &a.model->diffusion->weights()),
                     std::move(diffusion), a);
  for (size_t i = 0; i < encoders.size(); ++i)
    a.encoders.push_back(view(a.text->stores()[i], std::move(encoders[i]), a));
}

// Several UNet steps of case `a`'s patched model (its backend, dtype as applied): resident, then
// under a budget of the arena, half the weights and the most patching needs, which makes the
// weights stream; each step's output bit for bit the resident one's.
inline void check_streamed_patched_steps(Applied& a, int steps) {
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok());
  auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
  const HostTensor x = ld("unet.sd1.x"), t = ld("unet.sd1.timesteps"), c = ld("unet.sd1.context");
  SDUNet& unet = *sd_unet(*a.model);
  std::vector<HostTensor> want;
  {
    Executor ex(*a.backend, *a.alloc, executor_policies_default(*a.backend));
    for (int i = 0; i < steps; ++i) {
      auto out = unet_run(ex, unet.config, *a.diffusion, unet.dtype, x, t, c);
      ASSERT_TRUE(out.ok()) << out.status().str();
      want.push_back(std::move(*out));
    }
    a.diffusion->bind(nullptr, nullptr);
  }
  auto graph = unet_graph(unet.config, x.shape()[0], x.shape()[2], x.shape()[3], c.shape()[1],
                          unet.dtype);
  ASSERT_TRUE(graph.ok());
  Executor probe(*a.backend, *a.alloc, executor_policies_default(*a.backend));
  a.diffusion->bind(a.backend.get(), a.alloc.get());  // patch_room asks the bound backend
  auto compiled = probe.compile(*graph);
  ASSERT_TRUE(compiled.ok());
  const uint64_t budget = (*compiled)->plan->arena_bytes + (*compiled)->weight_bytes / 2 +
                          Executor::patch_room(**compiled, *a.diffusion, nullptr);
  Allocator tight(*a.backend, budget, eviction_policy());
  Executor ex(*a.backend, tight, executor_policies_default(*a.backend));
  a.diffusion->bind(a.backend.get(), &tight);
  for (int i = 0; i < steps; ++i) {
    auto out = unet_run(ex, unet.config, *a.diffusion, unet.dtype, x, t, c);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_TRUE(ex.last_residency().streams()) << "the budget should make it stream";
    EXPECT_EQ(std::memcmp(out->data(), want[size_t(i)].data(), out->bytes()), 0) << "step " << i;
  }
  EXPECT_GT(a.diffusion->streamed_patches(), 0u);
  a.diffusion->bind(nullptr, nullptr);
}

// The view and weight name that serve checkpoint tensor `key`.
inline std::pair<PatchedWeights*, std::string> served_by(Applied& a, const std::string& key) {
  const CheckpointInfo& info = a.model->info;
  if (key.starts_with(info.diffusion_prefix))
    return {a.diffusion.get(), key.substr(info.diffusion_prefix.size())};
  size_t best = 0;
  PatchedWeights* v = nullptr;
  for (size_t i = 0; i < info.text_encoders.size(); ++i) {
    const std::string& p = info.text_encoders[i].prefix;
    if (key.starts_with(p) && p.size() > best) {
      best = p.size();
      v = a.encoders[i].get();
    }
  }
  return {v, key.substr(best)};
}

struct Diff {
  double max_abs = 0, scale = 0;
  int64_t mismatches = 0;
};

inline Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  for (size_t i = 0; i < want.size(); ++i) {
    d.scale = std::max(d.scale, double(std::fabs(want[i])));
    const double e = std::fabs(double(got[i]) - double(want[i]));
    d.max_abs = std::max(d.max_abs, e);
    d.mismatches += got[i] != want[i];
  }
  return d;
}

// Every patched tensor of case `name` served in `dtype`, against ComfyUI's.
inline void check_case(const std::string& name, DType dtype, std::unique_ptr<Backend> backend) {
  const json c = cases()[name];
  Applied a;
  a.backend = std::move(backend);
  apply(c, dtype, a);
  if (::testing::Test::HasFatalFailure()) return;
  auto golden = open_file(test::data_path("lora/" + std::string(c["golden"])));
  ASSERT_TRUE(golden);
  const std::string suffix = dtype == DType::F32 ? "" : "@f16";
  int checked = 0;
  for (const std::string key : c["patched"]) {
    auto [v, weight] = served_by(a, key);
    ASSERT_NE(v, nullptr) << key;
    ASSERT_TRUE(v->weight_patched(weight, WeightLayout::STORED)) << key << " has no patches";
    const HostTensor* base = v->base().find(weight);
    ASSERT_NE(base, nullptr) << key;
    auto got = v->weight_get(weight, base->desc(), WeightLayout::STORED);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().str();
    auto want = golden->load(key + suffix, DType::F32);
    ASSERT_TRUE(want.ok()) << want.status().str();
    std::vector<char> bytes(base->bytes());
    if (a.backend->memory_is_host()) {
      std::memcpy(bytes.data(), got->data, bytes.size());
    } else {
      ASSERT_TRUE(a.backend->copy_d2h(bytes.data(), got->data, bytes.size(), nullptr).ok());
      ASSERT_TRUE(a.backend->stream_sync(nullptr).ok());
    }
    const Diff d = compare(as_f32(bytes.data(), dtype, base->numel()),
                           std::vector<float>(want->f32(), want->f32() + want->numel()));
    if (dtype == DType::F32)
      EXPECT_LE(d.max_abs, 1e-6 * d.scale) << name << " " << key;
    else {  // ComfyUI rounds the float32 sum once, as the ops do; a sum taken in another order
            // may land across a rounding boundary: then one f16 step apart, and rarely
      EXPECT_LE(d.mismatches, std::max<int64_t>(2, base->numel() / 1000)) << name << " " << key;
      EXPECT_LE(d.max_abs, std::ldexp(d.scale, -10)) << name << " " << key;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace hr::test
