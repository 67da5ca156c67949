// fp8 weights (Note [fp8 weights] in graph/graph.h): the tiny SD1 checkpoint with its UNet and
// text-encoder linear weights written as ComfyUI's scaled fp8 (F8_E4M3 bytes, per-layer
// `scale_weight`, the `scaled_fp8` marker) and as comfy_quant layers (`weight_scale`) computes on
// the CPU exactly what the same checkpoint with those weights dequantized (fp8 x scale in float32,
// ComfyUI's manual cast on the CPU) computes, holds the weights as fp8 bytes, and formats headroom
// cannot compute are refused by file, key and format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "models/text_encoder.h"
#include "core/fp8_round.h"
#include "models/weight_format.h"
#include "test_paths.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// The e4m3 code nearest to v (v within the format's range); ties go either way: the reference
// is made from the same codes.
uint8_t nearest_e4m3(float v) {
  uint8_t best = 0;
  float err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const float f = f8e4m3_to_f32(uint8_t(c));
    if (std::isfinite(f) && std::fabs(f - v) < err) {
      err = std::fabs(f - v);
      best = uint8_t(c);
    }
  }
  return best;
}

bool quantized(const std::string& name, const HostTensor& t) {
  const bool part = name.rfind("model.diffusion_model.", 0) == 0 ||
                    name.rfind("cond_stage_model.", 0) == 0;
  return part && t.desc().shape.rank == 2 && name.size() > 7 &&
         name.compare(name.size() - 7, 7, ".weight") == 0 &&
         name.find("embedding") == std::string::npos;
}

enum class Form { SCALED_FP8, COMFY_QUANT };

// Writes the fp8 checkpoint and the dequantized reference; returns how many weights are fp8.
int write_pair(const std::string& fp8_path, const std::string& ref_path, Form form) {
  auto src = SafetensorsFile::open(test::golden_path("tiny-sd1.safetensors"));
  EXPECT_TRUE(src.ok());
  std::vector<std::pair<std::string, HostTensor>> fp8, ref;
  int count = 0;
  for (const SafetensorsEntry& e : (*src)->entries()) {
    HostTensor w = (*src)->load(e.name, DType::F32).value();
    if (!quantized(e.name, w)) {
      ref.emplace_back(e.name, w.clone());
      fp8.emplace_back(e.name, std::move(w));
      continue;
    }
    float most = 0;
    for (int64_t i = 0; i < w.numel(); ++i) most = std::max(most, std::fabs(w.f32()[i]));
    const float scale = most > 0 ? most / 448.0f : 1.0f;
    HostTensor q(DType::F8_E4M3, w.desc().shape), d(DType::F32, w.desc().shape);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const uint8_t c = nearest_e4m3(w.f32()[i] / scale);
      static_cast<uint8_t*>(q.data())[i] = c;
      d.f32()[i] = f8e4m3_to_f32(c) * scale;
    }
    HostTensor s(DType::F32, Shape{});
    s.f32()[0] = scale;
    const std::string layer = e.name.substr(0, e.name.size() - 7);
    if (form == Form::SCALED_FP8) {
      fp8.emplace_back(layer + ".scale_weight", std::move(s));
    } else {
      const std::string j = R"({"format": "float8_e4m3fn"})";
      HostTensor jt(DType::U8, Shape{int64_t(j.size())});
      std::memcpy(jt.data(), j.data(), j.size());
      fp8.emplace_back(layer + ".comfy_quant", std::move(jt));
      fp8.emplace_back(layer + ".weight_scale", std::move(s));
    }
    fp8.emplace_back(e.name, std::move(q));
    ref.emplace_back(e.name, std::move(d));
    ++count;
  }
  if (form == Form::SCALED_FP8) {
    fp8.emplace_back("model.diffusion_model.scaled_fp8", HostTensor(DType::F8_E4M3, Shape{0}));
    fp8.emplace_back("cond_stage_model.transformer.scaled_fp8", HostTensor(DType::F8_E4M3, Shape{0}));
  }
  for (auto* list : {&fp8, &ref}) {
    std::vector<std::pair<std::string, const HostTensor*>> w;
    for (auto& [n, t] : *list) w.emplace_back(n, &t);
    EXPECT_TRUE(safetensors_write(list == &fp8 ? fp8_path : ref_path, w, {}).ok());
  }
  return count;
}

