// make-model: configurations per (arch, size) and the random initialisation.
#include "models/make_model.h"

#include <cmath>
#include <map>
#include <random>

#include "models/clip_tokenizer.h"
#include "models/safetensors.h"

namespace hr {

namespace {

// A text encoder's size: width, layers, heads and MLP width.
void clip_size(CLIPTextConfig& c, int width, int layers, int heads, int mlp) {
  c.width = width;
  c.layers = layers;
  c.heads = heads;
  c.mlp = mlp;
}

// Note [refiner layout]
// The SDXL refiner (ComfyUI's SDXLRefiner): OpenCLIP bigG is its only text encoder, stored at
// conditioner.embedders.0; its UNet has 384 model channels over four levels, transformers of
// depth 4 in the middle two levels and the middle block, a bigG context (1280) and an adm input
// of the pooled output plus five size embeddings (2560 = 1280 + 5 * 256). The tiny one keeps
// the tiny SDXL's shapes with five embeddings of 8 (adm 32 + 40).
void refiner_shape(MakeModelConfig& c, bool tiny) {
  c.has_clip1 = false;
  c.has_clip2 = true;
  if (tiny) {
    c.unet.context_dim = c.clip2.width;
    c.unet.adm_in_channels = int(c.clip2.projection_dim) + 5 * 8;
    return;
  }
  c.unet.model_channels = 384;
  c.unet.time_embed_dim = 4 * 384;
  c.unet.channel_mult = {1, 2, 4, 4};
  c.unet.num_res_blocks = {2, 2, 2, 2};
  c.unet.transformer_depth = {0, 0, 4, 4, 4, 4, 0, 0};
  c.unet.transformer_depth_middle = 4;
  c.unet.transformer_depth_output = {0, 0, 0, 4, 4, 4, 4, 4, 4, 0, 0, 0};
  c.unet.context_dim = 1280;
  c.unet.adm_in_channels = 2560;
}

}  // namespace

Result<MakeModelConfig> make_model_config(const MakeModelSpec& spec) {
  MakeModelConfig c;
  bool tiny = spec.size == ModelSize::TINY;
  if (spec.arch == "sd1") {
    c.unet = unet_config_sd15();
    c.vae = vae_config_sd();
    c.clip = CLIPTextConfig{};  // CLIP-L: width 768, 12 layers, 12 heads, MLP 3072, quick_gelu
    if (tiny) {
      // The golden tiny-sd1 shapes (see ../shared/golden/README.md).
      c.unet.model_channels = 32;
      c.unet.channel_mult = {1, 2, 2, 2};
      c.unet.context_dim = 32;
      c.unet.time_embed_dim = 128;
      clip_size(c.clip, 32, 2, 4, 64);
    }
  } else if (spec.arch == "sd2") {
    c.unet = unet_config_sd2();
    c.vae = vae_config_sd();
    c.clip.layout = CLIPLayout::OPEN_CLIP;
    clip_size(c.clip, 1024, 24, 16, 4096);
    c.clip.activation = CLIPActivation::GELU;
    c.clip.has_projection = true;
    c.clip.projection_dim = 1024;
    if (tiny) {
      c.unet.model_channels = 32;
      c.unet.channel_mult = {1, 2, 2, 2};
      c.unet.context_dim = 64;
      c.unet.time_embed_dim = 128;
      c.unet.num_heads = -1;
      c.unet.num_head_channels = 16;
      clip_size(c.clip, 64, 3, 4, 128);
      c.clip.projection_dim = 64;
    }
  } else if (spec.arch == "sdxl" || spec.arch == "sdxl-refiner") {
    c.unet = unet_config_sdxl();
    c.vae = vae_config_sd();
    c.clip = CLIPTextConfig{};
    c.has_clip2 = true;
    c.clip2.layout = CLIPLayout::OPEN_CLIP;
    clip_size(c.clip2, 1280, 32, 20, 5120);
    c.clip2.activation = CLIPActivation::GELU;
    c.clip2.has_projection = true;
    c.clip2.projection_dim = 1280;
    if (tiny) {
      // The golden tiny-sdxl shapes.
      c.unet.model_channels = 32;
      c.unet.channel_mult = {1, 2, 2};
      c.unet.num_res_blocks = {2, 2, 2};
      c.unet.transformer_depth = {0, 0, 1, 1, 2, 2};
      c.unet.transformer_depth_middle = 2;
      c.unet.transformer_depth_output = {0, 0, 0, 1, 1, 1, 2, 2, 2};
      c.unet.context_dim = 64;
      c.unet.adm_in_channels = 80;
      c.unet.time_embed_dim = 128;
      c.unet.num_heads = -1;
      c.unet.num_head_channels = 32;
      clip_size(c.clip, 32, 3, 4, 64);
      clip_size(c.clip2, 32, 3, 4, 128);
      c.clip2.projection_dim = 32;
    }
    if (spec.arch == "sdxl-refiner") refiner_shape(c, tiny);
  } else {
    return make_error(ErrorCode::INVALID_ARGUMENT, "make-model: unknown arch '{}' (sd1, sd2, sdxl, sdxl-refiner)",
                      spec.arch);
  }
  if (tiny) {
    c.vae.ch = 32;
    c.vae.ch_mult = {1, 2, 2, 2};
  }
  c.clip.dtype = DType::F32;
  c.clip2.dtype = DType::F32;
  return c;
}

namespace {

Result<uint64_t> make_model_file_write(const MakeModelSpec& spec, const MakeModelConfig& c,
                                       const std::map<std::string, Shape>& shapes,
                                       const std::string& path, const std::string& clip_prefix);

void collect(const Graph& g, const std::string& prefix, std::map<std::string, Shape>& out) {
  for (const Value& v : g.values())
    if (v.kind == ValueKind::WEIGHT) out[prefix + v.name] = v.desc.shape;
}

bool is_norm_scale(const std::string& name, const Shape& s) {
  return s.rank == 1 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

void random_fill(const std::string& name, HostTensor& t, std::mt19937_64& rng) {
  const Shape& shape = t.shape();
  float* p = t.f32();
  const int64_t n = t.numel();
  float mean = 0.0f, sd = 0.1f;  // biases and other vectors
  if (is_norm_scale(name, shape)) {
    mean = 1.0f;
  } else if (shape.rank > 1) {
    sd = 1.0f / std::sqrt(float(n / shape[0]));
    if (name.find("text_projection") != std::string::npos) sd = 1.0f / std::sqrt(float(shape[0]));
  }
  const uint64_t seed = rng();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) p[i] = mean + sd * make_model_normal_at(seed, uint64_t(i));
}

}  // namespace

float make_model_normal_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64 of the counter
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  float sum = 0;  // Irwin-Hall of four 16-bit uniforms, scaled to unit variance
  for (int k = 0; k < 4; ++k) sum += float((z >> (16 * k)) & 0xFFFF) * (1.0f / 65536.0f);
  return (sum - 2.0f) * 1.7320508f;
}

