// Flux.1 end to end against ComfyUI: tests/data/flux/e2e/flux-e2e-workflow.json run through the
// workflow layer on the CPU in f32 on the tiny single-file checkpoint (its RoPE axes and CLIP-L
// heads stated in the file's metadata or in the YAML beside it), every stage compared with
// ComfyUI's own run (flux-e2e-golden.safetensors, made by make_flux_e2e_golden.py): tokens, both
// encoders' conditioning and pooled output, noise, sigmas, the sampler's trajectory and latent,
// the decoded image and the PNG.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "core/png_io.h"
#include "dit_e2e_checks.h"
#include "e2e_run.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/clip_tokenizer.h"
#include "models/prompt_weights.h"
#include "models/t5/t5_tokenizer.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "png_compare.h"
#include "sampling/cfg.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/schedulers.h"
#include "sampling/torch_rng.h"
#include "test_compare.h"
#include "test_paths.h"
#include "test_safetensors.h"
#include "workflow/execute.h"
#include "workflow/prompt.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// Note [flux e2e tolerance]: the brief of issue 39 item 5: every stage within 1e-4 relative
// (||a - b|| / ||b||, f32 on the CPU), the PNG within one level (kF32PngBounds). The noise is the
// same generator (exact in practice) and the sigmas the same float arithmetic.
constexpr double kStageTol = 1e-4;

// The workflow's node ids (flux-e2e-workflow.json).
constexpr const char* kPositive = "2";  // CLIPTextEncode, the prompt
constexpr const char* kNegative = "3";  // CLIPTextEncode, ""
constexpr const char* kGuided = "4";    // FluxGuidance 3.5 on the positive
constexpr const char* kModel = "6";     // ModelSamplingFlux
constexpr const char* kSampler = "7";   // KSampler
constexpr const char* kDecode = "8";    // VAEDecode
constexpr const char* kSave = "9";      // SaveImage
constexpr const char* kCheckpoint = "tiny-flux.safetensors";

std::string e2e_path(const std::string& f) { return test::data_path("flux/e2e/" + f); }

using test::output_of;

// Where the settings the tensors cannot show are stated: the tiny DiT's RoPE axes [2, 2, 4]
// (head width 8) and CLIP-L's 2 heads (the generator's dit_config / clip_l_config).
enum class SettingsIn { METADATA, YAML };

