// Z-Image's text-encoder component (models/zimage/zimage_text_encoder.h): a bare Qwen3 file is
// detected as Z-Image's encoder, and encode() is the template's ids (ComfyUI's path,
// zimage_comfy_prompt_ids, checked against transformers in qwen_tokenizer_golden_test) through
// the LLM encoder's hidden_states[-2] (checked against ComfyUI in llm_encoder_test), with the
// weights kept in bf16 and cast at use. The model is the tiny Qwen3 of
// tests/data/qwen/llm_golden.safetensors with its embedding table widened to Qwen's full
// vocabulary (the template's ids are above 151000).
#include "models/zimage/zimage_text_encoder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/llm/llm_encoder.h"
#include "models/qwen/qwen_chat_template.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "models/zimage/zimage_family.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kQwenVocab = 151936;

struct Cpu {
  std::unique_ptr<Backend> backend = cpu_backend_create(1);
  Allocator alloc{*backend};
  Executor ex{*backend, alloc, executor_policies_default(*backend)};
};

class ZImageTextEncoderTest : public ::testing::Test {
 protected:
  // The golden's Qwen3 ("model.*") in bf16, its embedding widened to kQwenVocab rows (the
  // golden's 300 rows first, then a fixed pattern), written once per test binary.
  static void SetUpTestSuite() {
    auto g = SafetensorsFile::open(test::data_path("qwen/llm_golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    std::vector<HostTensor> keep;
    keep.reserve((*g)->entries().size());
    std::vector<std::pair<std::string, const HostTensor*>> tensors;
    for (const SafetensorsEntry& e : (*g)->entries()) {
      if (e.name.rfind("model.", 0) != 0) continue;
      Result<HostTensor> t = (*g)->load(e.name, DType::F32);
      ASSERT_TRUE(t.ok()) << t.status().str();
      HostTensor v = std::move(t).value();
      if (e.name == "model.embed_tokens.weight") {
        const int64_t rows = v.shape()[0], width = v.shape()[1];
        HostTensor wide(DType::F32, Shape{kQwenVocab, width});
        for (int64_t i = 0; i < kQwenVocab * width; ++i)
          wide.f32()[i] = i < rows * width ? v.f32()[i] : float(std::sin(0.37 * double(i)));
        v = std::move(wide);
      }
      keep.push_back(v.to(DType::BF16));
      tensors.push_back({e.name, &keep.back()});
    }
    path_ = (fs::temp_directory_path() /
             ("hr_zimage_te_test_" + std::to_string(getpid()) + ".safetensors"))
                .string();
    ASSERT_TRUE(safetensors_write(path_, tensors).ok());
  }
  static void TearDownTestSuite() { fs::remove(path_); }

  static std::string path_;
  Cpu cpu_;
};
std::string ZImageTextEncoderTest::path_;

TEST_F(ZImageTextEncoderTest, BareQwen3FileIsZImagesEncoder) {
  auto f = SafetensorsFile::open(path_);
  ASSERT_TRUE(f.ok()) << f.status().str();
  Result<CheckpointInfo> info = checkpoint_inspect(**f);
  ASSERT_TRUE(info.ok()) << info.status().str();
  EXPECT_EQ(info->family_name(), "zimage");
  EXPECT_FALSE(info->has_diffusion);
  EXPECT_FALSE(info->has_vae);
  ASSERT_EQ(info->text_encoders.size(), 1u);
  EXPECT_EQ(info->text_encoders[0].kind, kZImageQwen3);
  EXPECT_EQ(info->text_encoders[0].prefix, "");
  auto lines = info->family->settings_describe(**f, *info);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].second.find("3 layers"), std::string::npos) << lines[0].second;
}

// A Qwen2.5-shaped model (no QK norm) is not Z-Image's encoder.
TEST_F(ZImageTextEncoderTest, Qwen25IsNotDetected) {
  auto g = SafetensorsFile::open(test::data_path("qwen/llm_golden.safetensors"));
  ASSERT_TRUE(g.ok());
  std::vector<HostTensor> keep;
  keep.reserve((*g)->entries().size());
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for (const SafetensorsEntry& e : (*g)->entries()) {
    if (e.name.rfind("qwen25.model.", 0) != 0) continue;
    Result<HostTensor> t = (*g)->load(e.name, DType::F32);
    ASSERT_TRUE(t.ok()) << t.status().str();
    keep.push_back(std::move(t).value());
    tensors.push_back({e.name.substr(7), &keep.back()});
  }
  const std::string p = path_ + ".qwen25";
  ASSERT_TRUE(safetensors_write(p, tensors).ok());
  auto f = SafetensorsFile::open(p);
  fs::remove(p);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(checkpoint_inspect(**f).ok());
}

