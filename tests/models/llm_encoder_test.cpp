// The decoder-only LLM text encoder (models/llm/) against ComfyUI a125cd84's own
// comfy/text_encoders/llama.py on a tiny random Qwen3-shaped model (tests/data/qwen/README.md):
// every hidden state in f32 on the CPU backend, the presets, config detection and its refusals.
#include "models/llm/llm_encoder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/safetensors.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

// ComfyUI ran in f32 on the CPU; only summation order and the RoPE / RMS norm rounding differ:
// we see <= 2.5e-7. Tried mistakes give (short / long case): K/V heads tiled instead of
// interleaved 1.13 / 0.75, RoPE on (2p, 2p+1) pairs instead of rotate_half 0.24 / 0.26, q/k norm
// without its weight 0.11 / 0.16 (a one-token prompt sees neither of the last two: position 0
// rotates nothing and one key takes all the attention).
constexpr double kTol = 1e-5;
const char* const kCases[] = {"one", "short", "long"};

class LLMEncoder : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = SafetensorsFile::open(test::data_path("qwen/llm_golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    golden_ = std::move(g).value();
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
    for (const SafetensorsEntry& e : golden_->entries()) {
      if (e.name.rfind("model.", 0) == 0) weights_.put(e.name, golden(e.name));
      if (e.name.rfind("qwen25.model.", 0) == 0) qwen25_.put(e.name.substr(7), golden(e.name));
    }
    weights_.bind(backend_.get(), alloc_.get());
    qwen25_.bind(backend_.get(), alloc_.get());
  }

  HostTensor golden(const std::string& name) {
    auto t = golden_->load(name);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  std::vector<std::vector<int32_t>> ids(const std::string& name) {
    HostTensor t = golden(name + ".ids");
    std::vector<std::vector<int32_t>> r(1);
    const auto* p = static_cast<const int64_t*>(t.data());
    for (int64_t j = 0; j < t.shape()[1]; ++j) r[0].push_back(int32_t(p[j]));
    return r;
  }

  // hidden_states[i] of a case ("<case>" or "qwen25.<case>"): [1, L, hidden].
  HostTensor hidden_state(const std::string& name, int i) {
    HostTensor all = golden(name + ".hidden_states");
    const int64_t L = all.shape()[1], D = all.shape()[2];
    HostTensor t(DType::F32, {1, L, D});
    std::copy_n(all.f32() + i * L * D, L * D, t.f32());
    return t;
  }

  std::unique_ptr<WeightSet> without(const std::string& gone) {
    auto w = std::make_unique<WeightSet>();
    for (const std::string& n : weights_.names())
      if (n != gone) w->put(n, weights_.find(n)->clone());
    return w;
  }

  std::unique_ptr<SafetensorsFile> golden_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
  WeightSet weights_;  // the Qwen3-shaped model
  WeightSet qwen25_;   // the Qwen2.5-shaped one, "qwen25." stripped
};

TEST_F(LLMEncoder, DetectsConfigFromKeys) {
  auto prefix = llm_encoder_prefix(*golden_);
  ASSERT_TRUE(prefix.ok()) << prefix.status().str();
  EXPECT_EQ(*prefix, "");
  auto c = llm_config_detect(*golden_, *prefix);
  ASSERT_TRUE(c.ok()) << c.status().str();
  const auto want = nlohmann::json::parse(golden_->metadata().at("config"));
  EXPECT_EQ(c->vocab, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(c->hidden, want["hidden_size"].get<int64_t>());
  EXPECT_EQ(c->intermediate, want["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c->layers, want["num_hidden_layers"].get<int>());
  EXPECT_EQ(c->heads, want["num_attention_heads"].get<int>());
  EXPECT_EQ(c->kv_heads, want["num_key_value_heads"].get<int>());
  EXPECT_EQ(c->head_dim, want["head_dim"].get<int64_t>());
  EXPECT_FLOAT_EQ(c->rope_theta, want["rope_theta"].get<float>());
  EXPECT_FLOAT_EQ(c->rms_eps, want["rms_norm_eps"].get<float>());
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->output_hidden_state, -2);
  EXPECT_FALSE(c->output_norm);
  // The same from loaded weights.
  auto cw = llm_config_detect(weights_);
  ASSERT_TRUE(cw.ok()) << cw.status().str();
  EXPECT_EQ(cw->heads, c->heads);
  EXPECT_EQ(cw->kv_heads, c->kv_heads);
  EXPECT_EQ(cw->layers, c->layers);
}

// Z-Image's choice, hidden_states[-2] without the final norm (ComfyUI intermediate_output=-2).
TEST_F(LLMEncoder, SecondToLastHiddenStateMatchesComfyUI) {
  auto c = llm_config_detect(weights_);
  ASSERT_TRUE(c.ok()) << c.status().str();
  for (const std::string name : kCases) {
    auto z = llm_encoder_run(*ex_, weights_, *c, ids(name), DType::F32);
    ASSERT_TRUE(z.ok()) << name << ": " << z.status().str();
    const double e = test::rel_err(*z, golden(name + ".hidden_m2"));
    std::printf("  %-6s hidden_states[-2] rel err %.3g\n", name.c_str(), e);
    EXPECT_LT(e, kTol) << name;
  }
}

// Every hidden state: the embeddings, each layer's output, the last one after model.norm.
TEST_F(LLMEncoder, EveryHiddenStateMatchesComfyUI) {
  auto detected = llm_config_detect(weights_);
  ASSERT_TRUE(detected.ok()) << detected.status().str();
  for (const std::string name : kCases)
    for (int i = 0; i <= detected->layers; ++i) {
      LLMConfig c = *detected;
      c.output_hidden_state = i;
      auto z = llm_encoder_run(*ex_, weights_, c, ids(name), DType::F32);
      ASSERT_TRUE(z.ok()) << name << " " << i << ": " << z.status().str();
      const double e = test::rel_err(*z, hidden_state(name, i));
      std::printf("  %-6s hidden_states[%d] rel err %.3g\n", name.c_str(), i, e);
      EXPECT_LT(e, kTol) << name << " hidden_states[" << i << "]";
    }
}

// Qwen2.5's shape (Qwen-Image's language model): q/k/v bias, no q/k norm. Without q_norm the
// head width is not in the file: detection takes it as an argument.
TEST_F(LLMEncoder, Qwen25ShapeMatchesComfyUI) {
  const auto want = nlohmann::json::parse(golden_->metadata().at("config_qwen25"));
  const int64_t head_dim = want["head_dim"].get<int64_t>();
  auto refused = llm_config_detect(*golden_, "qwen25.");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().str().find("q_proj"), std::string::npos) << refused.status().str();
  auto detected = llm_config_detect(*golden_, "qwen25.", head_dim);
  ASSERT_TRUE(detected.ok()) << detected.status().str();
  EXPECT_TRUE(detected->qkv_bias);
  EXPECT_FALSE(detected->qk_norm);
  EXPECT_EQ(detected->layers, want["num_hidden_layers"].get<int>());
  EXPECT_EQ(detected->heads, want["num_attention_heads"].get<int>());
  EXPECT_EQ(detected->kv_heads, want["num_key_value_heads"].get<int>());
  for (const std::string name : {"short", "long"})
    for (int i = 0; i <= detected->layers; ++i) {
      LLMConfig c = *detected;
      c.output_hidden_state = i;
      auto z = llm_encoder_run(*ex_, qwen25_, c, ids("qwen25." + name), DType::F32);
      ASSERT_TRUE(z.ok()) << name << " " << i << ": " << z.status().str();
      const double e = test::rel_err(*z, hidden_state("qwen25." + name, i));
      std::printf("  qwen25 %-6s hidden_states[%d] rel err %.3g\n", name.c_str(), i, e);
      EXPECT_LT(e, kTol) << name << " hidden_states[" << i << "]";
    }
}

// Real files are bf16 (qwen_3_4b.safetensors): the weights stay bf16 and are cast to the f32
// compute at use (Note [LLM encoder precision]); the embedding table is gathered in bf16 and only
// its rows cast. That must equal running f32 weights holding the same bf16-rounded values.
TEST_F(LLMEncoder, Bf16StorageCastsAtUse) {
  auto detected = llm_config_detect(weights_);
  ASSERT_TRUE(detected.ok()) << detected.status().str();
  WeightSet stored, rounded;
  auto map = std::make_shared<WeightStorageMap>();
  for (const std::string& n : weights_.names()) {
    HostTensor b = weights_.find(n)->to(DType::BF16);
    rounded.put(n, b.to(DType::F32));
    stored.put(n, std::move(b));
    (*map)[n] = WeightStorage{DType::BF16, "", false};
  }
  stored.set_storage(map);
  stored.bind(backend_.get(), alloc_.get());
  rounded.bind(backend_.get(), alloc_.get());
  LLMConfig c = *detected;
  c.storage = map;
  auto z = llm_encoder_run(*ex_, stored, c, ids("long"), DType::F32);
  ASSERT_TRUE(z.ok()) << z.status().str();
  auto want = llm_encoder_run(*ex_, rounded, *detected, ids("long"), DType::F32);
  ASSERT_TRUE(want.ok()) << want.status().str();
  EXPECT_EQ(test::rel_err(*z, *want), 0.0);
  // And bf16 rounding is visible against the f32 golden, so the weights really were bf16.
  const double rounding = test::rel_err(*z, golden("long.hidden_m2"));
  std::printf("  bf16-stored vs the f32 golden: rel err %.3g\n", rounding);
  EXPECT_GT(rounding, 1e-4);
}

// The presets build full-size graphs (no weights needed); hidden_states[-2] never reads the last
// layer nor the final norm.
TEST_F(LLMEncoder, PresetGraphsBuild) {
  for (const LLMConfig& c :
       {llm_config_qwen3_4b(), llm_config_qwen3_8b(), llm_config_qwen25_7b()}) {
    auto g = llm_encoder_graph(c, 1, 128, DType::BF16);
    ASSERT_TRUE(g.ok()) << g.status().str();
    const std::string last = "model.layers." + std::to_string(c.layers - 1) + ".";
    EXPECT_NE(
        g->find_weight("model.layers." + std::to_string(c.layers - 2) + ".mlp.down_proj.weight"),
        kNoValue);
    EXPECT_EQ(g->find_weight(last + "mlp.down_proj.weight"), kNoValue);
    EXPECT_EQ(g->find_weight("model.norm.weight"), kNoValue);
  }
}

TEST_F(LLMEncoder, PresetsAreQwenConfigs) {
  const LLMConfig q4 = llm_config_qwen3_4b();
  EXPECT_EQ(q4.layers, 36);
  EXPECT_EQ(q4.hidden, 2560);
  EXPECT_EQ(q4.intermediate, 9728);
  EXPECT_EQ(q4.heads, 32);
  EXPECT_EQ(q4.kv_heads, 8);
  EXPECT_EQ(q4.head_dim, 128);
  EXPECT_EQ(q4.vocab, 151936);
  EXPECT_FLOAT_EQ(q4.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(q4.rms_eps, 1e-6f);
  EXPECT_TRUE(q4.qk_norm);
  EXPECT_FALSE(q4.qkv_bias);
  const LLMConfig q8 = llm_config_qwen3_8b();
  EXPECT_EQ(q8.hidden, 4096);
  EXPECT_EQ(q8.intermediate, 12288);
  EXPECT_EQ(q8.layers, 36);
  const LLMConfig q25 = llm_config_qwen25_7b();
  EXPECT_EQ(q25.hidden, 3584);
  EXPECT_EQ(q25.kv_heads, 4);
  EXPECT_TRUE(q25.qkv_bias);
  EXPECT_FALSE(q25.qk_norm);
  EXPECT_EQ(q25.vocab, 152064);
  auto p = llm_config_preset("qwen3_8b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->hidden, 4096);
  EXPECT_EQ(llm_config_preset("gemma").status().code(), ErrorCode::NOT_FOUND);
  // The HF layout, first and last.
  for (const LLMConfig& want : {q4, q8, q25}) {
    std::vector<std::string> names;
    for (const auto& [name, shape] : llm_tensors(want)) names.push_back(name);
    EXPECT_EQ(names.front(), "model.embed_tokens.weight");
    EXPECT_EQ(names.back(), "model.norm.weight");
  }
}

TEST_F(LLMEncoder, RefusesMissingOrMisshapedTensors) {
  const std::string gone = "model.layers.2.mlp.up_proj.weight";
  auto m = llm_config_detect(*without(gone));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(m.status().str().find(gone), std::string::npos) << m.status().str();

  const std::string knorm = "model.layers.1.self_attn.k_norm.weight";
  auto k = llm_config_detect(*without(knorm));
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().str().find(knorm), std::string::npos) << k.status().str();

  WeightSet misshaped;
  const std::string bad = "model.layers.0.self_attn.v_proj.weight";
  for (const std::string& n : weights_.names())
    misshaped.put(n, n == bad ? HostTensor(DType::F32, {16, 32}) : weights_.find(n)->clone());
  auto s = llm_config_detect(misshaped);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().str().find(bad), std::string::npos) << s.status().str();

  WeightSet empty;
  EXPECT_NE(llm_config_detect(empty).status().str().find("model.embed_tokens.weight"),
            std::string::npos);

  auto c = llm_config_detect(weights_);
  ASSERT_TRUE(c.ok());
  // Token ids outside the vocabulary, ragged rows and a hidden state the model lacks.
  auto r = llm_encoder_run(*ex_, weights_, *c, {{5, int32_t(c->vocab), 1}}, DType::F32);
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
  r = llm_encoder_run(*ex_, weights_, *c, {{5, 6}, {7}}, DType::F32);
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
  LLMConfig far = *c;
  far.output_hidden_state = c->layers + 1;
  EXPECT_EQ(llm_encoder_graph(far, 1, 3, DType::F32).status().code(), ErrorCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hr
