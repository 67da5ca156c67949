// The LoRA nodes in workflows on the tiny SD1 checkpoint (CPU, f32): stacked LoraLoaders end to
// end against ComfyUI's patched weights, the nodes' edge cases and failures, and a plan run.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/png_io.h"
#include "models/model_paths.h"
#include "node_harness.h"
#include "png_compare.h"
#include "test_compare.h"
#include "workflow/prompt.h"
#include "workflow/workflow_plan.h"
#include "workflow_json.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCheckpoint = "tiny-sd1.safetensors";
// The checkpoint with ComfyUI's patched tensors of the sd1_stack case in place
// (reference_checkpoint_write): rounded to the checkpoint's f16, and in float32.
constexpr const char* kReference = "tiny-sd1-comfy-stack.safetensors";
constexpr const char* kReferenceF32 = "tiny-sd1-comfy-stack-f32.safetensors";

// One LoRA of a chain: file and (model, clip) strengths; clip nullopt: LoraLoaderModelOnly.
struct LoraUse {
  std::string file;
  double strength_model = 1.0;
  std::optional<double> strength_clip;
};

// cases.json's sd1_stack: sd1_stack_a at (0.8, 0.6), then sd1_stack_b at (-0.5, 1.2).
std::vector<LoraUse> sd1_stack() {
  return {{"sd1_stack_a.safetensors", 0.8, 0.6}, {"sd1_stack_b.safetensors", -0.5, 1.2}};
}

// ComfyUI's default graph on `ckpt` (64x64, 3 euler steps) with the LoRA nodes of `loras`
// chained between the checkpoint loader and the sampler / text encoders.
json lora_workflow(const std::string& ckpt, const std::vector<LoraUse>& loras,
                   const std::string& prefix) {
  using test::link;
  using test::node;
  json wf;
  wf["4"] = node("CheckpointLoaderSimple", {{"ckpt_name", ckpt}});
  wf["5"] = node("EmptyLatentImage", {{"width", 64}, {"height", 64}, {"batch_size", 1}});
  json model = link("4", 0), clip = link("4", 1);
  int id = 10;
  for (const LoraUse& l : loras) {
    const std::string n = std::to_string(id++);
    json in = {{"model", model}, {"lora_name", l.file}, {"strength_model", l.strength_model}};
    if (l.strength_clip) {
      in["clip"] = clip;
      in["strength_clip"] = *l.strength_clip;
    }
    wf[n] = node(l.strength_clip ? "LoraLoader" : "LoraLoaderModelOnly", in);
    model = json::array({n, 0});
    if (l.strength_clip) clip = json::array({n, 1});
  }
  wf["6"] = node("CLIPTextEncode", {{"text", "a cat sitting on a chair"}, {"clip", clip}});
  wf["7"] = node("CLIPTextEncode", {{"text", ""}, {"clip", clip}});
  wf["3"] = node("KSampler", {{"seed", 5},
                              {"steps", 3},
                              {"cfg", 7.0},
                              {"sampler_name", "euler"},
                              {"scheduler", "normal"},
                              {"denoise", 1.0},
                              {"model", model},
                              {"positive", link("6")},
                              {"negative", link("7")},
                              {"latent_image", link("5")}});
  wf["8"] = node("VAEDecode", {{"samples", link("3")}, {"vae", link("4", 2)}});
  wf["9"] = node("SaveImage", {{"filename_prefix", prefix}, {"images", link("8")}});
  return wf;
}

// The checkpoint with every tensor of sd1_stack.golden.safetensors (ComfyUI's LoraLoader chain
// of the sd1_stack case, tests/data/lora/README.md) replaced by ComfyUI's patched tensor:
// `rounded`, as ComfyUI stores it in the checkpoint's dtype (`<name>@f16` for an f16 tensor);
// else its float32 result, which is what ComfyUI samples with on the CPU (there it keeps SD1's
// weights in float32: model_management.unet_dtype, should_use_fp16 is false on a CPU).
Status reference_checkpoint_write(const fs::path& out, bool rounded) {
  HR_ASSIGN_OR_RETURN(auto ckpt, SafetensorsFile::open(test::golden_path(kCheckpoint)));
  HR_ASSIGN_OR_RETURN(auto gold,
                      SafetensorsFile::open(test::data_path("lora/sd1_stack.golden.safetensors")));
  std::vector<HostTensor> tensors;
  tensors.reserve(ckpt->entries().size());
  size_t replaced = 0;
  for (const SafetensorsEntry& e : ckpt->entries()) {
    const char* suffix = e.dtype == DType::F16 ? "@f16" : e.dtype == DType::BF16 ? "@bf16" : "";
    const std::string patched = rounded ? e.name + suffix : e.name;
    if (gold->contains(patched)) {
      HR_ASSIGN_OR_RETURN(HostTensor t, gold->load(patched, rounded ? e.dtype : DType::F32));
      tensors.push_back(std::move(t));
      ++replaced;
    } else {
      HR_ASSIGN_OR_RETURN(HostTensor t, ckpt->load(e.name));
      tensors.push_back(std::move(t));
    }
  }
  if (replaced * 3 != gold->entries().size())  // each golden tensor as f32, @f16 and @bf16
    return make_error(ErrorCode::INTERNAL, "{} of {} golden tensors found in the checkpoint",
                      replaced, gold->entries().size() / 3);
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (size_t i = 0; i < tensors.size(); ++i)
    named.emplace_back(ckpt->entries()[i].name, &tensors[i]);
  return safetensors_write(out.string(), named, ckpt->metadata());
}

