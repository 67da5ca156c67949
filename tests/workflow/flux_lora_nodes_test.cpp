// LoraLoader on a Flux.1 model in a workflow (CPU, f32): the tiny Flux e2e checkpoint
// (tests/data/flux/e2e) sampled through ComfyUI's Flux graph with a LoRA between the checkpoint
// loader and the sampler. The same low-rank change in two dialects, diffusers' to_q/to_k/to_v
// (row slices of double_blocks.0.img_attn.qkv) and kohya's fused qkv (one up factor, the three
// stacked), with one CLIP-L q_proj patch in each, must sample the same latent; the DiT part must
// change it (against a LoRA of the CLIP-L patch alone), and so must the CLIP-L part (against no
// LoRA). The patched numbers themselves are held to ComfyUI's by dit_lora_test.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/safetensors.h"
#include "node_harness.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "test_paths.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"
#include "workflow_json.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCheckpoint = "tiny-flux.safetensors";
constexpr int64_t kHidden = 16;  // the tiny DiT's hidden size (its dit_config metadata)
constexpr int64_t kRank = 2;

std::string e2e_path(const std::string& f) { return test::data_path("flux/e2e/" + f); }

// A [rows, cols] f16 factor of deterministic values; `seed` shifts the pattern.
HostTensor factor(int64_t rows, int64_t cols, int seed) {
  HostTensor f(DType::F32, Shape{rows, cols});
  for (int64_t i = 0; i < f.numel(); ++i)
    f.f32()[i] = 0.3f * std::sin(0.7f * float(i) + float(seed));
  return f.to(DType::F16);
}

HostTensor rows_concat(const std::vector<HostTensor>& parts) {
  int64_t rows = 0;
  for (const HostTensor& p : parts) rows += p.shape()[0];
  HostTensor out(parts[0].dtype(), Shape{rows, parts[0].shape()[1]});
  auto* dst = static_cast<char*>(out.data());
  for (const HostTensor& p : parts) {
    std::memcpy(dst, p.data(), p.bytes());
    dst += p.bytes();
  }
  return out;
}

Status write(const fs::path& out, const std::vector<std::pair<std::string, HostTensor>>& ts) {
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (const auto& [n, t] : ts) named.emplace_back(n, &t);
  return safetensors_write(out.string(), named);
}