class Fp8Weights : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr_fp8_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    backend_ = cpu_backend_create();
    alloc_ = std::make_unique<Allocator>(*backend_, Allocator::kUnlimited, eviction_policy());
    ex_ = std::make_unique<Executor>(*backend_, *alloc_, executor_policies_default(*backend_));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  fs::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Executor> ex_;
};

HostTensor golden(const std::string& name) {
  auto f = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  return (*f)->load(name, DType::F32).value();
}

// The largest absolute difference of two float32 tensors, for messages.
float worst_of(const HostTensor& a, const HostTensor& b) {
  float worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(a.f32()[i] - b.f32()[i]));
  return worst;
}

// The UNet call and the text encoders' conditioning of `a` equal `b`'s bit for bit.
void expect_same_outputs(Executor& ex, LoadedModel& a, const LoadOptions& oa, LoadedModel& b,
                         const LoadOptions& ob) {
  const HostTensor x = golden("unet.sd1.x"), t = golden("unet.sd1.timesteps"),
                   c = golden("unet.sd1.context");
  auto ua = unet_run(ex, *sd_unet(a), x, t, c, nullptr);
  ASSERT_TRUE(ua.ok()) << ua.status().str();
  auto ub = unet_run(ex, *sd_unet(b), x, t, c, nullptr);
  ASSERT_TRUE(ub.ok()) << ub.status().str();
  ASSERT_EQ(ua->bytes(), ub->bytes());
  EXPECT_EQ(std::memcmp(ua->data(), ub->data(), ua->bytes()), 0)
      << "the UNet differs by " << worst_of(*ua, *ub) << " at most";
  auto ta = text_encoder_load(a.file, a.info, oa);
  ASSERT_TRUE(ta.ok()) << ta.status().str();
  auto tb = text_encoder_load(b.file, b.info, ob);
  ASSERT_TRUE(tb.ok()) << tb.status().str();
  const auto texts = text_parts_all(**ta, "a photo of a cat");
  auto ea = (*ta)->encode(ex, texts, 0, {});
  ASSERT_TRUE(ea.ok()) << ea.status().str();
  auto eb = (*tb)->encode(ex, texts, 0, {});
  ASSERT_TRUE(eb.ok()) << eb.status().str();
  ASSERT_EQ(ea->cond->bytes(), eb->cond->bytes());
  EXPECT_EQ(std::memcmp(ea->cond->data(), eb->cond->data(), ea->cond->bytes()), 0)
      << "the text encoder differs by " << worst_of(*ea->cond, *eb->cond) << " at most";
}