void make_model_random_fill(const std::string& name, HostTensor& t, std::mt19937_64& rng) {
  random_fill(name, t, rng);
}

void make_model_random_weights(const Graph& g, uint64_t seed, WeightSet& out) {
  std::mt19937_64 rng(seed);
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::WEIGHT || out.contains(v.name)) continue;
    HostTensor t(DType::F32, v.desc.shape);
    random_fill(v.name, t, rng);
    out.put(v.name, v.desc.dtype == DType::F32 ? std::move(t) : t.to(v.desc.dtype));
  }
}

namespace {

// The SDXL refiner's text side as a checkpoint key layout: OpenCLIP bigG alone, at
// conditioner.embedders.0 (Note [refiner layout]).
void refiner_clip_collect(const MakeModelConfig& c, const CLIPTextGraph& g,
                          std::map<std::string, Shape>& shapes) {
  collect(g.graph, "conditioner.embedders.0.model.", shapes);
  shapes["conditioner.embedders.0.model.text_projection"] = Shape{c.clip2.width, c.clip2.projection_dim};
}

}  // namespace

Result<uint64_t> make_model_write(const MakeModelSpec& spec, const std::string& path) {
  HR_ASSIGN_OR_RETURN(MakeModelConfig c, make_model_config(spec));
  std::map<std::string, Shape> shapes;
  HR_ASSIGN_OR_RETURN(Graph unet, unet_graph(c.unet, 1, 8, 8, 77, DType::F32));
  collect(unet, "model.diffusion_model.", shapes);
  int64_t px = 8 * c.vae.downscale();
  HR_ASSIGN_OR_RETURN(Graph dec, vae_decode_graph(c.vae, 1, 8, 8, DType::F32));
  HR_ASSIGN_OR_RETURN(Graph enc, vae_encode_graph(c.vae, 1, px, px, DType::F32));
  collect(dec, "first_stage_model.", shapes);
  collect(enc, "first_stage_model.", shapes);
  CLIPTextGraphOptions co;
  co.last_hidden_state = true;
  if (!c.has_clip1) {
    HR_ASSIGN_OR_RETURN(CLIPTextGraph clip2, clip_text_graph(c.clip2, co));
    refiner_clip_collect(c, clip2, shapes);
    return make_model_file_write(spec, c, shapes, path, "");
  }
  HR_ASSIGN_OR_RETURN(CLIPTextGraph clip, clip_text_graph(c.clip, co));
  std::string clip_prefix = c.has_clip2 ? "conditioner.embedders.0.transformer."
                            : c.clip.layout == CLIPLayout::HF ? "cond_stage_model.transformer."
                                                              : "cond_stage_model.model.";
  collect(clip.graph, clip_prefix, shapes);
  if (c.clip.has_projection)
    shapes[clip_prefix + "text_projection"] = Shape{c.clip.width, c.clip.projection_dim};
  if (c.has_clip2) {
    HR_ASSIGN_OR_RETURN(CLIPTextGraph clip2, clip_text_graph(c.clip2, co));
    collect(clip2.graph, "conditioner.embedders.1.model.", shapes);
    shapes["conditioner.embedders.1.model.text_projection"] = Shape{c.clip2.width, c.clip2.projection_dim};
  }
  return make_model_file_write(spec, c, shapes, path, clip_prefix);
}

