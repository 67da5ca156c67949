// The SD families' LoRA key maps against ComfyUI's own (model_lora_keys_unet/clip on the same
// checkpoints: tests/data/lora/keymap-tiny-*.json, made by make_lora_golden.py and, for the SD2
// and SDXL-refiner text encoders, make_keymap_variants.py).
#include "models/lora_keys.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/checkpoint.h"
#include "models/family.h"
#include "models/sd/sd_lora_keys.h"
#include "models/sd/sd_text_encoder.h"
#include "models/sd/sd_unet.h"
#include "test_paths.h"

namespace hr {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// Stems ComfyUI maps that headroom's map leaves out, and why.
//  - "key": null: ComfyUI names the tensor from the UNet config (a resblock's conv_shortcut where
//    the channels do not change, the last level's upsampler, SDXL's add_embedding on SD1) but the
//    model has none; ComfyUI's add_patches drops a patch on it, headroom's map has no stem for it.
//  - "transpose": true: bigG's HF text_projection.weight is OpenCLIP's text_projection
//    transposed, which a LoraTarget cannot express (Note [openclip lora names]).
std::string left_out_reason(const json& target) {
  if (target["key"].is_null()) return "no such tensor in the model";
  if (target.value("transpose", false)) return "transposed tensor";
  return "";
}

// ComfyUI's target in headroom's terms: the checkpoint key with its component's prefix
// stripped (the prefixes the checkpoint inspection found).
LoraTarget expected_target(const json& t, const CheckpointInfo& info, bool clip) {
  LoraTarget e;
  const std::string key = t["key"];
  if (!clip) {
    EXPECT_EQ(key.rfind(info.diffusion_prefix, 0), 0u) << key;
    e.weight = key.substr(info.diffusion_prefix.size());
  } else {
    e.component = LoraComponent::TEXT_ENCODER;
    size_t best = 0;
    e.encoder = -1;
    for (size_t i = 0; i < info.text_encoders.size(); ++i) {
      const std::string& p = info.text_encoders[i].prefix;
      if (key.rfind(p, 0) == 0 && (e.encoder < 0 || p.size() > best)) {
        e.encoder = int(i);
        best = p.size();
      }
    }
    EXPECT_GE(e.encoder, 0) << key << " is in no text encoder";
    e.weight = key.substr(best);
  }
  if (!t["offset"].is_null()) {
    e.row_offset = t["offset"];
    e.rows = t["rows"];
  }
  return e;
}

std::string target_str(const LoraTarget& t) {
  std::ostringstream s;
  s << (t.component == LoraComponent::DIFFUSION ? "diffusion" : "text_encoder") << "["
    << t.encoder << "] " << t.weight << " rows " << t.row_offset << "+" << t.rows;
  return s.str();
}

struct Loaded {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<TextEncoder> text;
};

Loaded load_path(const std::string& path) {
  Loaded l;
  auto m = model_load(path);
  EXPECT_TRUE(m.ok()) << m.status().str();
  if (!m.ok()) return l;
  l.model = std::move(*m);
  auto te = text_encoder_load(l.model->file, l.model->info);
  EXPECT_TRUE(te.ok()) << te.status().str();
  if (te.ok()) l.text = std::move(*te);
  return l;
}

Loaded load(const std::string& checkpoint) { return load_path(test::golden_path(checkpoint)); }

// Every stem of ComfyUI's map is in headroom's with the same target (or left out for a listed
// reason), and headroom's has no stem ComfyUI's lacks.
void expect_same_map(const std::string& golden, const json& g, const Loaded& l,
                     int min_compared) {
  ASSERT_TRUE(l.model && l.text);
  const ModelFamily& family = l.model->family();
  ASSERT_NE(family.lora_keys, nullptr) << family.name;
  auto map = family.lora_keys(l.model->diffusion.get(), l.text.get());
  ASSERT_TRUE(map.ok()) << map.status().str();

  std::set<std::string> comfy_stems;
  std::map<std::string, int> left_out;
  int compared = 0;
  for (const char* section : {"unet", "clip"}) {
    const bool clip = std::string(section) == "clip";
    for (const auto& [stem, t] : g[section].items()) {
      comfy_stems.insert(stem);
      auto it = map->find(stem);
      if (std::string why = left_out_reason(t); !why.empty()) {
        EXPECT_EQ(it, map->end()) << stem << " (" << why << ") is mapped to "
                                  << target_str(it->second);
        ++left_out[why];
        continue;
      }
      if (it == map->end()) {
        ADD_FAILURE() << golden << ": ComfyUI's stem " << stem << " -> " << t["key"]
                      << " is not in headroom's map";
        continue;
      }
      const LoraTarget want = expected_target(t, l.model->info, clip);
      EXPECT_EQ(it->second, want) << stem << ": headroom " << target_str(it->second)
                                  << ", ComfyUI " << target_str(want);
      ++compared;
    }
  }
  for (const auto& [stem, t] : *map)
    EXPECT_TRUE(comfy_stems.count(stem)) << golden << ": headroom maps " << stem << " -> "
                                         << target_str(t) << ", ComfyUI does not";
  EXPECT_EQ(size_t(compared), map->size());
  // A guard against a golden that lost its sections, which would make the comparison vacuous.
  EXPECT_GE(compared, min_compared) << golden;
  std::ostringstream summary;
  for (const auto& [why, n] : left_out) summary << n << " " << why << "; ";
  ::testing::Test::RecordProperty("left_out", summary.str());
}

void expect_same_map(const std::string& golden, int min_compared) {
  const json g = read_json(test::data_path("lora/" + golden));
  Loaded l = load(std::string(g["checkpoint"]).substr(std::string("golden/").size()));
  expect_same_map(golden, g, l, min_compared);
}

// The text-encoder-only files of make_keymap_variants.py: tiny-sdxl's bigG tower moved from
// "derived.from" to "derived.to" (SD2's OpenCLIP-H slot, the SDXL refiner's bigG slot).
void expect_same_map_derived(const std::string& golden, const std::string& family,
                             int min_compared) {
  const json g = read_json(test::data_path("lora/" + golden));
  const std::string from = g["derived"]["from"], to = g["derived"]["to"];
  auto src = SafetensorsFile::open(test::data_path(g["checkpoint"]));
  ASSERT_TRUE(src.ok()) << src.status().str();
  std::vector<HostTensor> ts;
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : (*src)->entries()) {
    if (e.name.rfind(from, 0) != 0) continue;
    ts.push_back((*src)->load(e.name).value());
    names.push_back(to + e.name.substr(from.size()));
  }
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (size_t i = 0; i < ts.size(); ++i) list.push_back({names[i], &ts[i]});
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("hr_lora_keys_" + std::to_string(getpid()) + "_" + golden +
                                      ".safetensors");
  ASSERT_TRUE(safetensors_write(path.string(), list, {}).ok());
  Loaded l = load_path(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(l.model);
  EXPECT_EQ(l.model->family().name, family);
  EXPECT_EQ(l.model->diffusion, nullptr);
  expect_same_map(golden, g, l, min_compared);
}

TEST(LoraKeys, SD1MatchesComfyUI) { expect_same_map("keymap-tiny-sd1.json", 2000); }

TEST(LoraKeys, SDXLMatchesComfyUI) { expect_same_map("keymap-tiny-sdxl.json", 2000); }

TEST(LoraKeys, SD2TextEncoderMatchesComfyUI) {
  expect_same_map_derived("keymap-tiny-sd2-clip.json", "sd2", 60);
}

TEST(LoraKeys, SDXLRefinerTextEncoderMatchesComfyUI) {
  expect_same_map_derived("keymap-tiny-refiner-clip.json", "sdxl", 60);
}

// Note [fp8 patches]: ComfyUI's model key of a patched weight is the component's comfy key prefix
// and the store's name ("diffusion_model." for the UNet, "clip_l.transformer." for CLIP-L in the
// HF layout; none for OpenCLIP, whose names ComfyUI converts), as ComfyUI's key maps say.
TEST(LoraKeys, ComfyKeysOfTheStores) {
  for (const char* file : {"keymap-tiny-sd1.json", "keymap-tiny-sdxl.json"}) {
    const json g = read_json(test::data_path(std::string("lora/") + file));
    Loaded l = load_path(test::data_path(g["checkpoint"]));
    ASSERT_TRUE(l.model && l.text);
    const CheckpointInfo& info = l.model->info;
    int compared = 0;
    for (const auto& [part, clip] : {std::pair{"unet", false}, std::pair{"clip", true}})
      for (const auto& [stem, t] : g[part].items()) {
        if (!left_out_reason(t).empty() || !t["offset"].is_null()) continue;
        const LoraTarget e = expected_target(t, info, clip);
        const std::string prefix =
            clip ? l.text->comfy_key_prefix(size_t(e.encoder)) : std::string("diffusion_model.");
        if (prefix.empty()) continue;  // OpenCLIP: ComfyUI's names are converted
        EXPECT_EQ(prefix + e.weight, t["comfy_key"].get<std::string>()) << file << " " << stem;
        ++compared;
      }
    EXPECT_GT(compared, 100) << file;
  }
}

// A few stems by hand, in case both sides drift together: kohya LDM and diffusers forms of one
// UNet weight, diffusers' processor form, bigG's k_proj as the middle third of in_proj_weight.
TEST(LoraKeys, SDXLSpotChecks) {
  Loaded l = load("tiny-sdxl.safetensors");
  ASSERT_TRUE(l.model && l.text);
  auto map = sd_lora_keys(l.model->diffusion.get(), l.text.get());
  ASSERT_TRUE(map.ok()) << map.status().str();
  const LoraTarget q{LoraComponent::DIFFUSION, 0,
                     "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight", -1, 0};
  ASSERT_TRUE(map->count("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q"));
  EXPECT_EQ(map->at("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q"), q);
  ASSERT_TRUE(map->count("unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.processor.to_q"));
  EXPECT_EQ(map->at("unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.processor.to_q"), q);
  ASSERT_TRUE(map->count("lora_te2_text_model_encoder_layers_1_self_attn_k_proj"));
  const LoraTarget& k = map->at("lora_te2_text_model_encoder_layers_1_self_attn_k_proj");
  EXPECT_EQ(k.component, LoraComponent::TEXT_ENCODER);
  EXPECT_EQ(k.encoder, 1);
  EXPECT_EQ(k.weight, "transformer.resblocks.1.attn.in_proj_weight");
  const HostTensor* w = dynamic_cast<const SDTextEncoder*>(l.text.get())
                            ->encoders()[1].weights->find(k.weight);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(k.rows * 3, w->shape()[0]);
  EXPECT_EQ(k.row_offset, k.rows);
}

// Only the components given are mapped (LoraLoaderModelOnly; a CLIP-only file).
TEST(LoraKeys, MapsOnlyTheComponentsGiven) {
  Loaded l = load("tiny-sd1.safetensors");
  ASSERT_TRUE(l.model && l.text);
  auto both = sd_lora_keys(l.model->diffusion.get(), l.text.get());
  auto unet = sd_lora_keys(l.model->diffusion.get(), nullptr);
  auto text = sd_lora_keys(nullptr, l.text.get());
  auto none = sd_lora_keys(nullptr, nullptr);
  ASSERT_TRUE(both.ok() && unet.ok() && text.ok() && none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(unet->empty());
  EXPECT_FALSE(text->empty());
  EXPECT_EQ(unet->size() + text->size(), both->size());
  for (const auto& [stem, t] : *unet) EXPECT_EQ(t.component, LoraComponent::DIFFUSION) << stem;
  for (const auto& [stem, t] : *text) EXPECT_EQ(t.component, LoraComponent::TEXT_ENCODER) << stem;
}

// A text encoder that is not the SD one (another family's component).
class OtherTextEncoder final : public TextEncoder {
 public:
  explicit OtherTextEncoder(const ModelFamily& f) : family_(&f) {}
  const ModelFamily& family() const override { return *family_; }
  std::vector<std::string> parts() const override { return {"t5"}; }
  std::vector<std::shared_ptr<WeightSet>> stores() const override { return {}; }
  Result<CondEntry> encode(Executor&, const std::map<std::string, std::string>&, int,
                           const EncoderSources&) const override {
    return make_error(ErrorCode::UNSUPPORTED, "not used");
  }

 private:
  const ModelFamily* family_;
};

// A family that declares no key map has none (the loader refuses its models), and the SD map
// refuses another family's component instead of guessing.
TEST(LoraKeys, FamilyWithoutKeyMap) {
  for (const char* name : {"sd1", "sd2", "sdxl"}) {
    const ModelFamily* f = model_family_find(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->lora_keys, &sd_lora_keys) << name;
  }
  ModelFamily bare;
  bare.name = "lora-keys-test-bare";
  bare.display_name = "Bare";
  bare.detect = [](const SafetensorsFile&) { return std::optional<FamilyMatch>{}; };
  ASSERT_TRUE(model_family_register(bare).ok());
  const ModelFamily* found = model_family_find(bare.name);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->lora_keys, nullptr);

  OtherTextEncoder other(*found);
  auto m = sd_lora_keys(nullptr, &other);
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(m.status().message().find(bare.name), std::string::npos) << m.status().str();
  model_family_unregister(bare.name);
}

}  // namespace
}  // namespace hr
