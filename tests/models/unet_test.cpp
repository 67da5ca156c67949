// UNet tests: configuration detection on the tiny SD1/SDXL checkpoints, forward passes against
// the golden tensors (f32, CPU backend), and planning a full-size SD1.5 graph without running it.
#include "models/sd/unet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "graph/passes.h"
#include "graph/planner.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/weight_load.h"
#include "memory/weight_set.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

// Note [golden tolerance]: the goldens are float32 CPU results of the same f16-rounded weights;
// README "Tolerances" measures float32 rounding against a float64 re-evaluation at ~1e-6 of
// max |x| for these passes. Our kernels sum in another order (blocked GEMM, im2col conv,
// online-softmax attention), which moves results by the same order, so 1e-4 relative L2 leaves
// two orders of margin while still catching any real mistake (a wrong eps, a dropped bias, a
// swapped cos/sin or head count changes results by 1e-2 or more).
constexpr double kRelTol = 1e-4;

std::unique_ptr<SafetensorsFile> open_golden(const std::string& name) {
  auto f = SafetensorsFile::open(test::golden_path(name));
  EXPECT_TRUE(f.ok()) << f.status().str();
  return f.ok() ? std::move(f).value() : nullptr;
}

HostTensor golden(const SafetensorsFile& f, const std::string& name) {
  auto t = f.load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

class UNetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sd1_ = open_golden("tiny-sd1.safetensors");
    sdxl_ = open_golden("tiny-sdxl.safetensors");
    gold_ = open_golden("golden-unet-vae.safetensors");
    ASSERT_TRUE(sd1_ && sdxl_ && gold_);
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }

  std::unique_ptr<SafetensorsFile> sd1_, sdxl_, gold_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

UNetConfig expected_sd1() {
  UNetConfig c;
  c.model_channels = 32;
  c.channel_mult = {1, 2, 2, 2};
  c.num_res_blocks = {2, 2, 2, 2};
  c.transformer_depth = {1, 1, 1, 1, 1, 1, 0, 0};
  c.transformer_depth_middle = 1;
  c.transformer_depth_output = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  c.context_dim = 32;
  c.use_linear_in_transformer = false;
  c.adm_in_channels = 0;
  c.time_embed_dim = 128;
  c.num_heads = 8;
  c.num_head_channels = -1;
  return c;
}

UNetConfig expected_sdxl() {
  UNetConfig c;
  c.model_channels = 32;
  c.channel_mult = {1, 2, 2};
  c.num_res_blocks = {2, 2, 2};
  c.transformer_depth = {0, 0, 1, 1, 2, 2};
  c.transformer_depth_middle = 2;
  c.transformer_depth_output = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  c.context_dim = 64;
  c.use_linear_in_transformer = true;
  c.adm_in_channels = 80;
  c.time_embed_dim = 128;
  c.num_heads = -1;
  c.num_head_channels = 32;
  return c;
}

// README "ComfyUI detect_unet_config on the two files".
TEST_F(UNetTest, DetectsTinyConfigs) {
  auto sd1 = unet_config_detect(*sd1_, "model.diffusion_model.");
  ASSERT_TRUE(sd1.ok()) << sd1.status().str();
  EXPECT_EQ(*sd1, expected_sd1()) << sd1->str();
  auto sdxl = unet_config_detect(*sdxl_, "model.diffusion_model.");
  ASSERT_TRUE(sdxl.ok()) << sdxl.status().str();
  EXPECT_EQ(*sdxl, expected_sdxl()) << sdxl->str();
  EXPECT_EQ(sdxl->heads_for(64), 2);

  auto missing = unet_config_detect(*sd1_, "first_stage_model.");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("input_blocks.0.0.weight"), std::string::npos);
}

// The graph declares exactly the checkpoint's UNet tensors, with the checkpoint's shapes.
TEST_F(UNetTest, GraphWeightsAreTheCheckpointTensors) {
  for (const SafetensorsFile* f : {sd1_.get(), sdxl_.get()}) {
    auto cfg = unet_config_detect(*f, "model.diffusion_model.");
    ASSERT_TRUE(cfg.ok());
    auto g = unet_graph(*cfg, 2, 8, 8, 77, DType::F32);
    ASSERT_TRUE(g.ok()) << g.status().str();
    std::set<std::string> in_graph;
    for (const Value& v : g->values()) {
      if (v.kind != ValueKind::WEIGHT) continue;
      in_graph.insert(v.name);
      const SafetensorsEntry* e = f->find("model.diffusion_model." + v.name);
      ASSERT_NE(e, nullptr) << v.name;
      EXPECT_EQ(e->shape, v.desc.shape) << v.name;
    }
    size_t in_file = 0;
    for (const SafetensorsEntry& e : f->entries())
      if (e.name.rfind("model.diffusion_model.", 0) == 0) ++in_file;
    EXPECT_EQ(in_graph.size(), in_file) << f->path();
  }
}

