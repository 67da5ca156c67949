// Flux's text-encoder component against ComfyUI a125cd84's own FluxClipModel
// (tests/data/flux/make_flux_te_golden.py): the tiny CLIP-L of tiny-sd1 and the tiny T5 on the CPU
// in f32, tokens from headroom's tokenizers checked against the reference ids, prompt weights,
// CLIPSetLastLayer, a T5 whose activations overflow float16, loading from one checkpoint, and the
// bare-file detection DualCLIPLoader uses.
#include "models/flux/flux_text_encoder.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/prompt_weights.h"
#include "models/text_encoder_file.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// Both sides compute in f32 from the same f16 weights; only summation order differs (the T5
// golden test sees 3e-7). 1e-5 is tighter than the 1e-4 asked for.
constexpr double kTol = 1e-5;
constexpr const char* kClipPrefix = "cond_stage_model.transformer.";   // in tiny-sd1
constexpr const char* kT5Prefix = "text_encoders.t5xxl.transformer.";  // in tiny_t5_encoder
constexpr int kClipHeads = 4;                                          // tiny-sd1.yaml

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().str();
  return f.ok() ? std::shared_ptr<const SafetensorsFile>(std::move(f).value()) : nullptr;
}

// The file's tensors under `prefix`, renamed to `to` + the rest, `scale` applied (exactly: powers
// of two in the tensor's own dtype) to the names it lists.
void copy_tensors(const SafetensorsFile& f, const std::string& prefix, const std::string& to,
                  const nlohmann::json& scale,
                  std::vector<std::pair<std::string, HostTensor>>& out) {
  for (const SafetensorsEntry& e : f.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = e.name.substr(prefix.size());
    auto t = f.load(e.name);
    ASSERT_TRUE(t.ok()) << t.status().str();
    HostTensor v = std::move(t).value();
    if (scale.contains(rest)) {
      HostTensor x = v.to(DType::F32);
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] *= scale[rest].get<float>();
      v = x.to(e.dtype);
    }
    out.emplace_back(to + rest, std::move(v));
  }
}

Status write(const fs::path& path, const std::vector<std::pair<std::string, HostTensor>>& ts,
             const std::map<std::string, std::string>& meta = {}) {
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (const auto& [n, t] : ts) named.emplace_back(n, &t);
  return safetensors_write(path.string(), named, meta);
}

class FluxTextEncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_flux_te_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
  }

  void SetUp() override {
    clip_file_ = open_shared(test::golden_path("tiny-sd1.safetensors"));
    t5_file_ = open_shared(test::data_path("t5/tiny_t5_encoder.safetensors"));
    golden_ = open_shared(test::data_path("flux/flux_te_golden.safetensors"));
    ASSERT_TRUE(clip_file_ && t5_file_ && golden_);
    cases_ = nlohmann::json::parse(golden_->metadata().at("cases"));
    backend_ = cpu_backend_create(1);
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }

  const ModelFamily& family() const { return *flux_text_encoder_family(); }

  std::unique_ptr<TextEncoder> load(std::shared_ptr<const SafetensorsFile> t5,
                                    const std::string& t5_prefix) {
    auto e = flux_text_encoder_load(family(), {clip_file_, kClipPrefix, kClipHeads},
                                    {std::move(t5), t5_prefix, 0}, LoadOptions{});
    EXPECT_TRUE(e.ok()) << e.status().str();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  const nlohmann::json& golden_case(const std::string& name) const {
    for (const auto& c : cases_)
      if (c["name"] == name) return c;
    ADD_FAILURE() << "no golden case " << name;
    return cases_[0];
  }

  HostTensor golden(const std::string& name) {
    auto t = golden_->load(name);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  // headroom's token rows equal the reference tokenizers' (the golden's ids).
  void expect_ids(const TokenChunks& got, const std::string& name) {
    HostTensor ref = golden(name);
    ASSERT_EQ(int64_t(got.size()), ref.shape()[0]) << name;
    const auto* p = static_cast<const int64_t*>(ref.data());
    for (size_t r = 0; r < got.size(); ++r) {
      ASSERT_EQ(int64_t(got.ids[r].size()), ref.shape()[1]) << name;
      for (size_t j = 0; j < got.ids[r].size(); ++j)
        ASSERT_EQ(got.ids[r][j], p[int64_t(r) * ref.shape()[1] + int64_t(j)]) << name << " " << j;
    }
  }

  // Encodes a golden case with `enc` and compares the conditioning and pooled output.
  void check_case(const TextEncoder& enc, const std::string& name) {
    const nlohmann::json& c = golden_case(name);
    const std::string l = c["clip_l"], t5 = c["t5xxl"];
    auto r = enc.encode(*ex_, {{"l", l}, {"t5xxl", t5}}, c["layer"].get<int>(), {});
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().str();
    const HostTensor& cond = *r->cond;
    const HostTensor* pooled = r->pooled();
    ASSERT_NE(pooled, nullptr);
    EXPECT_EQ(cond.shape(), (Shape{1, 256, 32})) << name;
    EXPECT_EQ(pooled->shape(), (Shape{1, 32})) << name;
    for (int64_t i = 0; i < cond.numel(); ++i) ASSERT_TRUE(std::isfinite(cond.f32()[i])) << name;
    const double ec = test::rel_err(cond, golden(name + ".cond"));
    const double ep = test::rel_err(*pooled, golden(name + ".pooled"));
    EXPECT_LT(ec, kTol) << name << " conditioning";
    EXPECT_LT(ep, kTol) << name << " pooled";
    std::printf("%-10s cond rel %.2e  pooled rel %.2e\n", name.c_str(), ec, ep);
  }

  static inline fs::path dir_;
  std::shared_ptr<const SafetensorsFile> clip_file_, t5_file_, golden_;
  nlohmann::json cases_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(FluxTextEncoderTest, TokensMatchReferenceTokenizers) {
  auto clip_tok = tokenizer_for_checkpoint({}, "");
  auto t5_tok = t5_tokenizer_shared("");
  ASSERT_TRUE(clip_tok.ok() && t5_tok.ok());
  for (const auto& c : cases_) {
    const std::string name = c["name"];
    ChunkOptions co;
    co.pad = (*clip_tok)->eos();
    expect_ids(prompt_tokenize(**clip_tok, c["clip_l"].get<std::string>(), co), name + ".l_ids");
    expect_ids(prompt_tokenize(**t5_tok, c["t5xxl"].get<std::string>(), t5xxl_chunk_options(256)),
               name + ".t5_ids");
  }
}

TEST_F(FluxTextEncoderTest, MatchesComfyUI) {
  auto enc = load(t5_file_, kT5Prefix);
  ASSERT_TRUE(enc);
  EXPECT_EQ(enc->parts(), (std::vector<std::string>{"l", "t5xxl"}));
  EXPECT_EQ(&enc->family(), &family());
  EXPECT_EQ(enc->comfy_key_prefix(0), "clip_l.transformer.");
  EXPECT_EQ(enc->comfy_key_prefix(1), "t5xxl.transformer.");
  // ComfyUI's storage: 16-bit weights cast to f32 at use.
  const auto& fe = static_cast<const FluxTextEncoder&>(*enc);
  EXPECT_EQ(fe.t5().weights->find("encoder.block.0.layer.0.SelfAttention.q.weight")->dtype(),
            DType::F16);
  EXPECT_EQ(fe.clip_l().config.dtype, DType::F32);
  for (const char* name : {"plain", "weighted", "empty", "clip_skip"}) check_case(*enc, name);
}

// Note [Flux text encoder precision]: the golden's overflow T5 has a residual stream beyond
// float16's range (ComfyUI's own run recorded its largest |x|, t5_residual_max, 7.5e5), so in f16
// it would become inf and the final norm NaN; ComfyUI computes in f32 and stays finite, and so
// does headroom, matching it. (The CPU backend has no f16 RMS norm, so the f16 failure itself is
// not run here.)
TEST_F(FluxTextEncoderTest, T5OverflowingFloat16StaysFinite) {
  const nlohmann::json& c = golden_case("overflow");
  ASSERT_GT(c["t5_residual_max"].get<double>(), 65504.0);
  std::vector<std::pair<std::string, HostTensor>> ts;
  copy_tensors(*t5_file_, kT5Prefix, "", c["t5_scale"], ts);
  const fs::path path = dir_ / "t5_overflow.safetensors";
  ASSERT_TRUE(write(path, ts).ok());
  auto file = open_shared(path.string());
  auto enc = load(file, "");
  ASSERT_TRUE(enc);
  check_case(*enc, "overflow");

  // The weights stay in the file's f16 (pick_weight_dtype) and are cast to f32 at use.
  const auto& fe = static_cast<const FluxTextEncoder&>(*enc);
  EXPECT_EQ(fe.t5().config.storage->at("encoder.block.0.layer.1.DenseReluDense.wo.weight").dtype,
            DType::F16);
}

// ComfyUI's scaled fp8 T5 (the layout of t5xxl_fp8_e4m3fn_scaled.safetensors): the golden's
// e4m3fn codes and power-of-two scale_weight of every Linear weight, the "scaled_fp8" marker, the
// rest of the tiny T5 in f16. ComfyUI computes with weight * scale in f32.
TEST_F(FluxTextEncoderTest, ScaledFp8T5) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  copy_tensors(*t5_file_, kT5Prefix, "", nlohmann::json::object(), ts);
  size_t replaced = 0;
  for (auto& [name, t] : ts)
    if (golden_->contains("fp8." + name)) {
      auto q = golden_->load("fp8." + name, DType::F8_E4M3);
      ASSERT_TRUE(q.ok()) << q.status().str();
      t = std::move(q).value();
      ++replaced;
    }
  EXPECT_EQ(replaced, 2u * 7u);  // q, k, v, o, wi_0, wi_1, wo in each of 2 blocks
  for (const SafetensorsEntry& e : golden_->entries())
    if (e.name.rfind("fp8.", 0) == 0 && e.name.find(".scale_weight") != std::string::npos)
      ts.emplace_back(e.name.substr(4), golden(e.name));
  ts.emplace_back("scaled_fp8", HostTensor(DType::F8_E4M3, Shape{0}));
  const fs::path path = dir_ / "t5_fp8_scaled.safetensors";
  ASSERT_TRUE(write(path, ts).ok());
  auto enc = load(open_shared(path.string()), "");
  ASSERT_TRUE(enc);
  const auto& fe = static_cast<const FluxTextEncoder&>(*enc);
  const WeightStorage& q =
      fe.t5().config.storage->at("encoder.block.1.layer.0.SelfAttention.q.weight");
  EXPECT_EQ(q.dtype, DType::F8_E4M3);
  EXPECT_FALSE(q.scale.empty());
  check_case(*enc, "fp8_scaled");
}

// A bf16 T5 stays bf16 (pick_weight_dtype keeps a 16-bit dtype) and is cast to f32 at use.
TEST_F(FluxTextEncoderTest, Bf16T5) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  copy_tensors(*t5_file_, kT5Prefix, "", nlohmann::json::object(), ts);
  for (auto& [name, t] : ts) t = t.to(DType::BF16);
  const fs::path path = dir_ / "t5_bf16.safetensors";
  ASSERT_TRUE(write(path, ts).ok());
  auto enc = load(open_shared(path.string()), "");
  ASSERT_TRUE(enc);
  const auto& fe = static_cast<const FluxTextEncoder&>(*enc);
  EXPECT_EQ(fe.t5().weights->find("encoder.block.0.layer.1.DenseReluDense.wo.weight")->dtype(),
            DType::BF16);
  check_case(*enc, "bf16");
}