// A LoRA file of `tensors` (name, shape), filled with small f16 values.
Status lora_file_write(const fs::path& out,
                       const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::vector<HostTensor> ts;
  for (const auto& [name, shape] : tensors) {
    HostTensor f(DType::F32, shape);
    for (int64_t i = 0; i < f.numel(); ++i) f.f32()[i] = 0.01f * float(i % 7 - 3);
    ts.push_back(f.to(DType::F16));
  }
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (size_t i = 0; i < ts.size(); ++i) named.emplace_back(tensors[i].first, &ts[i]);
  return safetensors_write(out.string(), named);
}

class LoraNodesTest : public ::testing::Test {
 protected:
  // models/checkpoints: the tiny checkpoint and the reference; models/loras: the sd1 LoRA files
  // of tests/data/lora and the broken ones the failure tests load.
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_lora_nodes_{}", ::getpid());
    fs::remove_all(dir_);
    const fs::path ckpts = dir_ / "models/checkpoints", loras = dir_ / "models/loras";
    fs::create_directories(ckpts);
    fs::create_directories(loras);
    fs::create_symlink(test::golden_path(kCheckpoint), ckpts / kCheckpoint);
    // The checkpoint's config (its text encoder's 4 heads) for both checkpoints.
    fs::create_symlink(test::golden_path("tiny-sd1.yaml"), ckpts / "tiny-sd1.yaml");
    fs::create_symlink(test::golden_path("tiny-sd1.yaml"), ckpts / "tiny-sd1-comfy-stack.yaml");
    fs::create_symlink(test::golden_path("tiny-sd1.yaml"), ckpts / "tiny-sd1-comfy-stack-f32.yaml");
    Status st = reference_checkpoint_write(ckpts / kReference, true);
    ASSERT_TRUE(st.ok()) << st.str();
    st = reference_checkpoint_write(ckpts / kReferenceF32, false);
    ASSERT_TRUE(st.ok()) << st.str();
    for (const char* f :
         {"sd1_stack_a.safetensors", "sd1_stack_b.safetensors", "sd1_kohya.safetensors"})
      fs::create_symlink(test::data_path(std::string("lora/") + f), loras / f);
    // Flux's kohya names: nothing of an SD1 model matches.
    st = lora_file_write(
        loras / "flux_style.safetensors",
        {{"lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", Shape{96, 4}},
         {"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight", Shape{4, 32}}});
    ASSERT_TRUE(st.ok()) << st.str();
    // attn1.to_q is [32, 32]; an up factor of 7 rows does not fit it.
    st = lora_file_write(
        loras / "misfit.safetensors",
        {{"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight",
          Shape{7, 4}},
         {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight",
          Shape{4, 32}}});
    ASSERT_TRUE(st.ok()) << st.str();
    // Factors that do not chain: up [32, 4] after down [3, 32].
    st = lora_file_write(
        loras / "unchained.safetensors",
        {{"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k.lora_up.weight",
          Shape{32, 4}},
         {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k.lora_down.weight",
          Shape{3, 32}}});
    ASSERT_TRUE(st.ok()) << st.str();
    // sd1_stack_a cut in the middle of its data section.
    std::ifstream in(test::data_path("lora/sd1_stack_a.safetensors"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(loras / "truncated.safetensors", std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size() / 2));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    rt_.wire(opts_);
    opts_.models_dir = (dir_ / "models").string();
    opts_.output_dir = (dir_ / "output").string();
    opts_.on_event = [this](const ExecEvent& e) {
      if (e.kind == ExecEvent::Kind::WARNING) warnings_.push_back(e);
    };
  }

  PromptValidation validate(const json& wf) { return prompt_validate(wf, registry_); }

  // Validates and runs `wf` on executor_ (one executor for every prompt of a test, as a server's
  // queue has it).
  Result<ExecResult> execute(const json& wf) {
    PromptValidation v = validate(wf);
    if (!v.ok) return make_error(ErrorCode::INVALID_ARGUMENT, "{}", v.summary());
    prompts_.push_back(std::make_unique<Prompt>(std::move(v.prompt)));
    return executor_.execute(*prompts_.back(), opts_);
  }

  // The PNG the SaveImage node "9" wrote.
  Image8 png_of(const ExecResult& r) {
    auto it = r.ui_outputs.find("9");
    if (it == r.ui_outputs.end() || it->second["images"].empty()) return Image8{};
    auto img = png_read(
        (dir_ / "output" / it->second["images"][0]["filename"].get<std::string>()).string());
    return img.ok() ? std::move(img).value() : Image8{};
  }

