// The latent nodes of nodes_latent.cpp run through the node harness against ComfyUI's own node
// classes (tests/data/nodes/latent-golden.safetensors, made by make_latent_golden.py): every
// case's samples, noise_mask and batch_index, the cases torch refuses, and /object_info as
// the classes declare it.
#include <gtest/gtest.h>

#include <set>

#include "node_harness.h"
#include "test_compare.h"

namespace hr {
namespace {

const SafetensorsFile& golden() {
  static std::unique_ptr<SafetensorsFile> f = [] {
    auto r = SafetensorsFile::open(test::data_path("nodes/latent-golden.safetensors"));
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return *f;
}

Json golden_meta(const std::string& key) {
  const auto& m = golden().metadata();
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << key;
  return it == m.end() ? Json() : Json::parse(it->second);
}

std::shared_ptr<const HostTensor> tensor(const std::string& name) {
  auto t = golden().load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
  return std::make_shared<const HostTensor>(t.ok() ? std::move(t).value() : HostTensor());
}

// A latent input as the script's `latents` table describes it.
std::any latent_input(const Json& spec) {
  Latent l;
  l.samples = tensor(spec["samples"]);
  if (spec.contains("noise_mask")) l.noise_mask = tensor(spec["noise_mask"]);
  if (spec.contains("batch_index")) l.batch_index = spec["batch_index"].get<std::vector<int64_t>>();
  return std::make_shared<const Latent>(std::move(l));
}

// Note [latent golden tolerance]: copies, flips, crops, batching and the feathered and masked
// mixes are the same float operations in the same order as torch's and match bit for bit. The
// cases that resize a latent or a mask through F.interpolate (reshape_latent_to's bilinear,
// LatentBlend's bicubic, LatentCompositeMasked's bilinear mask and resize_source) compute the
// interpolation weights in another order: a few ulps (measured: largest 2.1e-6 on values up
// to ~4, relative L2 below 1e-7).
bool resizes(const std::string& name) {
  for (const char* r : {"resize", "batch_cut", "masked.mask", "masked.overhang"})
    if (name.find(r) != std::string::npos) return true;
  return false;
}

void expect_samples(const std::string& name, const HostTensor& got, const HostTensor& ref) {
  if (!resizes(name)) {
    EXPECT_EQ(test::max_abs_diff(got, ref), 0.0f);
    return;
  }
  EXPECT_LE(test::rel_err(got, ref), 1e-6);
  EXPECT_LE(test::max_abs_diff(got, ref), 5e-6f);
}

TEST(NodesLatentGolden, EveryCaseMatchesComfyUI) {
  ExecOptions opts;
  test::NodeHarness h(opts);
  const Json latents = golden_meta("latents"), cases = golden_meta("cases");
  ASSERT_GE(cases.size(), 40u);
  std::set<std::string> nodes_run;
  for (const Json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    NodeInputs in;
    for (const auto& [k, v] : c["literals"].items()) in.literals[k] = v;
    for (const auto& [k, v] : c["latents"].items())
      in.links[k] = latent_input(latents[v.get<std::string>()]);
    for (const auto& [k, v] : c["masks"].items())
      in.links[k] = std::make_shared<const MaskValue>(MaskValue{tensor(v)});
    auto r = h.run(c["node"], in);
    nodes_run.insert(c["node"]);
    if (c.contains("error")) {  // torch raised: headroom refuses, with a message
      EXPECT_FALSE(r.ok()) << "ComfyUI: " << c["error"].get<std::string>();
      if (!r.ok()) {
        EXPECT_FALSE(r.status().message().empty());
      }
      continue;
    }
    auto out = test::output_as<Latent>(r);
    if (!out) continue;
    const std::string key = "out." + name + ".";
    expect_samples(name, *out->samples, *tensor(key + "samples"));
    if (golden().contains(key + "noise_mask")) {
      ASSERT_TRUE(out->noise_mask) << "noise_mask dropped";
      EXPECT_EQ(test::max_abs_diff(*out->noise_mask, *tensor(key + "noise_mask")), 0.0f);
    } else {
      EXPECT_FALSE(out->noise_mask) << "noise_mask made up";
    }
    std::vector<int64_t> want;
    if (c.contains("batch_index")) want = c["batch_index"].get<std::vector<int64_t>>();
    EXPECT_EQ(out->batch_index, want);
  }
  EXPECT_EQ(nodes_run.size(), 12u);
}

// ComfyUI's declaration of one input ("INT", {...}) against ours: type, and each option it
// names (headroom adds "step": 1 to INTs that declare none, as it does for every node).
void expect_input(const Json& want, const Json& got) {
  ASSERT_TRUE(got.is_array() && !got.empty()) << got.dump();
  EXPECT_EQ(got[0], want[0]);
  if (want.size() < 2) return;
  ASSERT_EQ(got.size(), 2u) << got.dump();
  for (const auto& [k, v] : want[1].items()) {
    ASSERT_TRUE(got[1].contains(k)) << k << " missing in " << got.dump();
    if (v.is_number())
      EXPECT_DOUBLE_EQ(got[1][k].get<double>(), v.get<double>()) << k;
    else
      EXPECT_EQ(got[1][k], v) << k;
  }
}

TEST(NodesLatentGolden, ObjectInfoAsComfyUIDeclaresThem) {
  NodeRegistry registry;
  nodes_register(registry, NodeEnv{});
  const Json info = golden_meta("object_info");
  ASSERT_EQ(info.size(), 12u);
  for (const auto& [cls, want] : info.items()) {
    SCOPED_TRACE(cls);
    const NodeDef* d = registry.find(cls);
    ASSERT_NE(d, nullptr);
    const Json got = registry.object_info(*d);
    EXPECT_EQ(got["input_order"], want["input_order"]);
    for (const char* group : {"required", "optional"}) {
      EXPECT_EQ(got["input"].contains(group), want["input"].contains(group)) << group;
      if (!want["input"].contains(group)) continue;
      EXPECT_EQ(got["input"][group].size(), want["input"][group].size()) << group;
      for (const auto& [name, spec] : want["input"][group].items()) {
        SCOPED_TRACE(name);
        expect_input(spec, got["input"][group].value(name, Json()));
      }
    }
    EXPECT_EQ(got["output"], want["output"]);
    EXPECT_EQ(got["category"], want["category"]);
    EXPECT_EQ(got["display_name"], want["display_name"]);
    EXPECT_EQ(got["name"], cls);
  }
}

}  // namespace
}  // namespace hr
