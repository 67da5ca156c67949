// The diffusers <-> LDM name correspondence of the SD UNet, from the block layout of its config.
#include "models/sd/unet_diffusers_names.h"

#include <array>
#include <utility>

#include <fmt/format.h>

namespace hr {
namespace {

using Names = std::vector<UNetNamePair>;
using Rename = std::pair<const char*, const char*>;  // LDM suffix, diffusers suffix

// A ResBlock's layers (LDM, diffusers); each has a weight and a bias.
constexpr std::array<Rename, 6> kResBlock = {{
    {"in_layers.0", "norm1"},
    {"in_layers.2", "conv1"},
    {"emb_layers.1", "time_emb_proj"},
    {"out_layers.0", "norm2"},
    {"out_layers.3", "conv2"},
    {"skip_connection", "conv_shortcut"},
}};

// A SpatialTransformer's own layers and those of each of its transformer blocks: the same names
// on both sides. The attention projections q/k/v have no bias.
constexpr std::array<const char*, 6> kTransformer = {
    "proj_in.weight", "proj_in.bias", "proj_out.weight", "proj_out.bias", "norm.weight", "norm.bias"};
constexpr std::array<const char*, 20> kTransformerBlock = {
    "norm1.weight",        "norm1.bias",          "norm2.weight",        "norm2.bias",
    "norm3.weight",        "norm3.bias",          "attn1.to_q.weight",   "attn1.to_k.weight",
    "attn1.to_v.weight",   "attn1.to_out.0.weight", "attn1.to_out.0.bias", "attn2.to_q.weight",
    "attn2.to_k.weight",   "attn2.to_v.weight",   "attn2.to_out.0.weight", "attn2.to_out.0.bias",
    "ff.net.0.proj.weight", "ff.net.0.proj.bias", "ff.net.2.weight",     "ff.net.2.bias"};

// The layers outside the blocks (LDM, diffusers). SDXL's label embedding has two diffusers
// names (ComfyUI maps both).
constexpr std::array<Rename, 9> kOuter = {{
    {"label_emb.0.0", "class_embedding.linear_1"},
    {"label_emb.0.2", "class_embedding.linear_2"},
    {"label_emb.0.0", "add_embedding.linear_1"},
    {"label_emb.0.2", "add_embedding.linear_2"},
    {"input_blocks.0.0", "conv_in"},
    {"out.0", "conv_norm_out"},
    {"out.2", "conv_out"},
    {"time_embed.0", "time_embedding.linear_1"},
    {"time_embed.2", "time_embedding.linear_2"},
}};

constexpr std::array<const char*, 2> kParams = {"weight", "bias"};

int depth_at(const std::vector<int>& depths, size_t i) {
  return i < depths.size() ? depths[i] : 0;
}

void resblock_names(Names& out, const std::string& diffusers, const std::string& ldm) {
  for (const Rename& r : kResBlock)
    for (const char* p : kParams)
      out.push_back({fmt::format("{}.{}.{}", diffusers, r.second, p),
                     fmt::format("{}.{}.{}", ldm, r.first, p)});
}

// A SpatialTransformer of `depth` blocks; the reference names its own layers even at depth 0
// (the middle block), which no model has.
void transformer_names(Names& out, const std::string& diffusers, const std::string& ldm,
                       int depth) {
  for (const char* b : kTransformer)
    out.push_back({fmt::format("{}.{}", diffusers, b), fmt::format("{}.{}", ldm, b)});
  for (int t = 0; t < depth; ++t)
    for (const char* b : kTransformerBlock)
      out.push_back({fmt::format("{}.transformer_blocks.{}.{}", diffusers, t, b),
                     fmt::format("{}.transformer_blocks.{}.{}", ldm, t, b)});
}

// Note [unet block numbering]
// input_blocks.0 is conv_in; each level then has num_res_blocks ResBlocks (each followed by a
// SpatialTransformer when its transformer_depth entry is > 0) and, but for ComfyUI's map also
// on the last level, a downsampler in a block of its own. output_blocks run deepest level
// first, num_res_blocks + 1 per level, the last of a level ending in the upsampler (at index
// 1 or 2 within the block, after the optional transformer). The reference computes a level's
// first block as 1 + (num_res_blocks + 1) * level, which assumes the same count on every level
// (true of every SD model); counting the blocks as they come gives the same numbers then and
// the right ones otherwise.
void input_names(Names& out, const UNetConfig& cfg) {
  int n = 1;
  size_t res = 0;
  for (int x = 0; x < cfg.levels(); ++x) {
    for (int i = 0; i < cfg.num_res_blocks[x]; ++i, ++n, ++res) {
      resblock_names(out, fmt::format("down_blocks.{}.resnets.{}", x, i),
                     fmt::format("input_blocks.{}.0", n));
      if (int depth = depth_at(cfg.transformer_depth, res); depth > 0)
        transformer_names(out, fmt::format("down_blocks.{}.attentions.{}", x, i),
                          fmt::format("input_blocks.{}.1", n), depth);
    }
    for (const char* p : kParams)
      out.push_back({fmt::format("down_blocks.{}.downsamplers.0.conv.{}", x, p),
                     fmt::format("input_blocks.{}.0.op.{}", n, p)});
    ++n;
  }
}

void middle_names(Names& out, const UNetConfig& cfg) {
  transformer_names(out, "mid_block.attentions.0", "middle_block.1",
                    cfg.transformer_depth_middle);
  resblock_names(out, "mid_block.resnets.0", "middle_block.0");
  resblock_names(out, "mid_block.resnets.1", "middle_block.2");
}

void output_names(Names& out, const UNetConfig& cfg) {
  const size_t total = cfg.transformer_depth_output.size();
  int n = 0;
  for (int x = 0; x < cfg.levels(); ++x) {
    const int blocks = cfg.num_res_blocks[cfg.levels() - 1 - x] + 1;
    for (int i = 0; i < blocks; ++i, ++n) {
      resblock_names(out, fmt::format("up_blocks.{}.resnets.{}", x, i),
                     fmt::format("output_blocks.{}.0", n));
      int upsampler_at = 1;
      // transformer_depth_output is shallowest first (UNetConfig): block n is entry total-1-n.
      int depth = size_t(n) < total ? cfg.transformer_depth_output[total - 1 - n] : 0;
      if (depth > 0) {
        upsampler_at = 2;
        transformer_names(out, fmt::format("up_blocks.{}.attentions.{}", x, i),
                          fmt::format("output_blocks.{}.1", n), depth);
      }
      if (i == blocks - 1)
        for (const char* p : kParams)
          out.push_back({fmt::format("up_blocks.{}.upsamplers.0.conv.{}", x, p),
                         fmt::format("output_blocks.{}.{}.conv.{}", n, upsampler_at, p)});
    }
  }
}

}  // namespace

std::vector<UNetNamePair> unet_diffusers_names(const UNetConfig& cfg) {
  Names out;
  input_names(out, cfg);
  middle_names(out, cfg);
  output_names(out, cfg);
  for (const Rename& r : kOuter)
    for (const char* p : kParams)
      out.push_back({fmt::format("{}.{}", r.second, p), fmt::format("{}.{}", r.first, p)});
  return out;
}

}  // namespace hr