TEST_P(Fp8Weights, ComputeAsTheDequantizedCheckpoint) {
  const int n = write_pair(path("fp8.safetensors"), path("ref.safetensors"), GetParam());
  ASSERT_GT(n, 20);
  LoadOptions o;
  o.models_dir = test::source_dir() + "/data";
  auto fp8 = model_load(path("fp8.safetensors"), o);
  ASSERT_TRUE(fp8.ok()) << fp8.status().str();
  auto ref = model_load(path("ref.safetensors"), o);
  ASSERT_TRUE(ref.ok()) << ref.status().str();

  expect_same_outputs(*ex_, **fp8, o, **ref, o);
  const HostTensor x = golden("unet.sd1.x"), c = golden("unet.sd1.context");
  uint64_t planned[2] = {0, 0}, fp8_planned = 0;  // the plans' weight bytes: fp8, reference
  for (int k = 0; k < 2; ++k) {
    const SDUNet& u = *sd_unet(k == 0 ? **fp8 : **ref);
    auto g = unet_graph(u.config, x.shape()[0], x.shape()[2], x.shape()[3], c.shape()[1], u.dtype);
    ASSERT_TRUE(g.ok()) << g.status().str();
    auto compiled = ex_->compile(*g);
    ASSERT_TRUE(compiled.ok()) << compiled.status().str();
    planned[k] = (*compiled)->weight_bytes;
    if (k == 0)
      for (const WeightUse& wu : (*compiled)->weights)
        fp8_planned += (*compiled)->graph.values()[size_t(wu.value)].desc.dtype == DType::F8_E4M3
                           ? wu.bytes : 0;
  }
  uint64_t fp8_stored = 0;  // the store's fp8 bytes: every linear weight of the UNet
  for (const std::string& w : sd_unet(**fp8)->store.names())
    if (const HostTensor* h = sd_unet(**fp8)->store.find(w); h->dtype() == DType::F8_E4M3)
      fp8_stored += h->bytes();
  EXPECT_GT(fp8_stored, 500'000u) << "fp8 weights were widened at load";
  EXPECT_EQ(fp8_planned, fp8_stored) << "the plan does not count the fp8 weights as fp8";
  EXPECT_LT(planned[0] + 2 * fp8_stored, planned[1]) << "the plan does not count fp8 bytes";

}

INSTANTIATE_TEST_SUITE_P(Forms, Fp8Weights,
                         ::testing::Values(Form::SCALED_FP8, Form::COMFY_QUANT));

// Note [fp8 at load]: UNETLoader's weight_dtype fp8_e4m3fn (and the text-encoder flag) stores
// every float tensor of rank >= 1 of the component in fp8 by torch's cast (core/fp8_round.h,
// checked against torch there) and computes as the checkpoint holding those values would.
TEST_F(Fp8Weights, StoredInFp8AtLoad) {
  auto src = SafetensorsFile::open(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(src.ok());
  std::vector<std::pair<std::string, HostTensor>> ref;
  for (const SafetensorsEntry& e : (*src)->entries()) {
    HostTensor w = (*src)->load(e.name, dtype_is_float(e.dtype) ? DType::F32 : e.dtype).value();
    const bool part = e.name.rfind("model.diffusion_model.", 0) == 0 ||
                      e.name.rfind("cond_stage_model.", 0) == 0;
    if (part && dtype_is_float(e.dtype) && e.shape.rank >= 1)
      for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = f8e4m3_to_f32(f32_to_f8e4m3(w.f32()[i]));
    ref.emplace_back(e.name, std::move(w));
  }
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (auto& [n, t] : ref) list.emplace_back(n, &t);
  ASSERT_TRUE(safetensors_write(path("ref.safetensors"), list, (*src)->metadata()).ok());
  fs::copy_file(test::golden_path("tiny-sd1.yaml"), path("ref.yaml"));  // the same settings

  LoadOptions o;
  o.models_dir = test::source_dir() + "/data";
  auto plain = model_load(path("ref.safetensors"), o);
  ASSERT_TRUE(plain.ok()) << plain.status().str();
  o.diffusion_weight_dtype = DType::F8_E4M3;
  o.text_encoder_weight_dtype = DType::F8_E4M3;
  auto fp8 = model_load(test::golden_path("tiny-sd1.safetensors"), o);
  ASSERT_TRUE(fp8.ok()) << fp8.status().str();
  size_t stored = 0, floats = 0;
  for (const std::string& w : sd_unet(**fp8)->store.names()) {
    const DType d = sd_unet(**fp8)->store.find(w)->dtype();
    stored += d == DType::F8_E4M3;
    floats += dtype_is_float(d);
  }
  EXPECT_EQ(stored, floats) << "every float tensor of the UNet is fp8";

  expect_same_outputs(*ex_, **fp8, o, **plain, LoadOptions{.models_dir = o.models_dir});
}

// Refusals name the file, the key and the format.
class Fp8Refusals : public Fp8Weights {};

Status formats_of(const std::string& path,
                  const std::vector<std::pair<std::string, const HostTensor*>>& tensors) {
  EXPECT_TRUE(safetensors_write(path, tensors, {}).ok());
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok());
  return weight_formats_read(**f, "").status();
}

TEST_F(Fp8Refusals, UnknownFormatsAndMisplacedScales) {
  HostTensor w8(DType::F8_E4M3, Shape{4, 4}), w16(DType::F16, Shape{4, 4}), s(DType::F32, Shape{});
  HostTensor rows(DType::F32, Shape{4});
  const std::string j = R"({"format": "nvfp4", "group_size": 16})";
  HostTensor jt(DType::U8, Shape{int64_t(j.size())});
  std::memcpy(jt.data(), j.data(), j.size());
  Status st = formats_of(path("a.safetensors"),
                         {{"l.weight", &w8}, {"l.comfy_quant", &jt}, {"l.weight_scale", &s}});
  EXPECT_FALSE(st.ok());
  for (const char* want : {"a.safetensors", "l.comfy_quant", "nvfp4"})
    EXPECT_NE(st.str().find(want), std::string::npos) << st.str();
  st = formats_of(path("b.safetensors"), {{"l.weight", &w16}, {"l.scale_weight", &s}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.str().find("l.scale_weight"), std::string::npos) << st.str();
  st = formats_of(path("c.safetensors"), {{"l.weight", &w8}, {"l.scale_weight", &rows}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.str().find("one float"), std::string::npos) << st.str();
  st = formats_of(path("d.safetensors"), {{"l.weight", &w8}, {"l.weight_scale", &s}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.str().find("comfy_quant"), std::string::npos) << st.str();
  const std::string bad = "not json";
  HostTensor bt(DType::U8, Shape{int64_t(bad.size())});
  std::memcpy(bt.data(), bad.data(), bad.size());
  st = formats_of(path("e.safetensors"), {{"l.weight", &w8}, {"l.comfy_quant", &bt}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.str().find("JSON"), std::string::npos) << st.str();
  HostTensor huge(DType::U8, Shape{1 << 20});  // a megabyte of spaces before the object
  std::memset(huge.data(), ' ', huge.bytes());
  std::memcpy(static_cast<char*>(huge.data()) + huge.bytes() - j.size(), j.data(), j.size());
  st = formats_of(path("f.safetensors"), {{"l.weight", &w8}, {"l.comfy_quant", &huge}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.str().find("1048576 bytes"), std::string::npos) << st.str();
  // A model file with a refused layer does not load: the error names it.
  auto m = model_load(path("a.safetensors"));
  EXPECT_FALSE(m.ok());

  // A VAE stored in scaled fp8 is refused (not computed without its scales).
  auto src = SafetensorsFile::open(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(src.ok());
  std::vector<std::pair<std::string, HostTensor>> kept;
  for (const SafetensorsEntry& e : (*src)->entries()) {
    HostTensor t = (*src)->load(e.name).value();
    if (e.name == "first_stage_model.decoder.conv_out.weight") {
      t = HostTensor(DType::F8_E4M3, e.shape);
      kept.emplace_back("first_stage_model.decoder.conv_out.scale_weight", s.clone());
    }
    kept.emplace_back(e.name, std::move(t));
  }
  std::vector<std::pair<std::string, const HostTensor*>> list;
  for (auto& [n, t] : kept) list.emplace_back(n, &t);
  ASSERT_TRUE(safetensors_write(path("vae8.safetensors"), list, {}).ok());
  auto v = model_load(path("vae8.safetensors"));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().str().find("conv_out.scale_weight"), std::string::npos) << v.status().str();
}

}  // namespace
}  // namespace hr
