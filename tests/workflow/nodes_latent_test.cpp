// LatentUpscale, LatentUpscaleBy and ImageScale run as nodes, against ComfyUI's results for the
// same inputs (tests/data/nodes/node-refs.safetensors: common_upscale with nodes.py's size
// rules), every upscale_method ComfyUI offers, both crops, and the width/height = 0 rules.
#include <gtest/gtest.h>

#include "node_harness.h"
#include "nodes/resample.h"
#include "test_compare.h"

namespace hr {
namespace {

// See Note [resample tolerance] in resample_test.cpp.
double tolerance(const std::string& method) { return method == "bislerp" ? 1e-4 : 1e-5; }

const char* const kLatentMethods[] = {"nearest-exact", "bilinear", "area", "bicubic", "bislerp"};
const char* const kImageMethods[] = {"nearest-exact", "bilinear", "area", "bicubic", "lanczos"};

class NodesLatent : public ::testing::Test {
 protected:
  HostTensor run_latent(const std::string& cls, NodeInputs in) {
    in.links["samples"] = test::latent_value(test::node_ref("in.latent"));
    auto l = test::output_as<Latent>(h_.run(cls, in));
    return l ? l->samples->clone() : HostTensor();
  }
  HostTensor run_image(NodeInputs in) {
    in.links["image"] = test::image_value(test::node_ref("in.image"));
    auto i = test::output_as<ImageValue>(h_.run("ImageScale", in));
    return i ? i->pixels->clone() : HostTensor();
  }

  ExecOptions opts_;
  test::NodeHarness h_{opts_};
};

TEST_F(NodesLatent, LatentUpscaleEveryMethodAndCrop) {
  struct {
    const char* ref;
    int w, h;
    const char* crop;
  } cases[] = {{"up", 112, 88, "disabled"},       // 14 x 11 latent
               {"crop_rows", 128, 64, "center"},  // 16 x 8
               {"crop_cols", 64, 96, "center"},   // 8 x 12
               {"w0_h88", 0, 88, "disabled"}};    // width = max(64, round(10 * 88 / 8)) = 110
  for (const char* m : kLatentMethods)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(m) + " " + c.ref);
      NodeInputs in;
      in.literals = {{"upscale_method", m}, {"width", c.w}, {"height", c.h}, {"crop", c.crop}};
      HostTensor got = run_latent("LatentUpscale", in);
      std::string ref = std::string(c.w == 0 ? "latent_upscale." : "upscale.") + m + "." + c.ref;
      EXPECT_LE(test::rel_err(got, test::node_ref(ref)), tolerance(m));
    }
}

// Sizes below 64 pixels are raised to 64 (8 latent pixels); 0 x 0 passes the latent through.
TEST_F(NodesLatent, LatentUpscaleSizeRules) {
  NodeInputs in;
  in.literals = {
      {"upscale_method", "bilinear"}, {"width", 16}, {"height", 200}, {"crop", "disabled"}};
  HostTensor got = run_latent("LatentUpscale", in);
  EXPECT_EQ(got.shape(), (Shape{1, 4, 25, 8}));
  in.literals["width"] = 0;
  in.literals["height"] = 0;
  HostTensor same = run_latent("LatentUpscale", in);
  EXPECT_EQ(test::max_abs_diff(same, test::node_ref("in.latent")), 0.0f);
}

TEST_F(NodesLatent, LatentUpscaleByEveryMethod) {
  for (const char* m : kLatentMethods)
    for (double s : {1.5, 0.75}) {
      SCOPED_TRACE(std::string(m) + " " + std::to_string(s));
      NodeInputs in;
      in.literals = {{"upscale_method", m}, {"scale_by", s}};
      HostTensor got = run_latent("LatentUpscaleBy", in);
      std::string ref = std::string("latent_upscale_by.") + m + (s == 1.5 ? ".1.5" : ".0.75");
      EXPECT_LE(test::rel_err(got, test::node_ref(ref)), tolerance(m));
    }
}

TEST_F(NodesLatent, ImageScaleEveryMethodAndCrop) {
  struct {
    const char* ref;
    int w, h;
    const char* crop;
  } cases[] = {{"27x21", 27, 21, "disabled"},
               {"13x9", 13, 9, "disabled"},
               {"24x12c", 24, 12, "center"},
               {"w0_h12", 0, 12, "disabled"}};  // width = max(1, round(20 * 12 / 16)) = 15
  for (const char* m : kImageMethods)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(m) + " " + c.ref);
      NodeInputs in;
      in.literals = {{"upscale_method", m}, {"width", c.w}, {"height", c.h}, {"crop", c.crop}};
      HostTensor got = run_image(in);
      HostTensor ref = test::node_ref(std::string("image_scale.") + m + "." + c.ref);
      if (std::string(m) == "lanczos") {  // uint8 through PIL: one step of 1/255 at most
        EXPECT_LE(test::max_abs_diff(got, ref), 1.0f / 255.0f + 1e-6f);
      } else {
        EXPECT_LE(test::rel_err(got, ref), tolerance(m));
      }
    }
}

// ComfyUI's ImageScale does not clamp: bicubic overshoots [0, 1] near edges, and so must we.
TEST_F(NodesLatent, ImageScaleBicubicIsNotClamped) {
  NodeInputs in;
  in.literals = {
      {"upscale_method", "bicubic"}, {"width", 27}, {"height", 21}, {"crop", "disabled"}};
  HostTensor ref = test::node_ref("image_scale.bicubic.27x21");
  float lo = 0, hi = 1;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    lo = std::min(lo, ref.f32()[i]);
    hi = std::max(hi, ref.f32()[i]);
  }
  ASSERT_TRUE(lo < 0 || hi > 1) << "the reference does not overshoot; pick another input";
  HostTensor got = run_image(in);
  EXPECT_LE(test::max_abs_diff(got, ref), 1e-5f);
}

TEST_F(NodesLatent, UpscaleMethodOptionsAreComfyUIs) {
  NodeInputs in;
  in.literals = {{"upscale_method", "lanczos"}, {"scale_by", 1.5}};
  in.links["samples"] = test::latent_value(test::node_ref("in.latent"));
  EXPECT_FALSE(h_.run("LatentUpscaleBy", in).ok());  // ComfyUI offers lanczos for images only
  NodeInputs im;
  im.literals = {{"upscale_method", "bislerp"}, {"width", 8}, {"height", 8}, {"crop", "disabled"}};
  im.links["image"] = test::image_value(test::node_ref("in.image"));
  EXPECT_FALSE(h_.run("ImageScale", im).ok());  // and bislerp for latents only
}

}  // namespace
}  // namespace hr