  template <class T>
  std::shared_ptr<const T> output(const std::string& id, size_t slot) const {
    const std::vector<std::any>* outs = executor_.node_outputs(id);
    if (!outs || outs->size() <= slot) return nullptr;
    auto p = std::any_cast<std::shared_ptr<const T>>(&(*outs)[slot]);
    return p ? *p : nullptr;
  }

  // Runs one node directly (as PromptExecutor does after validation), without the combo check,
  // so that a lora_name no folder has reaches the node.
  Result<std::vector<std::any>> run_node(const std::string& class_type, const NodeInputs& in) {
    const NodeDef* def = registry_.find(class_type);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", class_type);
    ExecContext ctx{opts_, node_prompt_, "1"};
    return def->run(ctx, in);
  }

  // CheckpointLoaderSimple's (MODEL, CLIP, VAE) for the tiny checkpoint.
  std::vector<std::any> checkpoint() {
    NodeInputs in;
    in.literals["ckpt_name"] = kCheckpoint;
    auto r = run_node("CheckpointLoaderSimple", in);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : std::vector<std::any>{};
  }

  // LoraLoader's (or, with no clip strength, LoraLoaderModelOnly's) inputs on `ckpt`'s outputs.
  static NodeInputs lora_inputs(const std::vector<std::any>& ckpt, const LoraUse& l) {
    NodeInputs in;
    in.links["model"] = ckpt.at(0);
    in.literals["lora_name"] = l.file;
    in.literals["strength_model"] = l.strength_model;
    if (l.strength_clip) {
      in.links["clip"] = ckpt.at(1);
      in.literals["strength_clip"] = *l.strength_clip;
    }
    return in;
  }
  static const char* lora_class(const LoraUse& l) {
    return l.strength_clip ? "LoraLoader" : "LoraLoaderModelOnly";
  }

  static fs::path dir_;
  NodeRegistry registry_;
  test::CpuRuntime rt_;
  ExecOptions opts_;
  PromptExecutor executor_;
  std::vector<std::unique_ptr<Prompt>> prompts_;  // the executor's prompts stay alive
  Prompt node_prompt_;
  std::vector<ExecEvent> warnings_;
};
fs::path LoraNodesTest::dir_;

template <class T>
std::shared_ptr<const T> value_of(const std::any& a) {
  auto p = std::any_cast<std::shared_ptr<const T>>(&a);
  return p ? *p : nullptr;
}

// The end-to-end check of two stacked LoRAs. Why this reference: the goldens of
// sd1_stack.golden.safetensors are ComfyUI's own patching of these two files in this order
// with these strengths (make_lora_golden.py runs comfy.sd.load_lora_for_models and
// calculate_weight), so a checkpoint holding them is the model ComfyUI's LoraLoader chain
// samples with; and headroom's pipeline on a plain checkpoint (CLIPTextEncode, KSampler,
// VAEDecode, SaveImage) is held to ComfyUI's stage by stage by e2e_test. The LoRA run matching
// the reference run therefore says that LoraLoader feeds that pipeline ComfyUI's patched
// weights, in the UNet and in the text encoder alike.
// Two references: the patched tensors rounded to the checkpoint's f16 (the PNG within one
// level), and in float32, ComfyUI's CPU weights, which headroom's CPU run (f32) patches to as
// well, so that its conditioning and latent match to e2e_test's CPU tolerances.
TEST_F(LoraNodesTest, TwoStackedLorasMatchComfyUIsPatchedCheckpoint) {
  struct Stages {
    std::shared_ptr<const Conditioning> cond;
    std::shared_ptr<const Latent> latent;
    Image8 png;
  };
  auto stages = [this](const json& wf) -> std::optional<Stages> {
    auto r = execute(wf);
    EXPECT_TRUE(r.ok()) << r.status().str();
    if (!r.ok()) return std::nullopt;
    Stages s{output<Conditioning>("6", 0), output<Latent>("3", 0), png_of(*r)};
    EXPECT_TRUE(s.cond && s.latent && s.png.width == 64);
    return s.cond && s.latent ? std::optional<Stages>(std::move(s)) : std::nullopt;
  };
  const auto lora = stages(lora_workflow(kCheckpoint, sd1_stack(), "lora"));
  const auto ref16 = stages(lora_workflow(kReference, {}, "reference"));
  const auto ref32 = stages(lora_workflow(kReferenceF32, {}, "reference32"));
  const auto plain = stages(lora_workflow(kCheckpoint, {}, "plain"));
  ASSERT_TRUE(lora && ref16 && ref32 && plain);
  EXPECT_TRUE(warnings_.empty()) << warnings_.front().message;

  auto compare = [&](const Stages& ref, const char* what, double cond_tol, double latent_tol) {
    const double cond = test::rel_err(*lora->cond->entries[0].cond, *ref.cond->entries[0].cond);
    const double latent = test::rel_err(*lora->latent->samples, *ref.latent->samples);
    const test::PngStats png = test::png_compare(lora->png, ref.png);
    std::printf("  LoRA vs %s: cond rel err %.3g, latent rel err %.3g, png %s\n", what, cond,
                latent, test::png_describe(png).c_str());
    EXPECT_LT(cond, cond_tol) << what;
    EXPECT_LT(latent, latent_tol) << what;
    EXPECT_TRUE(png.same_size) << what;
    EXPECT_LE(png.max_abs, 1) << what << ": " << test::png_describe(png);
    return latent;
  };
  // f16 rounding of eight patched weights moves the conditioning by ~2e-4 (measured 1.9e-4, the
  // latent 3.2e-4; 2026-12-03): bounds 5x above.
  compare(*ref16, "the f16 reference", 1e-3, 2e-3);
  const double latent_err = compare(*ref32, "the f32 reference", 1e-5, 1e-4);

  // The LoRAs had an effect: the unpatched checkpoint's image is another one.
  const double effect = test::rel_err(*plain->latent->samples, *ref32->latent->samples);
  const test::PngStats differ = test::png_compare(lora->png, plain->png);
  std::printf("  unpatched vs the f32 reference: latent rel err %.3g; png, LoRA vs unpatched: %s\n",
              effect, test::png_describe(differ).c_str());
  EXPECT_GT(effect, 0.1);
  EXPECT_GT(effect, 100 * latent_err);
  EXPECT_TRUE(differ.same_size);
  EXPECT_GT(differ.mean_abs, 5.0) << test::png_describe(differ);
  EXPECT_GT(differ.max_abs, 50) << test::png_describe(differ);
}

