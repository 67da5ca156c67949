// The Flux.1 DiT (models/flux/flux_dit.h) on the CPU against ComfyUI's own Flux.forward_orig on a
// tiny random configuration (tests/data/flux/dit_golden.safetensors, made by make_dit_golden.py
// there): configuration detection, the graph's output, patchify and the position table, and
// the refusal of a file with a tensor missing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "memory/executor_policies.h"
#include "memory/weight_set.h"
#include "models/flux/flux_dit.h"
#include "models/flux/flux_tokens.h"
#include "models/rope_table.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
constexpr int64_t kTxt = 5, kHTok = 4, kWTok = 3;  // make_dit_golden.py: latent 8 x 6, 5 tokens
const std::vector<int> kAxes = {4, 6, 6};           // its axes_dim (head dim 16)

class FluxDitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = SafetensorsFile::open(test::data_path("flux/dit_golden.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status().str();
    file_ = std::move(f).value();
  }
  HostTensor get(const std::string& name) const {
    Result<HostTensor> t = file_->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }
  static bool same_bits(const HostTensor& a, const HostTensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
  }

  std::unique_ptr<SafetensorsFile> file_;
};

TEST_F(FluxDitTest, DetectsTheTinyConfig) {
  Result<FluxConfig> c = flux_config_detect(*file_, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_EQ(c->in_channels, 64);
  EXPECT_EQ(c->out_channels, 64);
  EXPECT_EQ(c->hidden_size, 32);
  EXPECT_EQ(c->num_heads, 2);
  EXPECT_EQ(c->mlp_ratio, 4.0f);
  EXPECT_EQ(c->depth, 2);
  EXPECT_EQ(c->depth_single_blocks, 1);
  EXPECT_EQ(c->context_in_dim, 24);
  EXPECT_EQ(c->vec_in_dim, 16);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->guidance_embed);
  EXPECT_TRUE(c->axes_dim.empty()) << "head dim 16 is not Flux's 128: " << c->str();
  EXPECT_EQ(c->theta, 10000.0);
}

TEST_F(FluxDitTest, PatchifyMatchesComfyAndRoundTrips) {
  HostTensor latent = get("golden.latent");
  Result<HostTensor> tokens = flux_patchify(latent);
  ASSERT_TRUE(tokens.ok()) << tokens.status().str();
  EXPECT_TRUE(same_bits(*tokens, get("golden.img")));
  Result<HostTensor> back = flux_unpatchify(*tokens, 16, 8, 6);
  ASSERT_TRUE(back.ok()) << back.status().str();
  EXPECT_TRUE(same_bits(*back, latent));
  EXPECT_FALSE(flux_unpatchify(*tokens, 16, 8, 8).ok());  // 16 tokens, not 12
  EXPECT_FALSE(flux_unpatchify(*tokens, 8, 8, 6).ok());   // wrong width
  HostTensor odd(DType::F32, Shape{1, 16, 7, 6});
  EXPECT_FALSE(flux_patchify(odd).ok());
}

TEST_F(FluxDitTest, PeTableIsTheTableOfComfysIds) {
  Result<HostTensor> pe = flux_pe_table(kTxt, kHTok, kWTok, kAxes, 10000.0);
  ASSERT_TRUE(pe.ok()) << pe.status().str();
  HostTensor ids = get("golden.ids");  // [L, 3] as Flux._forward makes them
  Result<HostTensor> want = rope_table_flux(std::span<const float>(ids.f32(), size_t(ids.numel())),
                                            kAxes, 10000.0);
  ASSERT_TRUE(want.ok()) << want.status().str();
  EXPECT_TRUE(same_bits(*pe, *want));
}

TEST_F(FluxDitTest, MatchesComfyFlux) {
  Result<FluxConfig> c = flux_config_detect(*file_, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  c->axes_dim = kAxes;
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, *file_, "", DType::F32).ok());
  HostTensor img = get("golden.img"), txt = get("golden.txt"), t = get("golden.timesteps");
  HostTensor y = get("golden.y"), guidance = get("golden.guidance"), ref = get("golden.out");
  Result<HostTensor> pe = flux_pe_table(kTxt, kHTok, kWTok, c->axes_dim, c->theta);
  ASSERT_TRUE(pe.ok()) << pe.status().str();
  Result<Graph> g = flux_dit_graph(*c, 2, kHTok, kWTok, kTxt, DType::F32);
  ASSERT_TRUE(g.ok()) << g.status().str();

  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  Executor ex(*cpu, alloc, executor_policies_default(*cpu));
  w.bind(cpu.get(), &alloc);
  HostInputs in = {{"img", &img}, {"txt", &txt}, {"timesteps", &t},
                   {"y", &y},     {"guidance", &guidance}, {"pe", &*pe}};
  // As built, and through the passes GPUs get (fusion, stacked projections; graph/passes.h).
  const char* kModes[] = {"", " (fused)", " (fused, stacked)", " (fused, stacked Q/K/V)"};
  for (int mode : {0, 1, 2, 3}) {
    ex.set_pass_options(mode == 0 ? std::nullopt
                                  : std::optional<PassOptions>(
                                        PassOptions{false, true, mode >= 2, mode == 3}));
    Result<std::vector<HostTensor>> out = ex.run(*g, in, w);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_EQ(out->size(), 1u);
    double err = test::rel_err((*out)[0], ref);
    std::printf("flux dit%s rel error %.3g\n", kModes[mode], err);
    EXPECT_LT(err, kRelTol);
  }
}