class FluxLoraNodes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_flux_lora_nodes_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models/checkpoints");
    fs::create_directories(dir_ / "models/loras");
    fs::create_symlink(e2e_path(kCheckpoint), dir_ / "models/checkpoints" / kCheckpoint);
    // The settings the tensors cannot show (as flux_e2e_test states them).
    std::ofstream(dir_ / "models/checkpoints/tiny-flux.yaml")
        << "headroom:\n  text_encoder_heads: [2]\n  flux:\n    axes_dim: [2, 2, 4]\n";
    std::vector<HostTensor> ups;
    for (int i = 0; i < 3; ++i) ups.push_back(factor(kHidden, kRank, 2 + i));
    // Down factors are [rank, hidden] of seed 1; ups [hidden, rank] (to_q/k/v: seeds 2, 3, 4).
    const std::string d = "transformer.transformer_blocks.0.attn.";
    std::vector<std::pair<std::string, HostTensor>> diffusers, kohya;
    const char* qkv[3] = {"to_q", "to_k", "to_v"};
    for (int i = 0; i < 3; ++i) {
      diffusers.emplace_back(d + qkv[i] + ".lora_A.weight", factor(kRank, kHidden, 1));
      diffusers.emplace_back(d + qkv[i] + ".lora_B.weight", ups[size_t(i)].clone());
    }
    const std::string k = "lora_unet_double_blocks_0_img_attn_qkv";
    kohya.emplace_back(k + ".lora_down.weight", factor(kRank, kHidden, 1));
    kohya.emplace_back(k + ".lora_up.weight", rows_concat(ups));
    // The same CLIP-L q_proj patch (width 4) in both, in kohya's and in diffusers' names.
    const std::string te = "lora_te1_text_model_encoder_layers_0_self_attn_q_proj";
    kohya.emplace_back(te + ".lora_up.weight", factor(4, 1, 5));
    kohya.emplace_back(te + ".lora_down.weight", factor(1, 4, 6));
    std::vector<std::pair<std::string, HostTensor>> clip_only;
    clip_only.emplace_back(te + ".lora_up.weight", factor(4, 1, 5));
    clip_only.emplace_back(te + ".lora_down.weight", factor(1, 4, 6));
    ASSERT_TRUE(write(dir_ / "models/loras/clip_only.safetensors", clip_only).ok());
    const std::string te_d = "text_encoder.text_model.encoder.layers.0.self_attn.q_proj";
    diffusers.emplace_back(te_d + ".lora_B.weight", factor(4, 1, 5));
    diffusers.emplace_back(te_d + ".lora_A.weight", factor(1, 4, 6));
    ASSERT_TRUE(write(dir_ / "models/loras/qkv_diffusers.safetensors", diffusers).ok());
    ASSERT_TRUE(write(dir_ / "models/loras/qkv_kohya.safetensors", kohya).ok());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // The e2e workflow, with a LoraLoader of `lora` (none: as it is) feeding the model and CLIP;
  // returns the sampled latent.
  Result<HostTensor> sample(const std::string& lora) {
    std::ifstream f(e2e_path("flux-e2e-workflow.json"));
    std::stringstream text;
    text << f.rdbuf();
    json wf = json::parse(text.str());
    if (!lora.empty()) {
      wf["10"] = test::node("LoraLoader", {{"model", test::link("1", 0)},
                                           {"clip", test::link("1", 1)},
                                           {"lora_name", lora},
                                           {"strength_model", 1.0},
                                           {"strength_clip", 1.0}});
      wf["6"]["inputs"]["model"] = test::link("10", 0);
      wf["2"]["inputs"]["clip"] = test::link("10", 1);
      wf["3"]["inputs"]["clip"] = test::link("10", 1);
    }
    NodeRegistry registry;
    nodes_register(registry, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    PromptValidation v = prompt_validate(wf, registry);
    if (!v.ok) return make_error(ErrorCode::INVALID_ARGUMENT, "{}", v.summary());
    Prompt prompt = v.prompt;
    ExecOptions o;
    rt_.wire(o);
    o.models_dir = (dir_ / "models").string();
    o.output_dir = (dir_ / "output").string();
    o.compute_dtype = DType::F32;
    o.on_event = [this](const ExecEvent& e) {
      if (e.kind == ExecEvent::Kind::WARNING) warnings_.push_back(e.message);
    };
    PromptExecutor pe;
    HR_TRY(pe.execute(prompt, o).status());
    const std::vector<std::any>* outs = pe.node_outputs("7");
    if (!outs || outs->empty()) return make_error(ErrorCode::INTERNAL, "no KSampler output");
    auto latent = std::any_cast<std::shared_ptr<const Latent>>((*outs)[0]);
    return latent->samples->clone();
  }

  static fs::path dir_;
  test::CpuRuntime rt_;
  std::vector<std::string> warnings_;
};
fs::path FluxLoraNodes::dir_;

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, double(std::fabs(a.f32()[i] - b.f32()[i])));
  return m;
}

TEST_F(FluxLoraNodes, SlicedAndFusedDialectsSampleTheSameAndEachPatchCounts) {
  auto none = sample("");
  ASSERT_TRUE(none.ok()) << none.status().str();
  EXPECT_TRUE(warnings_.empty());
  auto sliced = sample("qkv_diffusers.safetensors");
  ASSERT_TRUE(sliced.ok()) << sliced.status().str();
  auto fused = sample("qkv_kohya.safetensors");
  ASSERT_TRUE(fused.ok()) << fused.status().str();
  auto clip_only = sample("clip_only.safetensors");
  ASSERT_TRUE(clip_only.ok()) << clip_only.status().str();
  for (const std::string& w : warnings_) ADD_FAILURE() << "every key loads: " << w;
  ASSERT_EQ(sliced->shape(), none->shape());
  ASSERT_EQ(fused->shape(), none->shape());
  // Each half of the patch changes the latent: the DiT's (against the CLIP-only LoRA) and CLIP's.
  EXPECT_GT(max_abs_diff(*sliced, *clip_only), 1e-3) << "the DiT patch changed nothing";
  EXPECT_GT(max_abs_diff(*clip_only, *none), 1e-3) << "the CLIP-L patch changed nothing";
  EXPECT_LE(max_abs_diff(*sliced, *fused), 1e-5);
  ::testing::Test::RecordProperty("dit_change", std::to_string(max_abs_diff(*sliced, *clip_only)));
  ::testing::Test::RecordProperty("sliced_vs_fused", std::to_string(max_abs_diff(*sliced, *fused)));
}

}  // namespace
}  // namespace hr