// ComfyUI's LoraLoader returns its inputs when both strengths are 0, before it looks for the
// file: the very same objects, and a file that is missing or unreadable is never opened.
TEST_F(LoraNodesTest, StrengthsZeroReturnTheInputsWithoutOpeningTheFile) {
  std::vector<std::any> ckpt = checkpoint();
  ASSERT_EQ(ckpt.size(), 3u);
  const auto model = value_of<ModelValue>(ckpt[0]);
  const auto clip = value_of<CLIPValue>(ckpt[1]);
  ASSERT_TRUE(model && clip);
  for (const char* file :
       {"no-such-lora.safetensors", "truncated.safetensors", "flux_style.safetensors"}) {
    SCOPED_TRACE(file);
    auto both = run_node("LoraLoader", lora_inputs(ckpt, {file, 0.0, 0.0}));
    ASSERT_TRUE(both.ok()) << both.status().str();
    ASSERT_EQ(both->size(), 2u);
    EXPECT_EQ(value_of<ModelValue>((*both)[0]), model);
    EXPECT_EQ(value_of<CLIPValue>((*both)[1]), clip);
    auto only = run_node("LoraLoaderModelOnly", lora_inputs(ckpt, {file, 0.0, std::nullopt}));
    ASSERT_TRUE(only.ok()) << only.status().str();
    ASSERT_EQ(only->size(), 1u);
    EXPECT_EQ(value_of<ModelValue>((*only)[0]), model);
  }
  EXPECT_TRUE(warnings_.empty());
  // One strength not 0: the file is looked for, and a missing one is an error naming it.
  auto clip_only =
      run_node("LoraLoader", lora_inputs(ckpt, {"no-such-lora.safetensors", 0.0, 0.5}));
  ASSERT_FALSE(clip_only.ok());
  EXPECT_NE(clip_only.status().message().find("no-such-lora.safetensors"), std::string::npos)
      << clip_only.status().str();
}

// A workflow cannot name a LoRA the folder does not have, whatever the strengths: ComfyUI's
// validation answers "Value not in list" for lora_name before anything runs.
TEST_F(LoraNodesTest, MissingLoraNameIsAValidationErrorNamingIt) {
  PromptValidation v =
      validate(lora_workflow(kCheckpoint, {{"no-such-lora.safetensors", 0.0, 0.0}}, "x"));
  ASSERT_FALSE(v.ok);
  const std::string errors = v.error.dump();
  EXPECT_NE(errors.find("value_not_in_list"), std::string::npos) << errors;
  EXPECT_NE(errors.find("no-such-lora.safetensors"), std::string::npos) << errors;
  EXPECT_NE(errors.find("lora_name"), std::string::npos) << errors;
}