// Sample `i` of a batched f32 tensor, as a batch of one.
HostTensor sample_of(const HostTensor& t, int64_t i) {
  Shape s = t.shape();
  const int64_t n = t.numel() / s[0];
  s[0] = 1;
  HostTensor out(DType::F32, s);
  std::memcpy(out.f32(), t.f32() + i * n, size_t(n) * sizeof(float));
  return out;
}

// One sample at a time: the modulation folds into the LayerNorm's affine (Note [one-sample
// modulation] in flux_dit.cpp), and each output is its row of ComfyUI's batched call.
TEST_F(FluxDitTest, EachSampleAloneMatchesItsRow) {
  Result<FluxConfig> c = flux_config_detect(*file_, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  c->axes_dim = kAxes;
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, *file_, "", DType::F32).ok());
  Result<HostTensor> pe = flux_pe_table(kTxt, kHTok, kWTok, c->axes_dim, c->theta);
  ASSERT_TRUE(pe.ok()) << pe.status().str();
  Result<Graph> g = flux_dit_graph(*c, 1, kHTok, kWTok, kTxt, DType::F32);
  ASSERT_TRUE(g.ok()) << g.status().str();
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  Executor ex(*cpu, alloc, executor_policies_default(*cpu));
  w.bind(cpu.get(), &alloc);
  for (int64_t i = 0; i < 2; ++i) {
    HostTensor img = sample_of(get("golden.img"), i), txt = sample_of(get("golden.txt"), i);
    HostTensor t = sample_of(get("golden.timesteps"), i), y = sample_of(get("golden.y"), i);
    HostTensor guidance = sample_of(get("golden.guidance"), i);
    HostInputs in = {{"img", &img}, {"txt", &txt}, {"timesteps", &t},
                     {"y", &y},     {"guidance", &guidance}, {"pe", &*pe}};
    Result<std::vector<HostTensor>> out = ex.run(*g, in, w);
    ASSERT_TRUE(out.ok()) << out.status().str();
    double err = test::rel_err((*out)[0], sample_of(get("golden.out"), i));
    std::printf("flux dit sample %lld alone rel error %.3g\n", (long long)i, err);
    EXPECT_LT(err, kRelTol);
  }
}

// Writes the golden's tensors except `drop` (and the golden.* data) under `prefix` to a
// temporary file and detects its configuration.
Result<FluxConfig> detect_without(const SafetensorsFile& file, const std::string& drop,
                                  const std::string& prefix) {
  std::vector<HostTensor> keep;
  keep.reserve(file.entries().size());
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.name.rfind(drop, 0) == 0 || e.name.rfind("golden.", 0) == 0) continue;
    Result<HostTensor> t = file.load(e.name, DType::F32);
    if (!t.ok()) return t.status();
    keep.push_back(std::move(t).value());
    tensors.push_back({prefix + e.name, &keep.back()});
  }
  fs::path path = fs::temp_directory_path() /
                  ("hr_flux_dit_test_" + std::to_string(getpid()) + ".safetensors");
  HR_TRY(safetensors_write(path.string(), tensors));
  auto f = SafetensorsFile::open(path.string());
  fs::remove(path);
  if (!f.ok()) return f.status();
  return flux_config_detect(**f, prefix);
}

TEST_F(FluxDitTest, DetectsSchnellWithoutGuidance) {
  Result<FluxConfig> c = detect_without(*file_, "guidance_in.", "model.diffusion_model.");
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_FALSE(c->guidance_embed);
  c->axes_dim = kAxes;
  Result<Graph> g = flux_dit_graph(*c, 1, kHTok, kWTok, kTxt, DType::F32);
  ASSERT_TRUE(g.ok()) << g.status().str();
  EXPECT_EQ(g->find_input("guidance"), kNoValue);
  EXPECT_EQ(g->find_weight("guidance_in.in_layer.weight"), kNoValue);
}

// The full-size presets declare exactly the tensors of ComfyUI's Flux dev / schnell state dicts:
// their counts ("N tensors M" elements), from the Flux class itself, are in the golden's metadata
// (make_dit_golden.py full_size_counts).
TEST_F(FluxDitTest, FullSizePresetsMatchComfysStateDicts) {
  for (const auto& [name, cfg] : {std::pair{"dev", flux_config_dev()},
                                  std::pair{"schnell", flux_config_schnell()}}) {
    Result<Graph> g = flux_dit_graph(cfg, 1, 64, 64, 256, DType::BF16);
    ASSERT_TRUE(g.ok()) << g.status().str();
    int64_t tensors = 0;
    for (const Value& v : g->values()) tensors += v.kind == ValueKind::WEIGHT;
    const std::string got = fmt::format("{} tensors {}", tensors, g->weight_bytes() / 2);
    auto it = file_->metadata().find(std::string("full_size.") + name);
    ASSERT_NE(it, file_->metadata().end()) << name;
    EXPECT_EQ(got, it->second) << name;
  }
}

TEST_F(FluxDitTest, RefusesAFileWithATensorMissing) {
  const std::string gone = "single_blocks.0.norm.key_norm.scale";
  Result<FluxConfig> c = detect_without(*file_, gone, "model.diffusion_model.");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(c.status().str().find("model.diffusion_model." + gone), std::string::npos)
      << c.status().str();
}

}  // namespace
}  // namespace hr
