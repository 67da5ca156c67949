// DualCLIPLoader (type flux) and CLIPTextEncodeFlux on bare CLIP-L and T5 files made from the
// tiny encoders of tests/data, against ComfyUI's FluxClipModel (tests/data/flux/flux_te_golden):
// either file order, CLIPSetLastLayer, and the refusals (other types, a pair that is not one
// CLIP-L and one T5, a file with no text encoder).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/family.h"
#include "models/flux/flux_text_encoder.h"
#include "models/safetensors.h"
#include "node_harness.h"
#include "test_compare.h"
#include "test_paths.h"
#include "test_safetensors.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class DualCLIPLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("hr_dual_clip_{}", ::getpid());
    fs::remove_all(dir_);
    const fs::path te = dir_ / "models/text_encoders";
    fs::create_directories(te);
    // tiny-sd1's CLIP-L has 4 heads, which its shapes cannot show: the metadata says so.
    Status s =
        test::safetensors_write_part(test::golden_path("tiny-sd1.safetensors"), "cond_stage_model.transformer.", (te / "clip_l.safetensors").string(), {{"headroom.clip.heads", "4"}});
    ASSERT_TRUE(s.ok()) << s.str();
    s = test::safetensors_write_part(test::data_path("t5/tiny_t5_encoder.safetensors"), "text_encoders.t5xxl.transformer.", (te / "t5xxl_tiny.safetensors").string(), {});
    ASSERT_TRUE(s.ok()) << s.str();
    fs::copy_file(te / "clip_l.safetensors", te / "clip_l_copy.safetensors");
    fs::create_symlink(test::data_path("flux/flux_te_golden.safetensors"),
                       te / "not_an_encoder.safetensors");
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
  }

  void SetUp() override {
    nodes_register(registry_, NodeEnv{(dir_ / "models").string(), (dir_ / "input").string()});
    rt_.wire(opts_);
    opts_.models_dir = (dir_ / "models").string();
    auto g = SafetensorsFile::open(test::data_path("flux/flux_te_golden.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    golden_ = std::move(g).value();
    cases_ = nlohmann::json::parse(golden_->metadata().at("cases"));
  }

  Result<std::vector<std::any>> dual(const std::string& a, const std::string& b,
                                     const std::string& type = "flux") {
    NodeInputs in;
    in.literals["clip_name1"] = a;
    in.literals["clip_name2"] = b;
    in.literals["type"] = type;
    return run("DualCLIPLoader", in);
  }

  // Runs one node as PromptExecutor does after validation.
  Result<std::vector<std::any>> run(const std::string& class_type, const NodeInputs& in) {
    const NodeDef* def = registry_.find(class_type);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", class_type);
    ExecContext ctx{opts_, prompt_, "1"};
    return def->run(ctx, in);
  }

  // CLIPTextEncodeFlux on `clip` with golden case `name`'s texts (its layer through
  // CLIPSetLastLayer), compared with ComfyUI's conditioning and pooled output.
  void expect_case(const std::any& clip, const std::string& name) {
    const nlohmann::json* c = nullptr;
    for (const auto& x : cases_)
      if (x["name"] == name) c = &x;
    ASSERT_NE(c, nullptr) << name;
    std::any use = clip;
    if ((*c)["layer"].get<int>() != 0) {
      NodeInputs last;
      last.links["clip"] = clip;
      last.literals["stop_at_clip_layer"] = (*c)["layer"].get<int>();
      auto r = run("CLIPSetLastLayer", last);
      ASSERT_TRUE(r.ok()) << r.status().str();
      use = r->at(0);
    }
    NodeInputs in;
    in.links["clip"] = use;
    in.literals["clip_l"] = (*c)["clip_l"];
    in.literals["t5xxl"] = (*c)["t5xxl"];
    in.literals["guidance"] = 2.5;
    auto r = run("CLIPTextEncodeFlux", in);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().str();
    auto cond = std::any_cast<std::shared_ptr<const Conditioning>>(r->at(0));
    ASSERT_EQ(cond->entries.size(), 1u);
    const CondEntry& e = cond->entries[0];
    EXPECT_EQ(cond_guidance(e.extras), 2.5);
    ASSERT_NE(e.pooled(), nullptr);
    auto gc = golden_->load(name + ".cond");
    auto gp = golden_->load(name + ".pooled");
    ASSERT_TRUE(gc.ok() && gp.ok());
    EXPECT_LT(test::rel_err(*e.cond, *gc), 1e-5) << name;
    EXPECT_LT(test::rel_err(*e.pooled(), *gp), 1e-5) << name;
  }

  static inline fs::path dir_;
  test::CpuRuntime rt_;
  ExecOptions opts_;
  NodeRegistry registry_;
  Prompt prompt_;
  std::unique_ptr<SafetensorsFile> golden_;
  nlohmann::json cases_;
};

TEST_F(DualCLIPLoaderTest, EitherOrderMatchesComfyUI) {
  for (bool swap : {false, true}) {
    auto r = swap ? dual("t5xxl_tiny.safetensors", "clip_l.safetensors")
                  : dual("clip_l.safetensors", "t5xxl_tiny.safetensors");
    ASSERT_TRUE(r.ok()) << r.status().str();
    auto clip = std::any_cast<std::shared_ptr<const CLIPValue>>(r->at(0));
    EXPECT_EQ(clip->encoder->parts(), (std::vector<std::string>{"l", "t5xxl"}));
    EXPECT_EQ(&clip->encoder->family(), flux_text_encoder_family());
    expect_case(r->at(0), "weighted");
    expect_case(r->at(0), "clip_skip");
  }
}

// CLIPTextEncode gives both encoders the same text: ComfyUI's empty prompt.
TEST_F(DualCLIPLoaderTest, CLIPTextEncodeGivesBothPartsTheText) {
  auto r = dual("clip_l.safetensors", "t5xxl_tiny.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().str();
  NodeInputs in;
  in.links["clip"] = r->at(0);
  in.literals["text"] = "";
  auto out = run("CLIPTextEncode", in);
  ASSERT_TRUE(out.ok()) << out.status().str();
  const CondEntry& e = std::any_cast<std::shared_ptr<const Conditioning>>(out->at(0))->entries[0];
  auto gc = golden_->load("empty.cond");
  auto gp = golden_->load("empty.pooled");
  ASSERT_TRUE(gc.ok() && gp.ok());
  EXPECT_LT(test::rel_err(*e.cond, *gc), 1e-5);
  EXPECT_LT(test::rel_err(*e.pooled(), *gp), 1e-5);
}

TEST_F(DualCLIPLoaderTest, RefusesOtherTypes) {
  for (const char* type : {"sdxl", "sd3", "hidream"}) {
    auto r = dual("clip_l.safetensors", "t5xxl_tiny.safetensors", type);
    ASSERT_FALSE(r.ok()) << type;
    EXPECT_NE(r.status().message().find(fmt::format("type '{}' is not supported", type)),
              std::string::npos)
        << r.status().str();
    EXPECT_NE(r.status().message().find("supported: flux"), std::string::npos) << r.status().str();
  }
}

TEST_F(DualCLIPLoaderTest, RefusesAPairThatIsNotCLIPLAndT5) {
  auto two_clips = dual("clip_l.safetensors", "clip_l_copy.safetensors");
  ASSERT_FALSE(two_clips.ok());
  EXPECT_NE(two_clips.status().message().find(
                "clip_name1 'clip_l.safetensors' holds CLIP-L (2 layers, width 32); clip_name2 "
                "'clip_l_copy.safetensors' holds CLIP-L (2 layers, width 32)"),
            std::string::npos)
      << two_clips.status().str();
  auto no_encoder = dual("not_an_encoder.safetensors", "t5xxl_tiny.safetensors");
  ASSERT_FALSE(no_encoder.ok());
  EXPECT_NE(no_encoder.status().message().find(
                "clip_name1 'not_an_encoder.safetensors' holds no CLIP or T5 text encoder"),
            std::string::npos)
      << no_encoder.status().str();
  EXPECT_NE(no_encoder.status().message().find(
                "clip_name2 't5xxl_tiny.safetensors' holds T5 encoder (2 layers, d_model 32)"),
            std::string::npos)
      << no_encoder.status().str();
}

}  // namespace
}  // namespace hr
