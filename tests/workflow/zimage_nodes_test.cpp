// The sampling-side nodes of the Z-Image template: ModelSamplingAuraFlow and ModelSamplingSD3
// (comfy_extras/nodes_model_advanced.py), ConditioningZeroOut (nodes.py) and the res_multistep
// samplers in KSampler's list, with their /object_info as ComfyUI declares them.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/weight_load.h"
#include "node_harness.h"
#include "sampling/model_sampling.h"
#include "test_paths.h"

namespace hr {
namespace {

class ZImageNodes : public ::testing::Test {
 protected:
  ZImageNodes() : harness_(opts_) {
    NodeEnv env;
    nodes_register(registry_, env);
  }
  Json info(const std::string& cls) const {
    const NodeDef* d = registry_.find(cls);
    EXPECT_NE(d, nullptr) << cls;
    return d ? registry_.object_info(*d) : Json();
  }

  ExecOptions opts_;
  test::NodeHarness harness_;
  NodeRegistry registry_;
};

// ComfyUI: {"model": ("MODEL",), "shift": ("FLOAT", {"default": D, "min": 0.0, "max": 100.0,
// "step": 0.01})}, RETURN_TYPES ("MODEL",), CATEGORY "advanced/model", no display name.
void expect_flow_node_info(const Json& j, const std::string& cls, double default_shift) {
  SCOPED_TRACE(cls);
  const Json& req = j["input"]["required"];
  EXPECT_EQ(req.size(), 2u) << req.dump();
  EXPECT_EQ(req["model"], Json::array({"MODEL"}));
  ASSERT_TRUE(req["shift"].is_array() && req["shift"].size() == 2) << req.dump();
  EXPECT_EQ(req["shift"][0], "FLOAT");
  EXPECT_DOUBLE_EQ(req["shift"][1]["default"].get<double>(), default_shift);
  EXPECT_DOUBLE_EQ(req["shift"][1]["min"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(req["shift"][1]["max"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(req["shift"][1]["step"].get<double>(), 0.01);
  EXPECT_FALSE(j["input"].contains("optional"));
  EXPECT_EQ(j["input_order"]["required"], Json::array({"model", "shift"}));
  EXPECT_EQ(j["output"], Json::array({"MODEL"}));
  EXPECT_EQ(j["output_name"], Json::array({"MODEL"}));
  EXPECT_EQ(j["name"], cls);
  EXPECT_EQ(j["display_name"], cls);
  EXPECT_EQ(j["category"], "advanced/model");
  EXPECT_EQ(j["output_node"], false);
}

TEST_F(ZImageNodes, ObjectInfoAsComfyUIDeclaresThem) {
  expect_flow_node_info(info("ModelSamplingAuraFlow"), "ModelSamplingAuraFlow", 1.73);
  expect_flow_node_info(info("ModelSamplingSD3"), "ModelSamplingSD3", 3.0);

  const Json z = info("ConditioningZeroOut");
  EXPECT_EQ(z["input"]["required"], Json({{"conditioning", Json::array({"CONDITIONING"})}}));
  EXPECT_EQ(z["input_order"]["required"], Json::array({"conditioning"}));
  EXPECT_EQ(z["output"], Json::array({"CONDITIONING"}));
  EXPECT_EQ(z["output_name"], Json::array({"CONDITIONING"}));
  EXPECT_EQ(z["display_name"], "ConditioningZeroOut");
  EXPECT_EQ(z["category"], "advanced/conditioning");

  // comfy/samplers.py KSAMPLER_NAMES: res_multistep, then res_multistep_ancestral (their
  // _cfg_pp forms between them and after are not implemented), before ddim.
  for (const char* cls : {"KSampler", "KSamplerAdvanced"}) {
    const Json names = info(cls)["input"]["required"]["sampler_name"][0];
    auto at = [&](const char* n) {
      return std::find(names.begin(), names.end(), Json(n)) - names.begin();
    };
    ASSERT_LT(at("res_multistep"), ptrdiff_t(names.size())) << cls << names.dump();
    ASSERT_LT(at("res_multistep_ancestral"), ptrdiff_t(names.size())) << cls;
    EXPECT_LT(at("lcm"), at("res_multistep")) << cls;
    EXPECT_LT(at("res_multistep"), at("res_multistep_ancestral")) << cls;
    EXPECT_LT(at("res_multistep_ancestral"), at("ddim")) << cls;
  }
}

// ModelSampling{AuraFlow,SD3}.patch: ModelSamplingDiscreteFlow + CONST at the shift, multiplier
// 1 for AuraFlow and 1000 for SD3, on a view that shares the model; the input keeps its own.
TEST_F(ZImageNodes, ModelSamplingPatchesTheFlowSchedule) {
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"));
  ASSERT_TRUE(m.ok()) << m.status().str();
  auto model = std::make_shared<const ModelValue>(
      ModelValue{std::shared_ptr<LoadedModel>(std::move(m).value())});
  for (auto [cls, mult] :
       {std::pair{"ModelSamplingAuraFlow", 1.0}, std::pair{"ModelSamplingSD3", 1000.0}}) {
    NodeInputs in;
    in.links["model"] = model;
    in.literals["shift"] = 3.0;
    auto out = test::output_as<ModelValue>(harness_.run(cls, in));
    ASSERT_TRUE(out && out->sampling) << cls;
    EXPECT_EQ(out->model, model->model) << cls;
    EXPECT_EQ(out->sampling->kind, ModelSamplingSpec::Kind::FLOW) << cls;
    EXPECT_DOUBLE_EQ(out->sampling->shift, 3.0) << cls;
    EXPECT_DOUBLE_EQ(out->sampling->multiplier, mult) << cls;
    std::unique_ptr<ModelSampling> ms = model_sampling_create(out->sampling_spec());
    EXPECT_EQ(ms->prediction(), SamplingPrediction::CONST) << cls;
    EXPECT_FLOAT_EQ(ms->timestep(0.5f), 0.5f * float(mult)) << cls;
  }
  EXPECT_FALSE(model->sampling);
  NodeInputs none;
  none.literals["shift"] = 3.0;
  EXPECT_FALSE(harness_.run("ModelSamplingAuraFlow", none).ok());
}

// nodes.py ConditioningZeroOut: every entry's context and pooled_output (and
// conditioning_lyrics) become zeros of their shape and dtype; a None pooled_output and every
// other key stay; the input is not changed.
TEST_F(ZImageNodes, ConditioningZeroOutZerosContextAndPooled) {
  auto filled = [](DType dt, Shape s, float v) {
    HostTensor f32(DType::F32, s);
    std::fill(f32.f32(), f32.f32() + f32.numel(), v);
    return std::make_shared<const HostTensor>(dt == DType::F32 ? std::move(f32) : f32.to(dt));
  };
  Conditioning c;
  CondEntry a;
  a.cond = filled(DType::F32, Shape{1, 5, 8}, 1.5f);
  a.extras.set(kCondPooledOutput, filled(DType::F32, Shape{1, 4}, -2.0f));
  a.extras.set(kCondGuidance, 3.5);
  a.extras.set("attention_mask", filled(DType::F32, Shape{1, 5}, 1.0f));
  a.extras.set("conditioning_lyrics", filled(DType::F32, Shape{1, 3, 2}, 0.5f));
  CondEntry b;
  b.cond = filled(DType::BF16, Shape{1, 7, 8}, 0.25f);
  b.extras.set(kCondPooledOutput, std::monostate{});
  c.entries.push_back(std::move(a));
  c.entries.push_back(std::move(b));
  auto input = std::make_shared<const Conditioning>(std::move(c));
  NodeInputs in;
  in.links["conditioning"] = input;
  auto out = test::output_as<Conditioning>(harness_.run("ConditioningZeroOut", in));
  ASSERT_TRUE(out);
  ASSERT_EQ(out->entries.size(), 2u);
  auto all_zero = [](const HostTensor& t) {
    HostTensor f = t.to(DType::F32);
    return std::all_of(f.f32(), f.f32() + f.numel(), [](float v) { return v == 0.0f; });
  };
  const CondEntry& za = out->entries[0];
  EXPECT_EQ(za.cond->shape(), (Shape{1, 5, 8}));
  EXPECT_TRUE(all_zero(*za.cond));
  ASSERT_NE(za.pooled(), nullptr);
  EXPECT_EQ(za.pooled()->shape(), (Shape{1, 4}));
  EXPECT_TRUE(all_zero(*za.pooled()));
  ASSERT_NE(za.extras.tensor("conditioning_lyrics"), nullptr);
  EXPECT_TRUE(all_zero(*za.extras.tensor("conditioning_lyrics")));
  EXPECT_EQ(za.extras.get_float(kCondGuidance), 3.5);
  EXPECT_EQ(za.extras.tensor_shared("attention_mask"),
            input->entries[0].extras.tensor_shared("attention_mask"));
  const CondEntry& zb = out->entries[1];
  EXPECT_EQ(zb.cond->dtype(), DType::BF16);
  EXPECT_EQ(zb.cond->shape(), (Shape{1, 7, 8}));
  EXPECT_TRUE(all_zero(*zb.cond));
  EXPECT_TRUE(zb.extras.is_none(kCondPooledOutput));
  // The input is unchanged.
  EXPECT_FALSE(all_zero(*input->entries[0].cond));
  EXPECT_FALSE(all_zero(*input->entries[0].pooled()));
}

}  // namespace
}  // namespace hr