TEST_F(UNetTest, TimestepEmbeddingMatchesGolden) {
  HostTensor t = golden(*gold_, "unet.sd1.timesteps");
  HostTensor ref = golden(*gold_, "unet.sd1.t_emb");
  Graph g;
  OpParams p;
  p.dim = 32;
  p.flip_sin_to_cos = true;
  p.freq_shift = 0.0f;
  ValueId e = g.op(OpKind::TIMESTEP_EMBEDDING, p, {g.input("timesteps", t.desc())}, "t_emb");
  g.output(e, "t_emb");
  WeightSet none;
  auto outs = ex_->run(g, {{"timesteps", &t}}, none);
  ASSERT_TRUE(outs.ok()) << outs.status().str();
  double err = test::rel_err((*outs)[0], ref);
  std::printf("unet.sd1.t_emb rel error %.3g\n", err);
  EXPECT_LT(err, 1e-5);  // sin/cos of arguments up to 999: a few ulp of float32 each
}

struct UNetCase {
  const char* golden;  // tensor name prefix
  bool sdxl;
  const char* file = "golden-unet-vae.safetensors";
  const char* timesteps = ".timesteps";  // the timestep tensor's suffix in `file`
};

constexpr const char* kOdd = "golden-unet-odd.safetensors";

class UNetGoldenTest : public UNetTest, public ::testing::WithParamInterface<UNetCase> {};

TEST_P(UNetGoldenTest, MatchesGolden) {
  const UNetCase& c = GetParam();
  const SafetensorsFile& ckpt = c.sdxl ? *sdxl_ : *sd1_;
  auto cfg = unet_config_detect(ckpt, "model.diffusion_model.");
  ASSERT_TRUE(cfg.ok()) << cfg.status().str();
  if (c.sdxl) {  // README: tiny SDXL uses head dim 32 (real SDXL: 64); set it explicitly
    cfg->num_heads = -1;
    cfg->num_head_channels = 32;
  }
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, ckpt, "model.diffusion_model.", DType::F32).ok());
  std::unique_ptr<SafetensorsFile> gold = open_golden(c.file);
  ASSERT_TRUE(gold);
  std::string pre = c.golden;
  HostTensor x = golden(*gold, pre + ".x");
  HostTensor t = golden(*gold, pre + c.timesteps);
  HostTensor ctx = golden(*gold, pre + ".context");
  HostTensor ref = golden(*gold, pre + ".out");
  HostTensor y;
  if (c.sdxl) y = golden(*gold, pre + ".y");
  // As built (NCHW), through the channels-last pass that GPUs get, and with the context
  // projections stacked as well (graph/passes.h; the CPU backend does not stack on its own).
  const char* kModes[] = {"", " (channels last)", " (channels last, stacked K/V)",
                          " (channels last, stacked K/V and Q/K/V)"};
  for (int mode : {0, 1, 2, 3}) {
    ex_->set_pass_options(mode == 0 ? std::nullopt
                                    : std::optional<PassOptions>(
                                          PassOptions{true, true, mode >= 2, mode == 3}));
    auto out = unet_run(*ex_, *cfg, w, DType::F32, x, t, ctx, c.sdxl ? &y : nullptr);
    ASSERT_TRUE(out.ok()) << out.status().str();
    double err = test::rel_err(*out, ref);
    std::printf("%s.out%s rel error %.3g\n", c.golden, kModes[mode], err);
    EXPECT_LT(err, kRelTol);
  }
}