// LoraLoaderModelOnly is LoraLoader without a CLIP (ComfyUI: load_lora(model, None, ..., 0)):
// the model gets the same patches LoraLoader gives it, and the file's text-encoder keys are
// keys not loaded, reported once as a WARNING event of the node.
TEST_F(LoraNodesTest, ModelOnlyPatchesTheModelAndReportsTheClipKeys) {
  std::vector<std::any> ckpt = checkpoint();
  ASSERT_EQ(ckpt.size(), 3u);
  auto both = run_node("LoraLoader", lora_inputs(ckpt, {"sd1_stack_a.safetensors", 0.8, 0.6}));
  ASSERT_TRUE(both.ok()) << both.status().str();
  EXPECT_TRUE(warnings_.empty()) << "every key of sd1_stack_a loads: " << warnings_.front().message;
  const auto both_model = value_of<ModelValue>((*both)[0]);
  const auto both_clip = value_of<CLIPValue>((*both)[1]);
  ASSERT_TRUE(both_model && both_model->patched && both_clip);
  EXPECT_NE(both_clip, value_of<CLIPValue>(ckpt[1]));
  EXPECT_TRUE(std::any_of(both_clip->patched.begin(), both_clip->patched.end(),
                          [](const auto& p) { return p && p->patches_any(); }));

  auto only = run_node("LoraLoaderModelOnly",
                       lora_inputs(ckpt, {"sd1_stack_a.safetensors", 0.8, std::nullopt}));
  ASSERT_TRUE(only.ok()) << only.status().str();
  ASSERT_EQ(only->size(), 1u);
  const auto model = value_of<ModelValue>((*only)[0]);
  ASSERT_TRUE(model && model->patched);
  EXPECT_EQ(model->model, value_of<ModelValue>(ckpt[0])->model);  // the same loaded model
  std::vector<std::string> got, want;
  for (const auto& [w, ps] : model->patched->patches().by_weight) got.push_back(w);
  for (const auto& [w, ps] : both_model->patched->patches().by_weight) want.push_back(w);
  EXPECT_EQ(got, want);
  EXPECT_FALSE(got.empty());

  // sd1_stack_a's text-encoder tensors: fc1 and q_proj, each alpha, down and up.
  ASSERT_EQ(warnings_.size(), 1u);
  const ExecEvent& w = warnings_[0];
  EXPECT_EQ(w.kind, ExecEvent::Kind::WARNING);
  EXPECT_EQ(w.node_id, "1");
  EXPECT_NE(w.message.find("sd1_stack_a.safetensors"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("6 lora key(s) not loaded"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("lora_te_text_model_encoder_layers_0_"), std::string::npos) << w.message;
  EXPECT_EQ(w.message.find("lora_unet_"), std::string::npos) << w.message;
}

// A LoRA applied after ModelSamplingFlux keeps its model sampling (ComfyUI's ModelPatcher.clone
// copies the object patches), and ModelSamplingFlux after a LoRA keeps the LoRA's view.
TEST_F(LoraNodesTest, ModelSamplingPatchAndLoraCompose) {
  std::vector<std::any> ckpt = checkpoint();
  ASSERT_EQ(ckpt.size(), 3u);
  NodeInputs ms;
  ms.links["model"] = ckpt.at(0);
  ms.literals = {{"max_shift", 1.15}, {"base_shift", 0.5}, {"width", 1024}, {"height", 1024}};
  auto flux = run_node("ModelSamplingFlux", ms);
  ASSERT_TRUE(flux.ok()) << flux.status().str();
  std::vector<std::any> patched_ckpt = ckpt;
  patched_ckpt[0] = (*flux)[0];
  auto lora = run_node("LoraLoaderModelOnly",
                       lora_inputs(patched_ckpt, {"sd1_stack_a.safetensors", 0.8, std::nullopt}));
  ASSERT_TRUE(lora.ok()) << lora.status().str();
  const auto after = value_of<ModelValue>((*lora)[0]);
  ASSERT_TRUE(after && after->patched && after->sampling);
  EXPECT_EQ(after->sampling->kind, ModelSamplingSpec::Kind::FLUX);
  EXPECT_DOUBLE_EQ(after->sampling->shift, 1.15);

  ms.links["model"] = (*lora)[0];
  ms.literals["width"] = 512;
  auto again = run_node("ModelSamplingFlux", ms);
  ASSERT_TRUE(again.ok()) << again.status().str();
  const auto last = value_of<ModelValue>((*again)[0]);
  ASSERT_TRUE(last && last->sampling);
  EXPECT_EQ(last->patched, after->patched);
  EXPECT_LT(last->sampling->shift, 1.15);
}

// sd1_kohya's two deliberately unmatched tensors (cases.json's not_loaded) make exactly one
// WARNING that lists both; the rest of the file is applied.
TEST_F(LoraNodesTest, KohyaUnmatchedKeysAreOneWarning) {
  std::vector<std::any> ckpt = checkpoint();
  ASSERT_EQ(ckpt.size(), 3u);
  auto r = run_node("LoraLoader", lora_inputs(ckpt, {"sd1_kohya.safetensors", 0.75, 1.25}));
  ASSERT_TRUE(r.ok()) << r.status().str();
  auto model = value_of<ModelValue>((*r)[0]);
  ASSERT_TRUE(model && model->patched && model->patched->patches_any());
  ASSERT_EQ(warnings_.size(), 1u);
  const std::string& m = warnings_[0].message;
  EXPECT_NE(m.find("sd1_kohya.safetensors"), std::string::npos) << m;
  // ComfyUI's "lora key not loaded" keys of the file, as make_lora_golden.py recorded them.
  std::ifstream f(test::data_path("lora/cases.json"));
  ASSERT_TRUE(f.good());
  const json keys = json::parse(f)["cases"]["sd1_kohya"]["not_loaded"]["sd1_kohya.safetensors"];
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_NE(m.find(fmt::format("{} lora key(s) not loaded", keys.size())), std::string::npos) << m;
  for (const json& k : keys) EXPECT_NE(m.find(k.get<std::string>()), std::string::npos) << k << m;
}

// Files that cannot be applied fail the node with an error that says which file (and, for a
// factor that does not fit, which key); the job fails alone and the next prompt on the same
// executor runs (ComfyUI's queue goes on).
TEST_F(LoraNodesTest, BadFilesFailTheJobAndTheQueueGoesOn) {
  struct Bad {
    const char* file;
    std::vector<const char*> named;  // what the error must name
  };
  const std::vector<Bad> bad = {
      {"flux_style.safetensors", {"flux_style.safetensors", "Flux"}},
      {"truncated.safetensors", {"truncated.safetensors"}},
      {"misfit.safetensors",
       {"misfit.safetensors",
        "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"}},
      {"unchained.safetensors",
       {"unchained.safetensors",
        "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k"}},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.file);
    // The node alone, and the node in a job.
    std::vector<std::any> ckpt = checkpoint();
    ASSERT_EQ(ckpt.size(), 3u);
    auto node = run_node("LoraLoader", lora_inputs(ckpt, {b.file, 1.0, 1.0}));
    ASSERT_FALSE(node.ok());
    auto job = execute(lora_workflow(kCheckpoint, {{b.file, 1.0, 1.0}}, "bad"));
    ASSERT_FALSE(job.ok());
    for (const char* s : b.named) {
      EXPECT_NE(node.status().message().find(s), std::string::npos) << node.status().str();
      EXPECT_NE(job.status().message().find(s), std::string::npos) << job.status().str();
    }
    std::printf("  %s: %s\n", b.file, job.status().str().c_str());
  }
  // A missing file behind a validated name (deleted after the prompt was queued).
  const fs::path gone = dir_ / "models/loras/gone.safetensors";
  fs::copy_file(test::data_path("lora/sd1_stack_a.safetensors"), gone);
  PromptValidation v =
      validate(lora_workflow(kCheckpoint, {{"gone.safetensors", 1.0, 1.0}}, "gone"));
  ASSERT_TRUE(v.ok) << v.summary();
  fs::remove(gone);
  auto job = executor_.execute(v.prompt, opts_);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("gone.safetensors"), std::string::npos)
      << job.status().str();

  auto good = execute(lora_workflow(kCheckpoint, sd1_stack(), "after"));
  ASSERT_TRUE(good.ok()) << good.status().str();
  EXPECT_TRUE(png_of(*good).width == 64);
}

