// make-model for Flux.1: the component configurations, their tensor lists (from the graphs that
// read them), the random initialisation and the streamed writing of the five files.
#include "models/flux/flux_make_model.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "models/safetensors.h"

namespace hr {

namespace {

// Note [tiny flux]
// The tiny DiT keeps Flux's head width (2 heads of 128) so that ComfyUI's fixed RoPE axes
// 16/56/56 fit it, as they must for ComfyUI to load the file; one block of each kind. Its text
// widths are the tiny encoders' (T5 d_model 32, CLIP width 64) with the real vocabularies, so the
// shipped tokenizers drive them. The tiny autoencoder keeps the 16-channel, no-quant-conv layout
// at 32 base channels, widths 1, 2, 2, 2.
FluxConfig flux_dit_tiny() {
  FluxConfig c;
  c.hidden_size = 256;
  c.num_heads = 2;
  c.depth = 1;
  c.depth_single_blocks = 1;
  c.context_in_dim = 32;
  c.vec_in_dim = 64;
  return c;
}

// BFL's ae.safetensors: the LDM AutoencoderKL with z_channels 16 and no quant convs
// (comfy/sd.py VAE for Flux: ddconfig z_channels 16, double_z, ch 128, ch_mult 1,2,4,4).
VAEConfig flux_vae_config() {
  VAEConfig v;
  v.z_channels = 16;
  v.embed_dim = 16;
  v.use_quant_conv = false;
  return v;
}

}  // namespace

FluxMakeConfig flux_make_config(ModelSize size) {
  FluxMakeConfig c;
  c.dit = flux_config_dev();
  c.t5 = T5Config{};          // T5 v1.1 XXL encoder
  c.clip = CLIPTextConfig{};  // CLIP-L text model, HF layout
  c.vae = flux_vae_config();
  if (size == ModelSize::TINY) {
    c.dit = flux_dit_tiny();
    c.t5.d_model = 32;
    c.t5.d_kv = 8;
    c.t5.heads = 4;
    c.t5.d_ff = 64;
    c.t5.layers = 2;
    c.clip.width = 64;  // width / 64 heads, the rule that reads CLIP-L's 12 from its tensors
    c.clip.layers = 2;
    c.clip.heads = 1;
    c.clip.mlp = 128;
    c.vae.ch = 32;
    c.vae.ch_mult = {1, 2, 2, 2};  // make-model's tiny SD VAE widths
  }
  return c;
}

namespace {

// One tensor to write: its file name, the component and name that seed it, and its init.
enum class Init : uint8_t { MATRIX, SCALE, BIAS, POSITION_IDS };
struct Planned {
  SafetensorsPlanned file;
  std::string component;  // "dit", "t5", "clip", "vae"
  std::string name;       // without the file's prefix
  Init init = Init::MATRIX;
};

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Init init_of(const std::string& name, const Shape& s) {
  if (s.rank <= 1 && (ends_with(name, ".scale") || ends_with(name, ".weight"))) return Init::SCALE;
  if (s.rank <= 1) return Init::BIAS;
  return Init::MATRIX;
}

void collect(const Graph& g, const std::string& component, DType dtype,
             std::map<std::string, Planned>& out) {
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::WEIGHT) continue;
    Planned p{{v.name, dtype, v.desc.shape}, component, v.name, init_of(v.name, v.desc.shape)};
    out.emplace(v.name, std::move(p));
  }
}

struct Component {
  std::string name;
  std::map<std::string, Planned> tensors;
};

Result<std::vector<Component>> components_plan(const FluxMakeConfig& c) {
  std::vector<Component> out(4);
  out[0].name = "dit";
  HR_ASSIGN_OR_RETURN(Graph dit, flux_dit_graph(c.dit, 1, 1, 1, 1, DType::F32));
  collect(dit, "dit", DType::BF16, out[0].tensors);
  out[1].name = "t5";
  HR_ASSIGN_OR_RETURN(Graph t5, t5_encoder_graph(c.t5, 1, 2, DType::F32));
  collect(t5, "t5", DType::F16, out[1].tensors);
  out[2].name = "clip";
  CLIPTextGraphOptions co;
  co.last_hidden_state = true;
  HR_ASSIGN_OR_RETURN(CLIPTextGraph clip, clip_text_graph(c.clip, co));
  collect(clip.graph, "clip", DType::F16, out[2].tensors);
  // HF's CLIPTextModel state dict holds its position ids (int64 0..76), as ComfyUI's files do.
  const std::string pos = "text_model.embeddings.position_ids";
  out[2].tensors[pos] =
      Planned{{pos, DType::I64, Shape{1, c.clip.positions}}, "clip", pos, Init::POSITION_IDS};
  out[3].name = "vae";
  const int64_t px = 8 * c.vae.downscale();
  HR_ASSIGN_OR_RETURN(Graph dec, vae_decode_graph(c.vae, 1, 8, 8, DType::F32));
  HR_ASSIGN_OR_RETURN(Graph enc, vae_encode_graph(c.vae, 1, px, px, DType::F32));
  collect(dec, "vae", DType::F32, out[3].tensors);
  collect(enc, "vae", DType::F32, out[3].tensors);
  return out;
}