TEST_F(ZImageTextEncoderTest, EncodesTheTemplateThroughHiddenStateMinus2) {
  auto f = SafetensorsFile::open(path_);
  ASSERT_TRUE(f.ok());
  std::shared_ptr<const SafetensorsFile> file = std::move(f).value();
  Result<CheckpointInfo> info = checkpoint_inspect(*file);
  ASSERT_TRUE(info.ok()) << info.status().str();
  Result<std::unique_ptr<TextEncoder>> enc = text_encoder_load(file, *info, LoadOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().str();
  EXPECT_EQ((*enc)->parts(), std::vector<std::string>{"qwen3_4b"});
  auto* z = dynamic_cast<ZImageTextEncoder*>(enc->get());
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->config().vocab, kQwenVocab);
  EXPECT_EQ(z->config().output_hidden_state, -2);
  EXPECT_FALSE(z->config().output_norm);
  ASSERT_NE(z->config().storage, nullptr);  // bf16 kept, cast at use
  EXPECT_EQ(z->stores()[0]->find("model.norm.weight")->dtype(), DType::BF16);

  const std::string prompt = "a \\(red\\) fox, 4k";
  Result<CondEntry> e = (*enc)->encode(cpu_.ex, text_parts_all(**enc, prompt), 0, {});
  ASSERT_TRUE(e.ok()) << e.status().str();
  EXPECT_EQ(e->pooled(), nullptr);

  // The reference: the same ids and weights (bf16 values, exact in f32) through the encoder.
  auto tok = qwen_tokenizer_shared("", QwenAddedTokens::CONFIG);
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = zimage_comfy_prompt_ids(**tok, prompt);
  ASSERT_GT(ids.size(), 8u);
  EXPECT_EQ(ids.front(), QwenTokenizer::kImStart);
  ASSERT_EQ(e->cond->shape(), (Shape{1, int64_t(ids.size()), 32}));
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, *file, "", DType::F32).ok());
  Result<LLMConfig> cfg = llm_config_detect(w);
  ASSERT_TRUE(cfg.ok()) << cfg.status().str();
  Result<HostTensor> ref = llm_encoder_run(cpu_.ex, w, *cfg, {ids}, DType::F32);
  ASSERT_TRUE(ref.ok()) << ref.status().str();
  const double err = test::rel_err(*e->cond, *ref);
  std::printf("zimage text encoder vs llm_encoder_run rel error %.3g\n", err);
  EXPECT_LT(err, 1e-6);

  // The last hidden state (normed) is a different tensor: the test tells the two apart.
  LLMConfig last = *cfg;
  last.output_hidden_state = -1;
  Result<HostTensor> other = llm_encoder_run(cpu_.ex, w, last, {ids}, DType::F32);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(test::rel_err(*e->cond, *other), 1e-2);
}

TEST_F(ZImageTextEncoderTest, RefusesCLIPSetLastLayer) {
  auto f = SafetensorsFile::open(path_);
  ASSERT_TRUE(f.ok());
  std::shared_ptr<const SafetensorsFile> file = std::move(f).value();
  Result<CheckpointInfo> info = checkpoint_inspect(*file);
  ASSERT_TRUE(info.ok());
  Result<std::unique_ptr<TextEncoder>> enc = text_encoder_load(file, *info, LoadOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().str();
  Result<CondEntry> e = (*enc)->encode(cpu_.ex, text_parts_all(**enc, "x"), -2, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::UNSUPPORTED);
}

// The golden's own 300-token vocabulary cannot hold the template's ids: a clear refusal.
TEST_F(ZImageTextEncoderTest, RefusesIdsOutsideASmallVocabulary) {
  auto f = SafetensorsFile::open(test::data_path("qwen/llm_golden.safetensors"));
  ASSERT_TRUE(f.ok());
  std::shared_ptr<const SafetensorsFile> file = std::move(f).value();
  Result<CheckpointInfo> info = checkpoint_inspect(*file);
  ASSERT_TRUE(info.ok()) << info.status().str();
  Result<std::unique_ptr<TextEncoder>> enc = text_encoder_load(file, *info, LoadOptions{});
  ASSERT_TRUE(enc.ok()) << enc.status().str();
  Result<CondEntry> e = (*enc)->encode(cpu_.ex, text_parts_all(**enc, "x"), 0, {});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hr