// A plan run (Note [plan run] in workflow/workflow_plan.cpp: headers only, placeholder
// tensors) of the stacked-LoRA workflow completes, lists both LoRA nodes, and predicts the
// run's allocator peak as it does without LoRAs (workflow_plan_test: within 2 %).
TEST_F(LoraNodesTest, PlanRunOfTheLoraWorkflow) {
  PromptValidation v = validate(lora_workflow(kCheckpoint, sd1_stack(), "plan"));
  ASSERT_TRUE(v.ok) << v.summary();
  WorkflowPlanOptions o;
  o.backend = rt_.backend.get();
  o.models_dir = (dir_ / "models").string();
  auto plan = workflow_plan(v.prompt, o);
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  std::printf("%s", workflow_plan_format(*plan).c_str());
  EXPECT_TRUE(plan->fits);
  std::vector<std::string> order;
  for (const NodePlan& n : plan->nodes) order.push_back(n.class_type);
  ASSERT_EQ(plan->nodes.size(), 9u);
  EXPECT_EQ(std::count(order.begin(), order.end(), "LoraLoader"), 2);
  const auto first_lora = std::find(order.begin(), order.end(), "LoraLoader");
  EXPECT_LT(first_lora - order.begin(),
            std::find(order.begin(), order.end(), "KSampler") - order.begin());
  EXPECT_EQ(order.back(), "SaveImage");

  auto run = execute(lora_workflow(kCheckpoint, sd1_stack(), "plan"));
  ASSERT_TRUE(run.ok()) << run.status().str();
  const uint64_t real = rt_.allocator->total().peak;
  std::printf("  predicted peak %llu, real %llu\n", (unsigned long long)plan->peak,
              (unsigned long long)real);
  EXPECT_LE(std::fabs(double(plan->peak) - double(real)), 0.02 * double(real));

  // The same workflow without the LoRA nodes: the model calls read as many weight bytes or more
  // with the LoRAs (their patched copies and factors are weights of the plan).
  PromptValidation pv = validate(lora_workflow(kCheckpoint, {}, "plan"));
  ASSERT_TRUE(pv.ok) << pv.summary();
  auto plain = workflow_plan(pv.prompt, o);
  ASSERT_TRUE(plain.ok()) << plain.status().str();
  auto weights_of = [](const WorkflowPlan& wp, const std::string& cls) {
    uint64_t b = 0;
    for (const NodePlan& n : wp.nodes)
      if (n.class_type == cls) b = std::max(b, n.weight_bytes);
    return b;
  };
  for (const char* cls : {"CLIPTextEncode", "KSampler"}) {
    std::printf("  %s weights: %llu with the LoRAs, %llu without\n", cls,
                (unsigned long long)weights_of(*plan, cls),
                (unsigned long long)weights_of(*plain, cls));
    EXPECT_GE(weights_of(*plan, cls), weights_of(*plain, cls)) << cls;
  }
  std::printf("  peak: %llu with the LoRAs, %llu without\n", (unsigned long long)plan->peak,
              (unsigned long long)plain->peak);
}

