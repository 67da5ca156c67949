// LoRA patches on fp8 weights (Note [fp8 patches] in memory/fp8_patch.cpp) against ComfyUI's own
// patch_weight_to_device (tests/data/lora/fp8, make_fp8_lora_golden.py): a kohya LoRA on tiny
// SD1 weights stored in fp8 at load and in scaled fp8. ComfyUI's float32 result before rounding
// is matched within 1e-5 of each tensor's largest value, its rounding of that result bit for bit
// (the seed from the ComfyUI key), and PatchedWeights' patched fp8 weight on the CPU backend
// code for code (on these weights headroom's float32 sums round as torch's do; were a sum to
// differ in its last bit, a stochastic rounding could move by one step and this would say so).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/fp8_round.h"
#include "memory/fp8_patch.h"
#include "models/lora_cases.h"

namespace hr {
namespace {

using namespace test;

struct Fp8Golden {
  json cases;
  std::unique_ptr<SafetensorsFile> golden;
  std::map<std::string, std::vector<WeightPatch>> patches;  // by UNet weight name
};

const Fp8Golden& fp8_golden() {
  static Fp8Golden* g = [] {
    auto* out = new Fp8Golden;
    std::ifstream in(test::data_path("lora/fp8/cases.json"));
    std::stringstream ss;
    ss << in.rdbuf();
    out->cases = json::parse(ss.str());
    out->golden = open_file(test::data_path(out->cases["golden"]));
    LoadOptions o;
    o.models_dir = test::source_dir() + "/data";
    auto m = model_load(test::data_path(out->cases["checkpoint"]), o);
    EXPECT_TRUE(m.ok()) << m.status().str();
    auto map = (*m)->family().lora_keys((*m)->diffusion.get(), nullptr);
    EXPECT_TRUE(map.ok()) << map.status().str();
    const json& l = out->cases["lora"];
    auto f = open_file(test::data_path(l["file"]));
    auto p = lora_patches_read(*f, *map, {float(l["strength_model"]), float(l["strength_clip"])});
    EXPECT_TRUE(p.ok()) << p.status().str();
    out->patches = std::move(p->diffusion);
    return out;
  }();
  return *g;
}

HostTensor tensor(const std::string& name, std::optional<DType> as = std::nullopt) {
  auto t = fp8_golden().golden->load(name, as);
  EXPECT_TRUE(t.ok()) << t.status().str();
  return t.ok() ? std::move(*t) : HostTensor();
}

// The golden's U8 codes as an fp8 tensor of the weight's shape.
HostTensor codes(const std::string& name, const Shape& shape) {
  const HostTensor u = tensor(name, DType::U8);  // as stored
  HostTensor t(DType::F8_E4M3, shape);
  EXPECT_EQ(u.bytes(), t.bytes()) << name;
  std::memcpy(t.data(), u.data(), std::min(u.bytes(), t.bytes()));
  return t;
}

class LoraFp8Test : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraFp8Test, MatchesComfyUI) {
  const std::string mode = GetParam();
  const Fp8Golden& g = fp8_golden();
  auto backend = cpu_backend_create(1);
  int checked = 0;
  for (const json& w : g.cases["weights"]) {
    if (!w["modes"].contains(mode)) continue;
    const json& m = w["modes"][mode];
    const std::string comfy_key = w["comfy_key"];
    const std::string name = comfy_key.substr(std::string("diffusion_model.").size());
    const std::vector<WeightPatch>* ps = nullptr;
    if (auto it = g.patches.find(name); it != g.patches.end()) ps = &it->second;
    ASSERT_TRUE(ps) << "the LoRA has no patch for " << name;
    const HostTensor calculated = tensor(m["calculated"]);
    const HostTensor stored = codes(m["stored"], calculated.shape());
    const HostTensor want = codes(m["patched"], calculated.shape());
    HostTensor scale;
    if (m.contains("scale")) scale = tensor(m["scale"]).reshaped(Shape{1});

    // ComfyUI's float32 sum, then its rounding of exactly that sum.
    HostTensor mine = stored.to(DType::F32);
    const float s = scale.empty() ? 1.0f : scale.f32()[0];
    for (int64_t i = 0; i < mine.numel(); ++i) mine.f32()[i] *= s;
    ASSERT_TRUE(patches_apply_host(mine, *ps, std::vector<HostTensor>(ps->size())).ok());
    float most = 0, worst = 0;
    for (int64_t i = 0; i < mine.numel(); ++i) {
      most = std::max(most, std::fabs(calculated.f32()[i]));
      worst = std::max(worst, std::fabs(mine.f32()[i] - calculated.f32()[i]));
    }
    EXPECT_LE(worst, 1e-5f * most) << name;
    HostTensor divided = calculated.clone();
    for (int64_t i = 0; i < divided.numel(); ++i) divided.f32()[i] /= s;
    HostTensor rounded(DType::F8_E4M3, calculated.shape());
    fp8_stochastic_round(divided.f32(), calculated.shape()[0],
                         calculated.numel() / calculated.shape()[0], DType::F8_E4M3,
                         comfy_string_seed(comfy_key), static_cast<uint8_t*>(rounded.data()));
    EXPECT_EQ(std::memcmp(rounded.data(), want.data(), want.bytes()), 0) << name;

    // PatchedWeights on the CPU backend: the store holds the fp8 weight and its scale.
    auto store = std::make_shared<WeightSet>();
    store->put(name, stored.clone());
    auto storage = std::make_shared<WeightStorageMap>();
    (*storage)[name] = WeightStorage{DType::F8_E4M3, ""};
    if (!scale.empty()) {
      const std::string scale_name = name.substr(0, name.size() - 7) + ".scale_weight";
      store->put(scale_name, scale.clone());
      (*storage)[name].scale = scale_name;
    }
    store->set_storage(storage);
    auto set = std::make_shared<PatchSet>();
    for (const WeightPatch& p : *ps) set->by_weight[name].push_back(p.clone());
    set->comfy_prefix = "diffusion_model.";
    Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
    PatchedWeights view(store, set);
    view.bind(backend.get(), &alloc);
    auto got = view.weight_get(name, stored.desc(), WeightLayout::STORED);
    ASSERT_TRUE(got.ok()) << got.status().str();
    EXPECT_EQ(std::memcmp(got->data, want.data(), want.bytes()), 0) << name;
    EXPECT_EQ(std::memcmp(store->find(name)->data(), stored.data(), stored.bytes()), 0)
        << "the host copy changed";
    view.bind(nullptr, nullptr);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

INSTANTIATE_TEST_SUITE_P(Modes, LoraFp8Test, ::testing::Values("at_load", "scaled"));

}  // namespace
}  // namespace hr