// Note [flux random init]
// Full-size files hold 17 B values, so the generator is cheap and parallel: splitmix64 on a
// counter (make_model_normal_at, also make-model's and the benchmarks' draw), seeded by the seed and a hash of (component, name), each draw the sum of four 16-bit
// uniforms (Irwin-Hall, scaled to unit variance), close enough to normal for random weights. The
// scales are make-model's (Note [random init]): matrices and embeddings N(0, 1/fan_in), norm scales
// 1 + 0.1 N, biases 0.1 N, so activations stay O(1) through the blocks and outputs finite in
// bf16/f16. A tensor's values depend only on its seed, so the checkpoint's copy equals the
// component file's.
uint64_t name_seed(uint64_t seed, const Planned& p) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char ch : p.component + "/" + p.name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

constexpr int64_t kChunk = int64_t(1) << 22;  // values per piece (16 MiB as f32)

Status tensor_fill(const Planned& p, uint64_t seed, const SafetensorsSink& write) {
  const Shape& s = p.file.shape;
  const int64_t n = s.numel();
  if (p.init == Init::POSITION_IDS) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
    return write(ids.data(), ids.size() * sizeof(int64_t));
  }
  const uint64_t tensor_seed = name_seed(seed, p);
  const float sd = p.init == Init::MATRIX ? 1.0f / std::sqrt(float(n / s[0])) : 0.1f;
  const float mean = p.init == Init::SCALE ? 1.0f : 0.0f;
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    HostTensor chunk(DType::F32, Shape{m});
    float* out = chunk.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) out[i] = mean + sd * make_model_normal_at(tensor_seed, uint64_t(at + i));
    if (p.file.dtype == DType::F32) {
      HR_TRY(write(chunk.data(), chunk.bytes()));
    } else {
      HostTensor c = chunk.to(p.file.dtype);
      HR_TRY(write(c.data(), c.bytes()));
    }
  }
  return Status();
}

Result<FluxMadeFile> file_write(const std::string& path,
                                const std::vector<std::pair<std::string, const Component*>>& parts,
                                const MakeModelSpec& spec) {
  std::vector<SafetensorsPlanned> list;
  std::map<std::string, const Planned*> by_name;
  FluxMadeFile made{path, 0, 0};
  for (const auto& [prefix, comp] : parts)
    for (const auto& [name, p] : comp->tensors) {
      SafetensorsPlanned f = p.file;
      f.name = prefix + name;
      by_name[f.name] = &p;
      made.params += uint64_t(f.shape.numel());
      made.bytes += TensorDesc{f.dtype, f.shape}.bytes();
      list.push_back(std::move(f));
    }
  const std::map<std::string, std::string> meta = {
      {"headroom.arch", fmt::format("flux-dev-{}", spec.size == ModelSize::TINY ? "tiny" : "full")},
      {"headroom.seed", std::to_string(spec.seed)}};
  const uint64_t seed = spec.seed;
  HR_TRY(safetensors_write_streamed(
      path, std::move(list), meta,
      [&by_name, seed](const SafetensorsPlanned& f, const SafetensorsSink& write) {
        return tensor_fill(*by_name.at(f.name), seed, write);
      }));
  return made;
}

}  // namespace

Result<std::vector<FluxMadeFile>> flux_make_model_write(const MakeModelSpec& spec,
                                                        const std::string& out_dir,
                                                        bool checkpoint) {
  namespace fs = std::filesystem;
  const FluxMakeConfig cfg = flux_make_config(spec.size);
  HR_ASSIGN_OR_RETURN(std::vector<Component> comps, components_plan(cfg));
  const Component &dit = comps[0], &t5 = comps[1], &clip = comps[2], &vae = comps[3];
  const fs::path root(out_dir);
  for (const char* d : {"diffusion_models", "text_encoders", "vae", "checkpoints"}) {
    if (!checkpoint && std::string_view(d) == "checkpoints") continue;
    std::error_code ec;
    fs::create_directories(root / d, ec);
    if (ec)
      return make_error(ErrorCode::IO, "make-model: cannot create '{}': {}", (root / d).string(),
                        ec.message());
  }
  // Each file with the prefixes ComfyUI reads it under (Note [flux variants] in flux_family.cpp).
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, const Component*>>>>
      files = {
          {"diffusion_models/flux1-dev.safetensors", {{"", &dit}}},
          {"text_encoders/t5xxl_fp16.safetensors", {{"", &t5}}},
          {"text_encoders/clip_l.safetensors", {{"", &clip}}},
          {"vae/ae.safetensors", {{"", &vae}}},
          {"checkpoints/flux1-dev-all.safetensors",
           {{"model.diffusion_model.", &dit},
            {"text_encoders.t5xxl.transformer.", &t5},
            {"text_encoders.clip_l.transformer.", &clip},
            {"vae.", &vae}}},
      };
  std::vector<FluxMadeFile> out;
  for (const auto& [name, parts] : files) {
    if (!checkpoint && parts.size() > 1) continue;  // the single-file checkpoint
    HR_ASSIGN_OR_RETURN(FluxMadeFile f, file_write((root / name).string(), parts, spec));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hr