// With no weight resident (--novram's weights cap 0) under the smallest budget the plan finds,
// every UNet weight streams, the patched ones patched after their copy
// (PatchedWeights::weight_patch_streamed): the LoRA run's latent and PNG are those of the
// unbudgeted LoRA run (measured: equal to the bit, 2026-12-03), so streaming loses no patch.
TEST_F(LoraNodesTest, StreamedWeightsArePatchedToo) {
  const json wf = lora_workflow(kCheckpoint, sd1_stack(), "free");
  auto free_run = execute(wf);
  ASSERT_TRUE(free_run.ok()) << free_run.status().str();
  auto free_latent = output<Latent>("3", 0);
  ASSERT_TRUE(free_latent);
  const Image8 free_png = png_of(*free_run);

  PromptValidation v = validate(lora_workflow(kCheckpoint, sd1_stack(), "budget"));
  ASSERT_TRUE(v.ok) << v.summary();
  WorkflowPlanOptions po;
  po.backend = rt_.backend.get();
  po.models_dir = (dir_ / "models").string();
  po.weights_cap = 0;  // --novram
  auto free_plan = workflow_plan(v.prompt, po);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status().str();
  const uint64_t budget = free_plan->smallest_budget;
  po.budget = budget;
  po.find_smallest_budget = false;
  auto plan = workflow_plan(v.prompt, po);
  ASSERT_TRUE(plan.ok()) << plan.status().str();
  EXPECT_TRUE(plan->fits);

  Allocator alloc(*rt_.backend, budget, eviction_policy());
  alloc.set_weights_cap(0);  // --novram
  Executor ex(*rt_.backend, alloc, executor_policies_default(*rt_.backend));
  ExecOptions o = opts_;
  o.allocator = &alloc;
  o.executor = &ex;
  std::vector<std::string> memory;
  o.on_event = [&memory](const ExecEvent& e) {
    if (e.kind == ExecEvent::Kind::MEMORY) memory.push_back(e.class_type + ": " + e.message);
  };
  PromptExecutor pe;
  auto r = pe.execute(v.prompt, o);
  ASSERT_TRUE(r.ok()) << r.status().str();
  for (const std::string& m : memory) std::printf("  %s\n", m.c_str());
  EXPECT_TRUE(std::any_of(memory.begin(), memory.end(),
                          [](const std::string& m) {
                            return m.starts_with("KSampler") &&
                                   m.find("stream") != std::string::npos;
                          }))
      << "the sampler did not stream under " << budget << " bytes";
  EXPECT_LE(alloc.total().peak, budget);
  // The plan of this run predicts its peak, the LoRA's device bytes included (the sampler holds
  // them beside the ring: 108 KiB here, which the plan without LoRAs does not have).
  std::printf("  novram, budget %llu: predicted peak %llu, real %llu\n", (unsigned long long)budget,
              (unsigned long long)plan->peak, (unsigned long long)alloc.total().peak);
  EXPECT_LE(std::fabs(double(plan->peak) - double(alloc.total().peak)),
            0.02 * double(alloc.total().peak));
  PromptValidation pv = validate(lora_workflow(kCheckpoint, {}, "budget"));
  ASSERT_TRUE(pv.ok) << pv.summary();
  auto plain = workflow_plan(pv.prompt, po);
  ASSERT_TRUE(plain.ok()) << plain.status().str();
  auto sampler_resident = [](const WorkflowPlan& wp) {
    for (const NodePlan& n : wp.nodes)
      if (n.class_type == "KSampler") return n.resident_bytes;
    return uint64_t(0);
  };
  std::printf("  novram: the sampler's resident bytes %llu with the LoRAs, %llu without\n",
              (unsigned long long)sampler_resident(*plan),
              (unsigned long long)sampler_resident(*plain));
  EXPECT_GT(sampler_resident(*plan), sampler_resident(*plain));

  const std::vector<std::any>* outs = pe.node_outputs("3");
  ASSERT_TRUE(outs && !outs->empty());
  const auto latent = std::any_cast<std::shared_ptr<const Latent>>((*outs)[0]);
  const double err = test::rel_err(*latent->samples, *free_latent->samples);
  const test::PngStats png = test::png_compare(png_of(*r), free_png);
  std::printf("  budget %llu: latent rel err %.3g against the unbudgeted run, png %s\n",
              (unsigned long long)budget, err, test::png_describe(png).c_str());
  EXPECT_LT(err, 1e-5);
  EXPECT_LE(png.max_abs, 1) << test::png_describe(png);
}