class FluxE2E : public ::testing::TestWithParam<SettingsIn> {
 protected:
  void SetUp() override {
    const bool yaml = GetParam() == SettingsIn::YAML;
    dir_ = fs::temp_directory_path() / fmt::format("hr_flux_e2e_{}_{}", ::getpid(), int(yaml));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models/checkpoints");
    const fs::path ckpt = dir_ / "models/checkpoints" / kCheckpoint;
    if (yaml) {
      fs::create_symlink(e2e_path(kCheckpoint), ckpt);
      std::ofstream(dir_ / "models/checkpoints/tiny-flux.yaml")
          << "headroom:\n  text_encoder_heads: [2]\n  flux:\n    axes_dim: [2, 2, 4]\n";
    } else {
      Status st = checkpoint_with_settings(
          ckpt, {{"headroom.flux.axes_dim", "2,2,4"}, {"headroom.clip.heads", "2"}});
      ASSERT_TRUE(st.ok()) << st.str();
    }
    auto g = SafetensorsFile::open(e2e_path("flux-e2e-golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    gold_ = std::move(g).value();
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    backend_ = cpu_backend_create(1);  // one thread: tiny ops, shared 2-core CI machines
    run_ = std::make_unique<test::CaseRun>(*backend_, dir_ / "output");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The committed checkpoint with these keys added to its metadata (the golden files stay as
  // they are).
  static Status checkpoint_with_settings(const fs::path& out,
                                         const std::map<std::string, std::string>& keys) {
    HR_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(e2e_path(kCheckpoint)));
    std::map<std::string, std::string> meta = f->metadata();
    for (const auto& [k, v] : keys) meta[k] = v;
    return test::safetensors_write_part(e2e_path(kCheckpoint), "", out.string(), meta);
  }

  Status execute() {
    std::ifstream f(e2e_path("flux-e2e-workflow.json"));
    std::stringstream text;
    text << f.rdbuf();
    PromptValidation v = prompt_validate_text(text.str(), registry_);
    if (!v.ok) return make_error(ErrorCode::INVALID_ARGUMENT, "{}", v.summary());
    prompt_ = v.prompt;
    return run_->execute(prompt_, dir_ / "models", DType::F32);
  }

  HostTensor golden(const std::string& name) {
    auto t = gold_->load(name, DType::F32);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }
  std::string golden_meta(const std::string& key) {
    auto it = gold_->metadata().find(key);
    return it == gold_->metadata().end() ? "" : it->second;
  }
  // The golden's KSampler settings, noise and callback record.
  test::TrajectoryGolden trajectory_golden() {
    return test::TrajectoryGolden{"euler",
                                  "simple",
                                  std::stoi(golden_meta("steps")),
                                  std::stoull(golden_meta("seed")),
                                  golden("noise"),
                                  golden("steps.x"),
                                  golden("steps.denoised"),
                                  golden("latent")};
  }

  void expect_close(const HostTensor& got, const HostTensor& want, double tol,
                    const std::string& what) {
    test::expect_stage(got, want, tol, what);
  }

  // One golden row of token ids / weights against a tokenizer's first chunk.
  void expect_tokens(const TokenChunks& got, const std::string& name) {
    auto ids = gold_->load(name + ".ids");
    ASSERT_TRUE(ids.ok()) << name;
    HostTensor w = golden(name + ".weights");
    ASSERT_EQ(got.size(), 1u) << name;
    ASSERT_EQ(int64_t(got.ids[0].size()), ids->numel()) << name;
    const auto* want = static_cast<const int64_t*>(ids->data());
    for (int64_t i = 0; i < ids->numel(); ++i) {
      EXPECT_EQ(got.ids[0][size_t(i)], want[i]) << name << " token " << i;
      EXPECT_EQ(float(got.weights[0][size_t(i)]), w.f32()[i]) << name << " weight " << i;
    }
  }

  fs::path dir_;
  std::unique_ptr<SafetensorsFile> gold_;
  NodeRegistry registry_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<test::CaseRun> run_;
  Prompt prompt_;
};

TEST_P(FluxE2E, EveryStageMatchesComfyUI) {
  Status st = execute();
  ASSERT_TRUE(st.ok()) << st.str();

  // Tokens: the tokenizers FluxTextEncoder uses, with its chunk options (Note [Flux text
  // conditioning]).
  auto clip_tok = tokenizer_for_checkpoint({}, (dir_ / "models").string());
  auto t5_tok = t5_tokenizer_shared((dir_ / "models").string());
  ASSERT_TRUE(clip_tok.ok() && t5_tok.ok());
  ChunkOptions clip_opts;
  clip_opts.pad = (*clip_tok)->eos();
  for (const auto& [side, text] :
       {std::pair<std::string, std::string>{"positive", golden_meta("prompt")},
        {"negative", golden_meta("negative")}}) {
    expect_tokens(prompt_tokenize(**clip_tok, text, clip_opts), "tokens." + side + ".l");
    expect_tokens(prompt_tokenize(**t5_tok, text, t5xxl_chunk_options(256)),
                  "tokens." + side + ".t5xxl");
  }

  // CLIPTextEncode: T5's conditioning and CLIP-L's pooled output of both prompts.
  for (const auto& [side, id] :
       {std::pair<std::string, const char*>{"positive", kPositive}, {"negative", kNegative}}) {
    auto cond = output_of<Conditioning>(run_->pe, id, 0);
    ASSERT_TRUE(cond && cond->entries.size() == 1) << side;
    expect_close(*cond->entries[0].cond, golden("cond." + side), kStageTol, "cond." + side);
    ASSERT_NE(cond->entries[0].pooled(), nullptr) << side;
    expect_close(*cond->entries[0].pooled(), golden("pooled." + side), kStageTol, "pooled." + side);
  }

  // ModelSamplingFlux's shift, the sigmas and the noise KSampler uses (the functions it calls).
  auto model = output_of<ModelValue>(run_->pe, kModel, 0);
  ASSERT_TRUE(model);
  const ModelSamplingSpec spec = model->sampling_spec();
  EXPECT_EQ(spec.kind, ModelSamplingSpec::Kind::FLUX);
  EXPECT_DOUBLE_EQ(spec.shift, std::stod(golden_meta("shift")));
  const std::unique_ptr<ModelSampling> ms = model_sampling_create(spec);
  test::expect_sampling_inputs(*ms, trajectory_golden(), golden("sigmas"));

  // KSampler's latent (VAE space), VAEDecode's image and SaveImage's PNG.
  auto latent = output_of<Latent>(run_->pe, kSampler, 0);
  auto image = output_of<ImageValue>(run_->pe, kDecode, 0);
  ASSERT_TRUE(latent && image);
  ASSERT_EQ(run_->ui.at(kSave)["images"].size(), 1u);
  test::expect_decoded(
      *latent, *image, golden("latent"), golden("image"), kStageTol,
      (dir_ / "output" / run_->ui.at(kSave)["images"][0]["filename"].get<std::string>()).string(),
      e2e_path("flux_e2e_0.png"));
}

// The sampler's trajectory, step by step: the workflow's patched model and guided conditioning
// through the sampling layer's sample() with the callback ComfyUI's golden recorded (x before
// step i, the model's x0 at step i, model space). cfg 1 calls the positive only (ComfyUI's
// cfg-1 optimisation). Its end, taken back to VAE space, is the KSampler node's latent.
TEST_P(FluxE2E, SamplerTrajectoryMatchesComfyUI) {
  Status st = execute();
  ASSERT_TRUE(st.ok()) << st.str();
  auto model = output_of<ModelValue>(run_->pe, kModel, 0);
  auto pos = output_of<Conditioning>(run_->pe, kGuided, 0);
  auto neg = output_of<Conditioning>(run_->pe, kNegative, 0);
  auto latent = output_of<Latent>(run_->pe, kSampler, 0);
  ASSERT_TRUE(model && pos && neg && latent);
  test::expect_trajectory(*model, *pos, *neg, run_->ex, trajectory_golden(), *latent->samples,
                          kStageTol);
}

INSTANTIATE_TEST_SUITE_P(Settings, FluxE2E,
                         ::testing::Values(SettingsIn::METADATA, SettingsIn::YAML),
                         [](const ::testing::TestParamInfo<SettingsIn>& i) {
                           return std::string(i.param == SettingsIn::YAML ? "Yaml" : "Metadata");
                         });

// Without the RoPE axes the tiny DiT loads but refuses to sample, naming the checkpoint and the
// key that states them (Note [flux rope axes]); axes that do not fit its heads fail at load.
TEST(FluxE2ESettings, MissingOrWrongAxesNameTheKey) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("hr_flux_e2e_axes_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path bare = dir / kCheckpoint;
  fs::create_symlink(e2e_path(kCheckpoint), bare);
  auto m = model_load(bare.string());
  ASSERT_TRUE(m.ok()) << m.status().str();
  HostTensor x(DType::F32, Shape{1, 16, 2, 2}), t(DType::F32, Shape{1});
  CondEntry e;
  e.cond = std::make_shared<const HostTensor>(DType::F32, Shape{1, 3, 4});
  e.extras.set(kCondPooledOutput, std::make_shared<const HostTensor>(DType::F32, Shape{1, 4}));
  const CondEntry* entries[] = {&e};
  auto backend = cpu_backend_create(1);
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend, alloc, executor_policies_default(*backend));
  auto run = (*m)->diffusion->run(ex, (*m)->diffusion->weights(), x, t, entries);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("headroom.flux.axes_dim"), std::string::npos)
      << run.status().str();
  EXPECT_NE(run.status().message().find(bare.string()), std::string::npos) << run.status().str();

  std::ofstream(dir / "tiny-flux.yaml") << "headroom:\n  flux:\n    axes_dim: [2, 2, 2]\n";
  auto wrong = model_load(bare.string());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("tiny-flux.yaml (headroom.flux.axes_dim)"),
            std::string::npos)
      << wrong.status().str();
  EXPECT_NE(wrong.status().message().find("head width 8"), std::string::npos)
      << wrong.status().str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hr
