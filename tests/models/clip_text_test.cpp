// CLIP text encoders (tiny SD1 CLIP-L, tiny SDXL CLIP-L and bigG) and ComfyUI's text encode
// against golden-clip.safetensors, on the CPU backend in f32.
#include "models/sd/clip_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/clip_tokenizer.h"
#include "models/prompt_weights.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

// Tolerance: the checkpoints are f16 and are upcast exactly to f32, the goldens were computed in
// f32 on the CPU, so the only differences are summation order in matmuls, LayerNorm and softmax
// (~1e-7 relative per op) amplified through a few layers: we see ~3e-7; 1e-5 relative (L2) leaves
// room while any real bug (a dropped bias, a wrong head split, a missing mask) gives >1e-2.
constexpr double kTol = 1e-5;

std::vector<std::vector<int32_t>> id_rows(const HostTensor& ids) {
  HostTensor t = ids.to(DType::I64);
  std::vector<std::vector<int32_t>> rows(size_t(t.shape()[0]));
  const auto* p = static_cast<const int64_t*>(t.data());
  for (size_t b = 0; b < rows.size(); ++b)
    for (int64_t j = 0; j < t.shape()[1]; ++j)
      rows[b].push_back(int32_t(p[int64_t(b) * t.shape()[1] + j]));
  return rows;
}

