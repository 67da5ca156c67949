// The T5 v1.1 encoder graph against ComfyUI a125cd84's own T5 (tests/data/t5/README.md, "T5
// encoder reference data"): a tiny random f16 checkpoint run in f32 on the CPU backend, the
// relative position buckets, config detection and its refusals.
#include "models/t5/t5_encoder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "test_compare.h"
#include "test_paths.h"

namespace hr {
namespace {

// The checkpoint is f16, upcast exactly to f32 as ComfyUI's manual_cast does; ComfyUI computed
// in f32 on the CPU (attention_basic), so only summation order differs (and ComfyUI's k * sqrt(8)
// then / sqrt(8), Note [T5 attention scale]): we see 3e-7 / 4e-7. 1e-5 (tighter than the 1e-4
// asked for) is chosen because tried mistakes give: erf GELU instead of tanh 1.2e-4 / 1.4e-4
// (would pass at 1e-4), a 1/sqrt(d_kv) scale on the scores 0.42 / 0.57.
constexpr double kTol = 1e-5;

std::string t5_data(const std::string& f) { return test::data_path("t5/" + f); }

nlohmann::json golden_json() {
  std::ifstream f(t5_data("t5_encoder_golden.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class T5Encoder : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ck = SafetensorsFile::open(t5_data("tiny_t5_encoder.safetensors"));
    ASSERT_TRUE(ck.ok()) << ck.status().str();
    checkpoint_ = std::move(ck).value();
    auto g = SafetensorsFile::open(t5_data("t5_encoder_golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    golden_ = std::move(g).value();
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }

  std::unique_ptr<WeightSet> load(const std::string& prefix) {
    auto w = std::make_unique<WeightSet>();
    Status s = weights_load_prefix(*w, *checkpoint_, prefix, DType::F32);
    EXPECT_TRUE(s.ok()) << s.str();
    w->bind(backend_.get(), alloc_.get());
    return w;
  }

  HostTensor golden(const std::string& name) {
    auto t = golden_->load(name);
    EXPECT_TRUE(t.ok()) << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }

  std::vector<std::vector<int32_t>> rows(const std::string& name) {
    HostTensor t = golden(name);
    std::vector<std::vector<int32_t>> r(size_t(t.shape()[0]));
    const auto* p = static_cast<const int64_t*>(t.data());
    for (size_t b = 0; b < r.size(); ++b)
      for (int64_t j = 0; j < t.shape()[1]; ++j)
        r[b].push_back(int32_t(p[int64_t(b) * t.shape()[1] + j]));
    return r;
  }

  std::unique_ptr<SafetensorsFile> checkpoint_, golden_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(T5Encoder, DetectsConfigUnderPrefix) {
  auto prefix = t5_encoder_prefix(*checkpoint_);
  ASSERT_TRUE(prefix.ok()) << prefix.status().str();
  EXPECT_EQ(*prefix, "text_encoders.t5xxl.transformer.");
  auto c = t5_encoder_detect(*checkpoint_, *prefix);
  ASSERT_TRUE(c.ok()) << c.status().str();
  const nlohmann::json j = golden_json();
  const nlohmann::json& want = j["config"];
  EXPECT_EQ(c->vocab, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(c->d_model, want["d_model"].get<int64_t>());
  EXPECT_EQ(c->d_kv, want["d_kv"].get<int64_t>());
  EXPECT_EQ(c->heads, want["num_heads"].get<int>());
  EXPECT_EQ(c->d_ff, want["d_ff"].get<int64_t>());
  EXPECT_EQ(c->layers, want["num_layers"].get<int>());
  EXPECT_EQ(c->relative_attention_num_buckets, 32);
  EXPECT_FALSE(c->bias_per_layer);
  // The same from loaded weights with the prefix stripped.
  auto w = load(*prefix);
  auto cw = t5_encoder_detect(*w);
  ASSERT_TRUE(cw.ok()) << cw.status().str();
  EXPECT_EQ(cw->d_kv, c->d_kv);
  EXPECT_EQ(cw->layers, c->layers);
}

TEST_F(T5Encoder, RelativePositionBucketsMatchComfyUI) {
  const nlohmann::json j = golden_json();
  const int64_t first = j["relative_position_first"].get<int64_t>();
  const auto& want = j["relative_position_bucket"];
  ASSERT_EQ(want.size(), 601u);
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t rel = first + int64_t(i);
    EXPECT_EQ(t5_relative_position_bucket(rel, 32, 128), want[i].get<int>()) << "relative " << rel;
  }
  // The table is bucket(key - query).
  HostTensor t = t5_relative_bucket_table(3);
  const auto* p = static_cast<const int64_t*>(t.data());
  EXPECT_EQ(p[0 * 3 + 2], t5_relative_position_bucket(2));
  EXPECT_EQ(p[2 * 3 + 0], t5_relative_position_bucket(-2));
}

TEST_F(T5Encoder, LastHiddenStateMatchesComfyUI) {
  auto w = load("text_encoders.t5xxl.transformer.");
  auto c = t5_encoder_detect(*w);
  ASSERT_TRUE(c.ok()) << c.status().str();
  for (const std::string name : {"short", "flux256"}) {
    auto z = t5_encoder_run(*ex_, *w, *c, rows(name + ".ids"), DType::F32);
    ASSERT_TRUE(z.ok()) << name << ": " << z.status().str();
    const double e = test::rel_err(*z, golden(name + ".hidden"));
    std::printf("  %-10s rel err %.3g\n", name.c_str(), e);
    EXPECT_LT(e, kTol) << name;
  }
}

TEST_F(T5Encoder, RefusesMissingOrMisshapedTensors) {
  auto full = load("text_encoders.t5xxl.transformer.");
  const std::string gone = "encoder.block.1.layer.1.DenseReluDense.wi_1.weight";
  WeightSet missing;
  for (const std::string& n : full->names())
    if (n != gone) missing.put(n, full->find(n)->clone());
  auto c = t5_encoder_detect(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(c.status().str().find(gone), std::string::npos) << c.status().str();

  WeightSet misshaped;
  const std::string bad = "encoder.block.0.layer.0.SelfAttention.o.weight";
  for (const std::string& n : full->names())
    misshaped.put(n, n == bad ? HostTensor(DType::F32, {32, 16}) : full->find(n)->clone());
  auto m = t5_encoder_detect(misshaped);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().str().find(bad), std::string::npos) << m.status().str();

  WeightSet empty;
  EXPECT_NE(t5_encoder_detect(empty).status().str().find("shared.weight"), std::string::npos);

  // Token ids outside the vocabulary are refused before running.
  auto cfg = t5_encoder_detect(*full);
  ASSERT_TRUE(cfg.ok());
  auto r = t5_encoder_run(*ex_, *full, *cfg, {{5, int32_t(cfg->vocab), 1}}, DType::F32);
  EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace hr