namespace {

// Random weights for `shapes` written to `path` with headroom's metadata; clip_prefix is the
// first encoder's (empty when it has none).
Result<uint64_t> make_model_file_write(const MakeModelSpec& spec, const MakeModelConfig& c,
                                       const std::map<std::string, Shape>& shapes,
                                       const std::string& path, const std::string& clip_prefix) {
  // Note [random init]: the golden recipe: matrices, kernels and embeddings N(0, 1/fan_in)
  // (fan_in = elements of one output row), norm scales 1 + 0.1 N(0, 1), biases 0.1 N(0, 1).
  std::mt19937_64 rng(spec.seed);
  std::vector<HostTensor> tensors;
  std::vector<std::pair<std::string, const HostTensor*>> list;
  tensors.reserve(shapes.size() + 1);
  uint64_t params = 0;
  for (const auto& [name, shape] : shapes) {
    HostTensor t(DType::F32, shape);
    random_fill(name, t, rng);
    int64_t n = t.numel();
    params += uint64_t(n);
    tensors.push_back(t.to(spec.dtype));
  }
  size_t i = 0;
  for (const auto& [name, shape] : shapes) list.emplace_back(name, &tensors[i++]);
  HostTensor pos_ids(DType::I64, Shape{1, c.clip.positions});
  if (c.has_clip1 && c.clip.layout == CLIPLayout::HF) {
    for (int64_t k = 0; k < c.clip.positions; ++k) static_cast<int64_t*>(pos_ids.data())[k] = k;
    list.emplace_back(clip_prefix + "text_model.embeddings.position_ids", &pos_ids);
  }
  std::map<std::string, std::string> meta = {
      {kCheckpointTokenizerKey, "byte"},
      {"headroom.arch", spec.arch + (spec.size == ModelSize::TINY ? "-tiny" : "-full")},
      {"headroom.seed", std::to_string(spec.seed)},
      {"headroom.clip.heads", !c.has_clip1 ? fmt::format("{}", c.clip2.heads)
                              : c.has_clip2 ? fmt::format("{},{}", c.clip.heads, c.clip2.heads)
                                            : fmt::format("{}", c.clip.heads)},
  };
  if (c.unet.num_heads > 0) meta["headroom.unet.num_heads"] = std::to_string(c.unet.num_heads);
  else meta["headroom.unet.num_head_channels"] = std::to_string(c.unet.num_head_channels);
  HR_TRY(safetensors_write(path, list, meta));
  return params;
}

}  // namespace

}  // namespace hr