class CLIPText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto g = SafetensorsFile::open(test::golden_path("golden-clip.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    golden_ = std::move(g).value().release();
    auto sd1 = SafetensorsFile::open(test::golden_path("tiny-sd1.safetensors"));
    ASSERT_TRUE(sd1.ok()) << sd1.status().str();
    sd1_ = std::move(sd1).value().release();
    auto sdxl = SafetensorsFile::open(test::golden_path("tiny-sdxl.safetensors"));
    ASSERT_TRUE(sdxl.ok()) << sdxl.status().str();
    sdxl_ = std::move(sdxl).value().release();
    auto tok = CLIPTokenizer::load(test::clip_vocab_dir());
    ASSERT_TRUE(tok.ok()) << tok.status().str();
    tokenizer_ = std::move(tok).value().release();
    std::ifstream f(test::golden_path("golden-tokenizer.json"));
    std::stringstream ss;
    ss << f.rdbuf();
    prompts_ = new nlohmann::json(nlohmann::json::parse(ss.str())["prompts"]);
  }

  void SetUp() override {
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }

  // Weights of one encoder, f32, bound to the CPU backend.
  std::unique_ptr<WeightSet> load(const SafetensorsFile& file, const std::string& prefix) {
    auto w = std::make_unique<WeightSet>();
    Status s = weights_load_prefix(*w, file, prefix, DType::F32);
    EXPECT_TRUE(s.ok()) << s.str();
    w->bind(backend_.get(), alloc_.get());
    return w;
  }

  HostTensor golden(const std::string& name) {
    auto t = golden_->load(name);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  void expect_close(const HostTensor& got, const std::string& name) {
    double e = test::rel_err(got, golden(name));
    std::printf("  %-48s rel err %.3g\n", name.c_str(), e);
    EXPECT_LT(e, kTol) << name;
  }

  static inline SafetensorsFile* golden_ = nullptr;
  static inline SafetensorsFile* sd1_ = nullptr;
  static inline SafetensorsFile* sdxl_ = nullptr;
  static inline CLIPTokenizer* tokenizer_ = nullptr;
  static inline nlohmann::json* prompts_ = nullptr;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(CLIPText, DetectsTinyConfigs) {
  auto sd1 = load(*sd1_, "cond_stage_model.transformer.");
  auto c = clip_text_detect(*sd1, 4);
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_EQ(c->layout, CLIPLayout::HF);
  EXPECT_EQ(c->width, 32);
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->heads, 4);
  EXPECT_EQ(c->mlp, 64);
  EXPECT_EQ(c->vocab, 49408);
  EXPECT_EQ(c->activation, CLIPActivation::QUICK_GELU);
  EXPECT_FALSE(c->has_projection);
  EXPECT_EQ(clip_text_detect(*sd1)->heads, 1);  // default width / 64, at least 1

  auto g = load(*sdxl_, "conditioner.embedders.1.model.");
  auto cg = clip_text_detect(*g, 4);
  ASSERT_TRUE(cg.ok()) << cg.status().str();
  EXPECT_EQ(cg->layout, CLIPLayout::OPEN_CLIP);
  EXPECT_EQ(cg->layers, 3);
  EXPECT_EQ(cg->mlp, 128);
  EXPECT_EQ(cg->activation, CLIPActivation::GELU);
  EXPECT_TRUE(cg->has_projection);
  EXPECT_EQ(cg->projection_dim, 32);

  WeightSet empty;
  EXPECT_EQ(clip_text_detect(empty).status().code(), ErrorCode::INVALID_ARGUMENT);
}

TEST_F(CLIPText, SD1RowsMatchGolden) {
  auto w = load(*sd1_, "cond_stage_model.transformer.");
  CLIPTextConfig c = *clip_text_detect(*w, 4);
  auto rows = id_rows(golden("clip.sd1.input_ids"));
  CLIPTextGraphOptions o;
  o.layer = -2;
  o.layer_final_norm = false;
  o.last_hidden_state = true;
  o.embeddings = true;
  auto r = clip_text_run(*ex_, *w, c, rows, o);
  ASSERT_TRUE(r.ok()) << r.status().str();
  expect_close(r->embeddings, "clip.sd1.embeddings");
  expect_close(r->hidden, "clip.sd1.penultimate_hidden_state");
  expect_close(r->last, "clip.sd1.last_hidden_state");
  expect_close(clip_text_pool(r->last, rows, CLIPTokenizer::kEOS), "clip.sd1.pooled");

  o = {};
  o.layer = -2;
  auto skip = clip_text_run(*ex_, *w, c, rows, o);
  ASSERT_TRUE(skip.ok()) << skip.status().str();
  expect_close(skip->hidden, "clip.sd1.penultimate_final_ln");

  o.layer = -3;
  EXPECT_EQ(clip_text_run(*ex_, *w, c, rows, o).status().code(), ErrorCode::INVALID_ARGUMENT);
}

// Files from older transformers versions lack the "text_model." level.
TEST_F(CLIPText, HFLayoutWithoutTextModelRoot) {
  auto w = load(*sd1_, "cond_stage_model.transformer.text_model.");
  auto c = clip_text_detect(*w, 4);
  ASSERT_TRUE(c.ok()) << c.status().str();
  EXPECT_EQ(c->hf_root, "");
  EXPECT_EQ(c->layers, 2);
  CLIPTextGraphOptions o;
  auto r = clip_text_run(*ex_, *w, *c, id_rows(golden("clip.sd1.input_ids")), o);
  ASSERT_TRUE(r.ok()) << r.status().str();
  expect_close(r->hidden, "clip.sd1.last_hidden_state");
}

TEST_F(CLIPText, SD1ComfyEncodeMatchesGolden) {
  auto w = load(*sd1_, "cond_stage_model.transformer.");
  CLIPTextConfig c = *clip_text_detect(*w, 4);
  for (const auto& p : *prompts_) {
    const std::string name = p["name"].get<std::string>();
    TokenChunks chunks = prompt_tokenize(*tokenizer_, p["text"].get<std::string>());
    auto e = clip_text_encode(*ex_, *w, c, chunks, {});
    ASSERT_TRUE(e.ok()) << name << ": " << e.status().str();
    expect_close(e->cond, "comfy.sd1." + name + ".cond");
    expect_close(e->pooled, "comfy.sd1." + name + ".pooled");
    CLIPEncodeOptions skip;
    skip.layer = -2;
    auto s = clip_text_encode(*ex_, *w, c, chunks, skip);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status().str();
    expect_close(s->cond, "comfy.sd1_clipskip2." + name + ".cond");
  }
}

TEST_F(CLIPText, SDXLEncodersMatchGolden) {
  auto wl = load(*sdxl_, "conditioner.embedders.0.transformer.");
  auto wg = load(*sdxl_, "conditioner.embedders.1.model.");
  CLIPTextConfig cl = *clip_text_detect(*wl, 4);
  CLIPTextConfig cg = *clip_text_detect(*wg, 4);
  EXPECT_EQ(cl.layers, 3);

  CLIPTextGraphOptions o;
  o.layer = -2;
  o.layer_final_norm = false;
  o.last_hidden_state = true;
  o.embeddings = true;
  auto rl = clip_text_run(*ex_, *wl, cl, id_rows(golden("clip.sd1.input_ids")), o);
  ASSERT_TRUE(rl.ok()) << rl.status().str();
  expect_close(rl->last, "clip.sdxl_clip_l.last_hidden_state");
  expect_close(rl->hidden, "clip.sdxl_clip_l.penultimate_hidden_state");

  auto rows_g = id_rows(golden("clip.sdxl_clip_g.input_ids"));
  auto rg = clip_text_run(*ex_, *wg, cg, rows_g, o);
  ASSERT_TRUE(rg.ok()) << rg.status().str();
  expect_close(rg->embeddings, "clip.sdxl_clip_g.embeddings");
  expect_close(rg->last, "clip.sdxl_clip_g.last_hidden_state");
  expect_close(rg->hidden, "clip.sdxl_clip_g.penultimate_hidden_state");
  HostTensor pooled = clip_text_pool(rg->last, rows_g, CLIPTokenizer::kEOS);
  expect_close(pooled, "clip.sdxl_clip_g.pooled_unprojected");
  auto projected = clip_text_project(pooled, *wg, cg);
  ASSERT_TRUE(projected.ok()) << projected.status().str();
  expect_close(*projected, "clip.sdxl_clip_g.pooled_projected");
}

TEST_F(CLIPText, SDXLComfyEncodeMatchesGolden) {
  auto wl = load(*sdxl_, "conditioner.embedders.0.transformer.");
  auto wg = load(*sdxl_, "conditioner.embedders.1.model.");
  CLIPTextConfig cl = *clip_text_detect(*wl, 4);
  CLIPTextConfig cg = *clip_text_detect(*wg, 4);
  for (const auto& p : *prompts_) {
    const std::string name = p["name"].get<std::string>();
    const std::string text = p["text"].get<std::string>();
    CLIPEncodeOptions ol;
    ol.layer = -2;
    ol.layer_final_norm = false;
    CLIPEncodeOptions og = ol;
    og.pad = 0;
    auto l = clip_text_encode(*ex_, *wl, cl, prompt_tokenize(*tokenizer_, text), ol);
    auto g = clip_text_encode(*ex_, *wg, cg, prompt_tokenize(*tokenizer_, text, {.pad = 0}), og);
    ASSERT_TRUE(l.ok() && g.ok()) << name;
    auto both = clip_sdxl_combine(*l, *g);
    ASSERT_TRUE(both.ok()) << both.status().str();
    expect_close(both->cond, "comfy.sdxl." + name + ".cond");
    expect_close(both->pooled, "comfy.sdxl." + name + ".pooled");
  }
}

}  // namespace
}  // namespace hr
