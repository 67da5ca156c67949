// The Flux and Z-Image LoRA key maps and patching against ComfyUI's (tests/data/lora/
// keymap-tiny-{flux,zimage}.json, {flux,zimage}_cases.json, {flux,zimage}_lora.golden.safetensors;
// made by make_flux_lora_golden.py / make_zimage_lora_golden.py with ComfyUI's
// model_lora_keys_unet, load_lora and calculate_weight on the tiny DiTs of
// tests/data/{flux,zimage}/dit_golden.safetensors; Z-Image's diffusers stems restate newer
// ComfyUI, see that script).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "models/flux/flux_lora_keys.h"
#include "models/flux/flux_model.h"
#include "models/lora_cases.h"
#include "models/zimage/zimage_lora_keys.h"
#include "test_gpu.h"
#include "test_safetensors.h"

namespace hr {
namespace {

using namespace test;

constexpr const char* kFlux = "flux/dit_golden.safetensors";

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string target_str(const LoraTarget& t) {
  return t.weight + " rows " + std::to_string(t.row_offset) + "+" + std::to_string(t.rows);
}

// The checkpoint's weights without its "golden." test tensors (what ComfyUI's model holds),
// as a bare Flux DiT file.
std::unique_ptr<LoadedModel> load_weights_only(const std::string& checkpoint) {
  auto src = SafetensorsFile::open(test::data_path(checkpoint));
  EXPECT_TRUE(src.ok()) << src.status().str();
  if (!src.ok()) return nullptr;
  std::vector<HostTensor> ts;
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : (*src)->entries()) {
    if (e.name.starts_with("golden.")) continue;
    ts.push_back((*src)->load(e.name).value());
    names.push_back(e.name);
  }
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (size_t i = 0; i < ts.size(); ++i) list.push_back({names[i], &ts[i]});
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("hr_flux_lora_" + std::to_string(getpid()) + ".safetensors");
  EXPECT_TRUE(safetensors_write(path.string(), list, {}).ok());
  auto m = model_load(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(m.ok()) << m.status().str();
  return m.ok() ? std::move(*m) : nullptr;
}

// Stems ComfyUI maps that headroom's leaves out (Note [flux lora keys], [zimage lora keys]).
std::string left_out_reason(const json& t) {
  if (t["key"].is_null()) return "no such tensor in the model";
  if (t.contains("function")) return "ComfyUI applies " + t["function"].get<std::string>();
  return "";
}

// Every stem of ComfyUI's map is in headroom's with the same target and slice (or left out for
// a listed reason), and headroom's has no other; `sliced` / `left_out` count the stems of each.
void expect_same_map(const std::string& golden, LoraKeysFn fn, int min_compared, int sliced_want,
                     int left_out_want) {
  const json g = read_json(test::data_path("lora/" + golden));
  std::unique_ptr<LoadedModel> m = load_weights_only(g["checkpoint"]);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->family().lora_keys, fn) << m->family().name;
  auto map = m->family().lora_keys(m->diffusion.get(), nullptr);
  ASSERT_TRUE(map.ok()) << map.status().str();
  std::set<std::string> comfy;
  int compared = 0, left_out = 0, sliced = 0;
  for (const auto& [stem, t] : g["unet"].items()) {
    comfy.insert(stem);
    auto it = map->find(stem);
    if (std::string why = left_out_reason(t); !why.empty()) {
      EXPECT_EQ(it, map->end()) << stem << " (" << why << ") is mapped";
      ++left_out;
      continue;
    }
    ASSERT_NE(it, map->end()) << "ComfyUI's stem " << stem << " -> " << t["key"]
                              << " is not in headroom's map";
    LoraTarget want{LoraComponent::DIFFUSION, 0, t["key"].get<std::string>(), -1, 0};
    if (!t["offset"].is_null()) {
      want.row_offset = t["offset"];
      want.rows = t["rows"];
      ++sliced;
    }
    EXPECT_EQ(it->second, want) << stem << ": headroom " << target_str(it->second) << ", ComfyUI "
                                << target_str(want);
    ++compared;
  }
  for (const auto& [stem, t] : *map)
    EXPECT_TRUE(comfy.count(stem))
        << "headroom maps " << stem << " -> " << target_str(t) << ", ComfyUI does not";
  EXPECT_EQ(size_t(compared), map->size());
  EXPECT_GE(compared, min_compared) << golden;  // a guard against a golden that lost its stems
  EXPECT_EQ(sliced, sliced_want) << golden;
  EXPECT_EQ(left_out, left_out_want) << golden;
}

// Sliced: three dialects of q/k/v in 2 double blocks (img and txt) and of q/k/v/proj_mlp in 1
// single block, and linear1_qkv; left out: controlnet_x_embedder's and norm_out.linear's three.
TEST(FluxLoraKeys, MatchesComfyUI) {
  expect_same_map("keymap-tiny-flux.json", &flux_lora_keys, 250, 3 * (2 * 3 * 2 + 4) + 1, 6);
}

// Sliced: four dialects of q/k/v in 2 layers and 1 block of each refiner; left out: the four of
// the context refiner's adaLN_modulation.0, which it does not have.
TEST(ZImageLoraKeys, MatchesComfyUI) {
  expect_same_map("keymap-tiny-zimage.json", &zimage_lora_keys, 300, 4 * 3 * 4, 4);
}

// The single-file tiny Flux of the e2e test (DiT under "model.diffusion_model.", CLIP-L and T5
// under "text_encoders.") with its text encoders: ComfyUI's key map of both components
// (keymap-tiny-flux-e2e.json: model_lora_keys_unet then model_lora_keys_clip).
TEST(FluxLoraKeys, CheckpointWithTextEncodersMatchesComfyUI) {
  const json g = read_json(test::data_path("lora/keymap-tiny-flux-e2e.json"));
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("hr_flux_lora_e2e_" + std::to_string(getpid()) + ".safetensors");
  // The settings the tensors cannot show (flux_e2e_test's): CLIP-L's 2 heads, the RoPE axes.
  auto src = SafetensorsFile::open(test::data_path(g["checkpoint"]));
  ASSERT_TRUE(src.ok()) << src.status().str();
  std::map<std::string, std::string> meta = (*src)->metadata();
  meta["headroom.clip.heads"] = "2";
  meta["headroom.flux.axes_dim"] = "2,2,4";
  ASSERT_TRUE(
      test::safetensors_write_part(test::data_path(g["checkpoint"]), "", path.string(), meta).ok());
  auto m = model_load(path.string());
  ASSERT_TRUE(m.ok()) << m.status().str();
  auto te = text_encoder_load((*m)->file, (*m)->info);
  std::filesystem::remove(path);
  ASSERT_TRUE(te.ok()) << te.status().str();
  auto map = flux_lora_keys((*m)->diffusion.get(), te->get());
  ASSERT_TRUE(map.ok()) << map.status().str();
  const CheckpointInfo& info = (*m)->info;
  std::set<std::string> comfy;
  int compared = 0, text = 0;
  for (const char* section : {"unet", "clip"})
    for (const auto& [stem, t] : g[section].items()) {
      comfy.insert(stem);
      auto it = map->find(stem);
      if (!left_out_reason(t).empty()) {
        EXPECT_EQ(it, map->end()) << stem << " is mapped";
        continue;
      }
      ASSERT_NE(it, map->end()) << "ComfyUI's stem " << stem << " -> " << t["key"]
                                << " is not in headroom's map";
      const std::string key = t["key"];
      LoraTarget want;
      if (std::string(section) == "unet") {
        want.weight = key.substr(info.diffusion_prefix.size());
      } else {
        want.component = LoraComponent::TEXT_ENCODER;
        want.encoder = -1;
        for (size_t i = 0; i < info.text_encoders.size(); ++i)
          if (key.starts_with(info.text_encoders[i].prefix)) {
            want.encoder = int(i);
            want.weight = key.substr(info.text_encoders[i].prefix.size());
          }
        ++text;
      }
      if (!t["offset"].is_null()) {
        want.row_offset = t["offset"];
        want.rows = t["rows"];
      }
      EXPECT_EQ(it->second, want) << stem << ": headroom " << target_str(it->second) << " encoder "
                                  << it->second.encoder << ", ComfyUI " << target_str(want)
                                  << " encoder " << want.encoder;
      ++compared;
    }
  for (const auto& [stem, t] : *map)
    EXPECT_TRUE(comfy.count(stem))
        << "headroom maps " << stem << " -> " << target_str(t) << ", ComfyUI does not";
  EXPECT_EQ(size_t(compared), map->size());
  EXPECT_GE(text, 100);
  EXPECT_GE(compared, 250);
}

// A few stems by hand, in case both sides drift together.
TEST(FluxLoraKeys, SpotChecks) {
  std::unique_ptr<LoadedModel> m = load_weights_only(kFlux);
  ASSERT_TRUE(m);
  auto map = flux_lora_keys(m->diffusion.get(), nullptr);
  ASSERT_TRUE(map.ok()) << map.status().str();
  const auto at = [&](const std::string& stem) {
    auto it = map->find(stem);
    EXPECT_NE(it, map->end()) << stem;
    return it == map->end() ? LoraTarget{} : it->second;
  };
  const LoraTarget mlp{LoraComponent::DIFFUSION, 0, "single_blocks.0.linear1.weight", 96, 128};
  EXPECT_EQ(at("transformer.single_transformer_blocks.0.proj_mlp"), mlp);
  EXPECT_EQ(at("lora_transformer_single_transformer_blocks_0_proj_mlp"), mlp);
  const LoraTarget k{LoraComponent::DIFFUSION, 0, "double_blocks.1.txt_attn.qkv.weight", 32, 32};
  EXPECT_EQ(at("transformer.transformer_blocks.1.attn.add_k_proj"), k);
  const LoraTarget qkv{LoraComponent::DIFFUSION, 0, "double_blocks.0.img_attn.qkv.weight", -1, 0};
  EXPECT_EQ(at("lora_unet_double_blocks_0_img_attn_qkv"), qkv);
  EXPECT_EQ(at("diffusion_model.double_blocks.0.img_attn.qkv"), qkv);
  EXPECT_EQ(map->count("transformer.norm_out.linear"), 0u);
}

// Z-Image's text encoder: ComfyUI's generic "text_encoders.<comfy key>" stem for every weight
// (model_lora_keys_clip's first loop, which keymap-tiny-flux-e2e.json holds for Flux), here on
// a stand-in encoder of two tensors.
class StandInEncoder final : public TextEncoder {
 public:
  explicit StandInEncoder(std::shared_ptr<WeightSet> w) : w_(std::move(w)) {}
  const ModelFamily& family() const override { return *model_family_find("zimage"); }
  std::vector<std::string> parts() const override { return {"qwen3_4b"}; }
  std::vector<std::shared_ptr<WeightSet>> stores() const override { return {w_}; }
  std::string comfy_key_prefix(size_t) const override { return "qwen3_4b.transformer."; }
  Result<CondEntry> encode(Executor&, const std::map<std::string, std::string>&, int,
                           const EncoderSources&) const override {
    return make_error(ErrorCode::UNSUPPORTED, "stand-in");
  }