// A single-file Flux checkpoint: both encoders under ComfyUI's prefixes, through the factory.
TEST_F(FluxTextEncoderTest, SingleFileCheckpoint) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  copy_tensors(*clip_file_, kClipPrefix, kFluxClipLPrefix, nlohmann::json::object(), ts);
  copy_tensors(*t5_file_, kT5Prefix, kFluxT5XXLPrefix, nlohmann::json::object(), ts);
  const fs::path path = dir_ / "flux_te_checkpoint.safetensors";
  ASSERT_TRUE(write(path, ts).ok());
  auto file = open_shared(path.string());
  CheckpointInfo info;
  info.path = path.string();
  info.family = &family();
  info.text_encoders = {{kFluxT5XXL, kFluxT5XXLPrefix}, {kFluxClipL, kFluxClipLPrefix}};
  info.settings.text_encoder_heads.set(std::vector<int>{0, kClipHeads}, "test");
  LoadOptions o;
  auto enc = flux_text_encoder_create(ComponentLoad{file, info, o});
  ASSERT_TRUE(enc.ok()) << enc.status().str();
  check_case(**enc, "weighted");

  info.text_encoders.pop_back();
  auto missing = flux_text_encoder_create(ComponentLoad{file, info, o});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("CLIP-L is missing"), std::string::npos)
      << missing.status().str();
}

TEST_F(FluxTextEncoderTest, BothPromptsRequired) {
  auto enc = load(t5_file_, kT5Prefix);
  ASSERT_TRUE(enc);
  auto r = enc->encode(*ex_, {{"l", "a cat"}}, 0, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'t5xxl' is missing"), std::string::npos) << r.status().str();
}

// comfy/sd.py detect_te_model's distinctions on bare files (DualCLIPLoader's routing).
TEST_F(FluxTextEncoderTest, BareFileDetection) {
  std::vector<std::pair<std::string, HostTensor>> clip, t5;
  copy_tensors(*clip_file_, kClipPrefix, "", nlohmann::json::object(), clip);
  copy_tensors(*t5_file_, kT5Prefix, "", nlohmann::json::object(), t5);
  ASSERT_TRUE(write(dir_ / "clip_l.safetensors", clip).ok());
  ASSERT_TRUE(write(dir_ / "t5.safetensors", t5).ok());
  auto fc = open_shared((dir_ / "clip_l.safetensors").string());
  auto ft = open_shared((dir_ / "t5.safetensors").string());
  std::vector<TextEncoderFound> c = text_encoder_file_detect(*fc);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "clip_l");
  EXPECT_EQ(c[0].prefix, "");
  EXPECT_EQ(c[0].description, "CLIP-L (2 layers, width 32)");
  std::vector<TextEncoderFound> t = text_encoder_file_detect(*ft);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].kind, "t5xxl");
  EXPECT_EQ(t[0].description, "T5 encoder (2 layers, d_model 32)");
  // tiny-sd1 holds a UNet and a VAE beside its CLIP-L; the golden holds no encoder.
  std::vector<TextEncoderFound> sd = text_encoder_file_detect(*clip_file_);
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd[0].prefix, kClipPrefix);
  EXPECT_TRUE(text_encoder_file_detect(*golden_).empty());
  EXPECT_NE(text_encoder_file_describe(*golden_, {}).find("no CLIP or T5 text encoder"),
            std::string::npos);
}

}  // namespace
}  // namespace hr
