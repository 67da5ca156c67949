// resample.cpp against ComfyUI: comfy.utils.common_upscale (torch F.interpolate modes, bislerp,
// PIL lanczos, centre crop) on the stored inputs of tests/data/nodes/node-refs.safetensors,
// plus analytic properties on fresh random inputs.
#include "nodes/resample.h"

#include <gtest/gtest.h>

#include <random>

#include "node_harness.h"
#include "test_compare.h"

namespace hr {
namespace {

// Note [resample tolerance]: torch computes the weights in float32, resample.cpp in double;
// the difference is float rounding (~1e-7 relative). bislerp goes through acos/sin of
// normalised dot products, which amplifies rounding near dot = 1, hence its looser bound.
double tolerance(const std::string& method) { return method == "bislerp" ? 1e-4 : 1e-5; }

struct Case {
  const char* name;
  int64_t w, h;
  const char* crop;
};
constexpr Case kCases[] = {{"up", 14, 11, "disabled"},
                           {"down", 6, 5, "disabled"},
                           {"crop_rows", 16, 8, "center"},
                           {"crop_cols", 8, 12, "center"}};

TEST(Resample, LatentMatchesComfyCommonUpscale) {
  HostTensor x = test::node_ref("in.latent");
  for (const char* m : {"nearest-exact", "bilinear", "area", "bicubic", "bislerp"})
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(m) + " " + c.name);
      auto out = common_upscale(x, c.w, c.h, m, c.crop);
      ASSERT_TRUE(out.ok()) << out.status().str();
      HostTensor ref = test::node_ref(std::string("upscale.") + m + "." + c.name);
      EXPECT_LE(test::rel_err(*out, ref), tolerance(m));
    }
}

// ComfyUI's lanczos goes through PIL on uint8 (truncating 255 * x), so values are multiples of
// 1/255; headroom follows PIL's fixed-point passes and may differ by one step at most.
TEST(Resample, LanczosMatchesComfyPIL) {
  HostTensor img = nhwc_to_nchw(test::node_ref("in.image"));
  struct {
    const char* name;
    int64_t w, h;
    const char* crop;
  } cases[] = {{"27x21", 27, 21, "disabled"},
               {"13x9", 13, 9, "disabled"},
               {"24x12c", 24, 12, "center"},
               {"w0_h12", 15, 12, "disabled"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto out = common_upscale(img, c.w, c.h, "lanczos", c.crop);
    ASSERT_TRUE(out.ok()) << out.status().str();
    HostTensor ref = test::node_ref(std::string("image_scale.lanczos.") + c.name);
    HostTensor got = nchw_to_nhwc(*out);
    EXPECT_LE(test::max_abs_diff(got, ref), 1.0f / 255.0f + 1e-6f);
    EXPECT_LE(test::rel_err(got, ref), 1e-3);
  }
}

HostTensor random_nchw(Shape s, uint32_t seed) {
  HostTensor x(DType::F32, s);
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(gen);
  return x;
}

// Same size in and out: every interpolating method is the identity.
TEST(Resample, SameSizeIsIdentity) {
  HostTensor x = random_nchw(Shape{2, 3, 7, 9}, std::random_device{}());
  for (const char* m : {"nearest-exact", "bilinear", "area", "bicubic", "bislerp"}) {
    SCOPED_TRACE(m);
    auto out = resample(x, 7, 9, m);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_LE(test::max_abs_diff(*out, x), 1e-5f);
  }
}

// "area" with an integer factor is the mean of each block (adaptive_avg_pool2d).
TEST(Resample, AreaIntegerFactorIsBlockMean) {
  HostTensor x = random_nchw(Shape{1, 2, 6, 9}, std::random_device{}());
  auto out = resample(x, 2, 3, "area");
  ASSERT_TRUE(out.ok()) << out.status().str();
  HostTensor want(DType::F32, Shape{1, 2, 2, 3});
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t oy = 0; oy < 2; ++oy)
      for (int64_t ox = 0; ox < 3; ++ox) {
        double s = 0;
        for (int64_t y = 0; y < 3; ++y)
          for (int64_t xx = 0; xx < 3; ++xx) s += x.f32()[(c * 6 + oy * 3 + y) * 9 + ox * 3 + xx];
        want.f32()[(c * 2 + oy) * 3 + ox] = float(s / 9);
      }
  EXPECT_LE(test::rel_err(*out, want), 1e-6);
}

TEST(Resample, RejectsUnknownMethod) {
  HostTensor x = random_nchw(Shape{1, 1, 2, 2}, 1);
  EXPECT_FALSE(resample(x, 4, 4, "lanczos3").ok());
}

}  // namespace
}  // namespace hr