INSTANTIATE_TEST_SUITE_P(UNet, UNetGoldenTest,
                         ::testing::Values(UNetCase{"unet.sd1", false},
                                           UNetCase{"unet.sd1.nonsquare", false},
                                           UNetCase{"unet.sdxl", true},
                                           // Latents whose halvings are odd (Note [odd latent
                                           // sizes] in unet.cpp): ComfyUI's UNet on them.
                                           UNetCase{"unet_odd.sd1.a", false, kOdd, ".t"},
                                           UNetCase{"unet_odd.sd1.b", false, kOdd, ".t"},
                                           UNetCase{"unet_odd.sdxl.a", true, kOdd, ".t"},
                                           UNetCase{"unet_odd.sdxl.b", true, kOdd, ".t"}),
                         [](const auto& info) {
                           std::string n = info.param.golden;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

// Note [stacked context projections]: every cross-attention of a full-size UNet reads its K and
// V as windows of a stacked projection, and no stack's weight outgrows the largest weight.
TEST_F(UNetTest, StacksEveryContextProjection) {
  for (bool xl : {false, true}) {
    UNetConfig cfg = xl ? unet_config_sdxl() : unet_config_sd15();
    auto g = unet_graph(cfg, 2, 32, 32, 77, DType::F16);
    ASSERT_TRUE(g.ok()) << g.status().str();
    auto s = graph_passes(*g, PassOptions{true, true, true});
    ASSERT_TRUE(s.ok()) << s.status().str();
    auto count = [](const Graph& x, OpKind k, bool window) {
      int n = 0;
      for (const Node& node : x.nodes())
        n += node.kind == k && (!window || node.params.kv_window);
      return n;
    };
    uint64_t largest = 0, largest_stack = 0;
    int stacks = 0;
    for (const Value& v : g->values())
      if (v.kind == ValueKind::WEIGHT) largest = std::max<uint64_t>(largest, v.desc.bytes());
    for (const Value& v : s->values())
      if (v.kind == ValueKind::WEIGHT && v.layout == WeightLayout::STACK) {
        ++stacks;
        largest_stack = std::max<uint64_t>(largest_stack, v.desc.bytes());
      }
    const int cross = count(*g, OpKind::ATTENTION, false) / 2;  // attn1 and attn2 per block
    EXPECT_EQ(cross, xl ? 70 : 16);
    EXPECT_EQ(count(*s, OpKind::ATTENTION, true), cross);
    EXPECT_EQ(count(*g, OpKind::LINEAR, false) - count(*s, OpKind::LINEAR, false),
              2 * cross - stacks);
    EXPECT_GT(stacks, 0);
    EXPECT_LT(stacks, cross);
    EXPECT_LE(largest_stack, largest);
    // Self-attention mode: every attn1 gets its own Q/K/V stack, read through a Q window.
    auto sq = graph_passes(*g, PassOptions{true, true, true, true});
    ASSERT_TRUE(sq.ok()) << sq.status().str();
    int q_windows = 0;
    for (const Node& node : sq->nodes())
      q_windows += node.kind == OpKind::ATTENTION && node.params.kv_window && node.params.q_width > 0;
    EXPECT_EQ(q_windows, cross);
    EXPECT_EQ(count(*sq, OpKind::ATTENTION, true), 2 * cross);
    EXPECT_EQ(count(*s, OpKind::LINEAR, false) - count(*sq, OpKind::LINEAR, false), 2 * cross);
    std::printf("%s: %d cross-attentions, %d stacks, largest stack %.1f MB (largest weight %.1f)\n",
                xl ? "SDXL" : "SD1.5", cross, stacks, largest_stack / 1e6, largest / 1e6);
  }
}

TEST_F(UNetTest, RejectsBadShapes) {
  auto cfg = unet_config_detect(*sd1_, "model.diffusion_model.");
  ASSERT_TRUE(cfg.ok());
  auto g = unet_graph(*cfg, 1, 0, 8, 77, DType::F32);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_TRUE(unet_graph(*cfg, 1, 12, 7, 77, DType::F32).ok());  // any size (odd latents)
  WeightSet w;
  HostTensor x(DType::F32, Shape{1, 4, 8, 8}), t(DType::F32, Shape{1}),
      ctx(DType::F32, Shape{1, 77, 32});
  auto sdxl_cfg = unet_config_detect(*sdxl_, "model.diffusion_model.");
  ASSERT_TRUE(sdxl_cfg.ok());
  auto out = unet_run(*ex_, *sdxl_cfg, w, DType::F32, x, t, ctx, nullptr);  // SDXL needs y
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'y'"), std::string::npos);
}

// A full-size SD1.5 UNet (320 channels, mult 1,2,4,4, context 768, 8 heads) for 64x64 latents
// (512x512 images), batch 2, builds and plans; running it belongs in a benchmark.
TEST_F(UNetTest, FullSizeSD15Plans) {
  UNetConfig cfg = unet_config_sd15();
  auto g = unet_graph(cfg, 2, 64, 64, 77, DType::F16);
  ASSERT_TRUE(g.ok()) << g.status().str();
  // 859,520,964 parameters in the SD1.5 UNet.
  EXPECT_EQ(g->weight_bytes(), uint64_t(859520964) * 2);
  auto plan = ex_->plan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  const ArenaPlan& p = **plan;
  std::printf("SD1.5 UNet f16 B=2 64x64: %zu nodes, weights %s, arena %s (lower bound %s)\n",
              g->nodes().size(), bytes_format(p.weight_bytes).c_str(),
              bytes_format(p.arena_bytes).c_str(), bytes_format(p.lower_bound).c_str());
  EXPECT_GT(p.arena_bytes, 0u);
  EXPECT_GE(p.arena_bytes, p.lower_bound);
  // Sanity: the activations of one step are far below the weights' 1.6 GiB at this size.
  EXPECT_LT(p.arena_bytes, uint64_t(2) << 30);

  // SDXL at 128x128 (1024x1024 images) also builds and plans.
  auto gx = unet_graph(unet_config_sdxl(), 2, 128, 128, 77, DType::F16);
  ASSERT_TRUE(gx.ok()) << gx.status().str();
  EXPECT_EQ(gx->weight_bytes(), uint64_t(2567463684) * 2);  // 2,567,463,684 parameters
  auto planx = ex_->plan(*gx);
  ASSERT_TRUE(planx.ok()) << planx.status().str();
  std::printf("SDXL UNet f16 B=2 128x128: arena %s\n", bytes_format((*planx)->arena_bytes).c_str());

  // SD2.x 768-v at 96x96 (768x768 images): linear projections, head dim 64.
  auto g2 = unet_graph(unet_config_sd2(), 2, 96, 96, 77, DType::F16);
  ASSERT_TRUE(g2.ok()) << g2.status().str();
  EXPECT_EQ(g2->weight_bytes(), uint64_t(865910724) * 2);  // 865,910,724 parameters
  ASSERT_TRUE(ex_->plan(*g2).ok());
}

}  // namespace
}  // namespace hr