// LoRAs in a folder that extra_model_paths.yaml adds (A1111's `loras: models/Lora`), in a
// subfolder: the nodes offer them beside the models folder's, under ComfyUI's relative name, and
// load them from there.
TEST_F(LoraNodesTest, LorasFromExtraModelPaths) {
  const fs::path webui = dir_ / "webui", yaml = dir_ / "extra_model_paths.yaml";
  fs::create_directories(webui / "models/Lora/style");
  fs::create_symlink(test::data_path("lora/sd1_stack_b.safetensors"),
                     webui / "models/Lora/style/b.safetensors");
  std::ofstream(yaml) << "a111:\n  base_path: " << webui.string() << "\n  loras: models/Lora\n";
  ModelPaths mp = ModelPaths::from_models_dir((dir_ / "models").string());
  Status st = mp.add_config_file(yaml.string());
  ASSERT_TRUE(st.ok()) << st.str();
  auto paths = std::make_shared<const ModelPaths>(std::move(mp));
  NodeRegistry reg;
  nodes_register(reg, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string(), paths});
  for (const char* cls : {"LoraLoader", "LoraLoaderModelOnly"}) {
    const std::vector<std::string> offered = reg.find(cls)->input("lora_name")->combo_options();
    EXPECT_NE(std::find(offered.begin(), offered.end(), "style/b.safetensors"), offered.end())
        << cls;
    EXPECT_NE(std::find(offered.begin(), offered.end(), "sd1_stack_a.safetensors"), offered.end())
        << cls;
  }
  opts_.model_paths = paths;
  PromptValidation v = prompt_validate(
      lora_workflow(kCheckpoint, {{"style/b.safetensors", -0.5, std::nullopt}}, "extra"), reg);
  ASSERT_TRUE(v.ok) << v.summary();
  auto r = executor_.execute(v.prompt, opts_);
  ASSERT_TRUE(r.ok()) << r.status().str();
  auto model = output<ModelValue>("10", 0);
  ASSERT_TRUE(model && model->patched);
  EXPECT_NE(model->patched->patches().id.find("style/b.safetensors"), std::string::npos)
      << model->patched->patches().id;
  fs::remove_all(webui);
  fs::remove(yaml);
}

// One executor, prompts in turn as a server's queue runs them: other strengths re-patch from the
// unpatched weights, the checkpoint loader is not run again, the same LoRA set gives the same
// latent to the bit, and the plain checkpoint afterwards samples as before (the loaded weights
// were never patched in place).
TEST_F(LoraNodesTest, OtherStrengthsRepatchFromTheUnpatchedWeights) {
  auto latent_of = [this](const json& wf, bool loader_cached) -> HostTensor {
    auto r = execute(wf);
    EXPECT_TRUE(r.ok()) << r.status().str();
    if (!r.ok()) return HostTensor();
    const bool cached = std::find(r->cached.begin(), r->cached.end(), "4") != r->cached.end();
    EXPECT_EQ(cached, loader_cached);
    auto l = output<Latent>("3", 0);
    return l ? l->samples->clone() : HostTensor();
  };
  std::vector<LoraUse> other = sd1_stack();
  other[1].strength_model = 0.7;
  const HostTensor plain = latent_of(lora_workflow(kCheckpoint, {}, "a"), false);
  const HostTensor stack = latent_of(lora_workflow(kCheckpoint, sd1_stack(), "b"), true);
  const HostTensor changed = latent_of(lora_workflow(kCheckpoint, other, "c"), true);
  const HostTensor again = latent_of(lora_workflow(kCheckpoint, sd1_stack(), "d"), true);
  const HostTensor plain_again = latent_of(lora_workflow(kCheckpoint, {}, "e"), true);
  ASSERT_FALSE(plain.empty() || stack.empty() || changed.empty() || again.empty() ||
               plain_again.empty());
  std::printf(
      "  stack vs plain %.3g, other strength vs stack %.3g, stack again %.3g, plain again %.3g\n",
      test::rel_err(stack, plain), test::rel_err(changed, stack), test::rel_err(again, stack),
      test::rel_err(plain_again, plain));
  EXPECT_GT(test::rel_err(stack, plain), 0.1);
  EXPECT_GT(test::rel_err(changed, stack), 1e-2);
  EXPECT_EQ(test::rel_err(again, stack), 0.0);
  EXPECT_EQ(test::rel_err(plain_again, plain), 0.0);
}

}  // namespace
}  // namespace hr
