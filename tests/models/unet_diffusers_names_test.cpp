// unet_diffusers_names against ComfyUI's unet_to_diffusers on the full-size UNet layouts (SD1.5,
// SDXL, SDXL refiner): tests/data/lora/unet-diffusers-names.json, made by make_keymap_variants.py.
#include "models/sd/unet_diffusers_names.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace hr {
namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

TEST(UNetDiffusersNames, FullSizeLayoutsMatchComfyUI) {
  std::ifstream in(test::data_path("lora/unet-diffusers-names.json"));
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  ASSERT_EQ(g.size(), 3u);
  for (const auto& [name, want] : g.items()) {
    const nlohmann::json& c = want["config"];
    UNetConfig cfg;
    cfg.num_res_blocks = c["num_res_blocks"].get<std::vector<int>>();
    cfg.channel_mult = c["channel_mult"].get<std::vector<int>>();
    cfg.transformer_depth = c["transformer_depth"].get<std::vector<int>>();
    cfg.transformer_depth_middle = c["transformer_depth_middle"];
    cfg.transformer_depth_output = c["transformer_depth_output"].get<std::vector<int>>();
    // The reference's map is a dict: a repeated diffusers name keeps its last LDM name.
    std::map<std::string, std::string> pairs;
    for (const UNetNamePair& p : unet_diffusers_names(cfg)) pairs[p.diffusers] = p.ldm;
    std::string text;
    for (const auto& [d, l] : pairs) text += d + " " + l + "\n";
    EXPECT_EQ(pairs.size(), size_t(want["count"])) << name;
    EXPECT_EQ(fmt::format("{:016x}", fnv1a64(text)), std::string(want["fnv1a64"])) << name;
  }
}

// The numbering by hand for SDXL's deepest level: input block 7 is level 2's first ResBlock
// with a 10-block transformer; output block 2 ends level 0 of the up path with its upsampler
// behind the transformer (index 2).
TEST(UNetDiffusersNames, SDXLSpotChecks) {
  std::map<std::string, std::string> pairs;
  for (const UNetNamePair& p : unet_diffusers_names(unet_config_sdxl())) pairs[p.diffusers] = p.ldm;
  EXPECT_EQ(pairs["down_blocks.2.attentions.0.transformer_blocks.9.attn2.to_k.weight"],
            "input_blocks.7.1.transformer_blocks.9.attn2.to_k.weight");
  EXPECT_EQ(pairs["down_blocks.1.downsamplers.0.conv.weight"], "input_blocks.6.0.op.weight");
  EXPECT_EQ(pairs["up_blocks.0.upsamplers.0.conv.weight"], "output_blocks.2.2.conv.weight");
  EXPECT_EQ(pairs["up_blocks.2.resnets.2.conv_shortcut.weight"],
            "output_blocks.8.0.skip_connection.weight");
  EXPECT_EQ(pairs["add_embedding.linear_2.bias"], "label_emb.0.2.bias");
  EXPECT_EQ(pairs.count("down_blocks.0.attentions.0.proj_in.weight"), 0u);
}

}  // namespace
}  // namespace hr