 private:
  std::shared_ptr<WeightSet> w_;
};

TEST(ZImageLoraKeys, TextEncoderGenericStems) {
  auto w = std::make_shared<WeightSet>();
  w->put("model.layers.0.self_attn.q_proj.weight", HostTensor(DType::F32, Shape{4, 4}));
  w->put("model.norm.bias", HostTensor(DType::F32, Shape{4}));
  StandInEncoder enc(w);
  auto map = zimage_lora_keys(nullptr, &enc);
  ASSERT_TRUE(map.ok()) << map.status().str();
  ASSERT_EQ(map->size(), 1u);
  const LoraTarget want{LoraComponent::TEXT_ENCODER, 0, "model.layers.0.self_attn.q_proj.weight",
                        -1, 0};
  EXPECT_EQ(map->at("text_encoders.qwen3_4b.transformer.model.layers.0.self_attn.q_proj"), want);
}

TEST(FluxLoraKeys, RefusesAnotherFamilysModel) {
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  auto map = flux_lora_keys((*m)->diffusion.get(), nullptr);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), ErrorCode::INVALID_ARGUMENT);
}

// Each case's LoRA read through headroom's map and applied by PatchedWeights on `backend`: every
// patched tensor equals ComfyUI's float32 result within 1e-6 of its largest magnitude, and the
// keys left unloaded are ComfyUI's.
void check_dit_case(const std::string& name, std::unique_ptr<Backend> backend) {
  const std::string family = name.substr(0, name.find('_'));
  const json all = read_json(test::data_path("lora/" + family + "_cases.json"));
  const json c = all["cases"][name];
  ASSERT_FALSE(c.is_null()) << name;
  Applied a;
  a.backend = std::move(backend);
  a.alloc = std::make_unique<Allocator>(*a.backend, Allocator::kUnlimited, eviction_policy());
  LoadOptions o;
  o.diffusion_dtype = DType::F32;
  auto m = model_load(test::data_path(all["checkpoint"]), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  a.model = std::move(*m);
  ASSERT_NE(a.model->family().lora_keys, nullptr);
  auto map = a.model->family().lora_keys(a.model->diffusion.get(), nullptr);
  ASSERT_TRUE(map.ok()) << map.status().str();
  auto f = open_file(test::data_path("lora/" + c["file"].get<std::string>()));
  ASSERT_TRUE(f);
  auto p = lora_patches_read(*f, *map, LoraStrengths{c["strength_model"].get<float>(), 1.0f});
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->not_loaded, c["not_loaded"].get<std::vector<std::string>>());
  for (const auto& [w, n] : c["patch_count"].items())
    EXPECT_EQ(p->diffusion[w].size(), size_t(n.get<int>())) << w;
  a.diffusion = view(std::shared_ptr<WeightSet>(a.model, &a.model->diffusion->weights()),
                     std::move(p->diffusion), a);
  auto golden = open_file(test::data_path("lora/" + family + "_lora.golden.safetensors"));
  ASSERT_TRUE(golden);
  int checked = 0;
  for (const std::string weight : c["patched"]) {
    ASSERT_TRUE(a.diffusion->weight_patched(weight, WeightLayout::STORED)) << weight;
    const HostTensor* base = a.diffusion->base().find(weight);
    ASSERT_NE(base, nullptr) << weight;
    auto got = a.diffusion->weight_get(weight, base->desc(), WeightLayout::STORED);
    ASSERT_TRUE(got.ok()) << weight << ": " << got.status().str();
    std::vector<char> bytes(base->bytes());
    if (a.backend->memory_is_host()) {
      std::memcpy(bytes.data(), got->data, bytes.size());
    } else {
      ASSERT_TRUE(a.backend->copy_d2h(bytes.data(), got->data, bytes.size(), nullptr).ok());
      ASSERT_TRUE(a.backend->stream_sync(nullptr).ok());
    }
    auto want = golden->load(name + "/" + weight, DType::F32);
    ASSERT_TRUE(want.ok()) << want.status().str();
    const Diff d = compare(as_f32(bytes.data(), DType::F32, base->numel()),
                           std::vector<float>(want->f32(), want->f32() + want->numel()));
    EXPECT_LE(d.max_abs, 1e-6 * d.scale) << name << " " << weight;
    ++checked;
  }
  EXPECT_EQ(checked, int(c["patched"].size()));
  EXPECT_GT(checked, 0);
}

class DiTLoraPatch : public ::testing::TestWithParam<std::string> {};

TEST_P(DiTLoraPatch, F32MatchesComfyUI) { check_dit_case(GetParam(), cpu_backend_create(1)); }

// The same on CUDA (the patch ops on the device; skips without one, Note [required GPU]).
class CudaLoraDiT : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLoraDiT, F32MatchesComfyUI) {
  auto b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), "no CUDA device");
  check_dit_case(GetParam(), std::move(b).value());
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaLoraDiT,
                         ::testing::Values("flux_diffusers", "flux_kohya", "zimage_diffusers",
                                           "zimage_kohya"));

INSTANTIATE_TEST_SUITE_P(Cases, DiTLoraPatch,
                         ::testing::Values("flux_diffusers", "flux_kohya", "zimage_diffusers",
                                           "zimage_kohya"));

}  // namespace
}  // namespace hr
