// Sampler previews: latent2rgb against hand-computed pixels, PNG bytes in memory that read back.
#include "sampling/latent_preview.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/png_io.h"

namespace hr {
namespace {

// A [1, 4, 2, 3] latent whose channel k holds `v[k]` everywhere except pixel 0, which is zero.
HostTensor latent_make(std::array<float, 4> v) {
  HostTensor t(DType::F32, Shape{1, 4, 2, 3});
  for (int k = 0; k < 4; ++k)
    for (int p = 0; p < 6; ++p) t.f32()[k * 6 + p] = p == 0 ? 0.f : v[size_t(k)];
  return t;
}

TEST(LatentPreview, Sd1FactorsMapChannelsToRgb) {
  // Channel 0 alone at 1.0: R = 0.3512, G = 0.2297, B = 0.3227, then (v + 1) / 2 * 255.
  Result<Image8> img = latent_preview(latent_make({1.f, 0.f, 0.f, 0.f}), model_family_find("sd1")->latent);
  ASSERT_TRUE(img.ok()) << img.status().str();
  EXPECT_EQ(img->width, 3);
  EXPECT_EQ(img->height, 2);
  EXPECT_EQ(img->channels, 3);
  EXPECT_EQ(img->pixels[3], 172);  // round(1.3512 / 2 * 255)
  EXPECT_EQ(img->pixels[4], 157);  // round(1.2297 / 2 * 255)
  EXPECT_EQ(img->pixels[5], 169);  // round(1.3227 / 2 * 255)
  for (int c = 0; c < 3; ++c) EXPECT_EQ(img->pixels[size_t(c)], 128);  // zero latent: grey
  // Saturates instead of wrapping.
  Result<Image8> hot = latent_preview(latent_make({9.f, 9.f, 0.f, 0.f}), model_family_find("sd1")->latent);
  ASSERT_TRUE(hot.ok());
  EXPECT_EQ(hot->pixels[3], 255);
  Result<Image8> cold = latent_preview(latent_make({0.f, 0.f, 0.f, 9.f}), model_family_find("sd1")->latent);
  EXPECT_EQ(cold->pixels[5], 0);
}

TEST(LatentPreview, SdxlHasItsOwnFactorsAndBias) {
  Result<Image8> img = latent_preview(latent_make({0.f, 0.f, 0.f, 0.f}), model_family_find("sdxl")->latent);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->pixels[0], 141);  // bias 0.1084: round(1.1084 / 2 * 255)
  Result<Image8> sd1 = latent_preview(latent_make({0.f, 1.f, 0.f, 0.f}), model_family_find("sd1")->latent);
  Result<Image8> xl = latent_preview(latent_make({0.f, 1.f, 0.f, 0.f}), model_family_find("sdxl")->latent);
  EXPECT_NE(sd1->pixels[3], xl->pixels[3]);
}

TEST(LatentPreview, RefusesWhatIsNotAFourChannelLatent) {
  HostTensor three(DType::F32, Shape{1, 3, 2, 2});
  Result<Image8> r = latent_preview(three, model_family_find("sd1")->latent);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[B, 4, H, W]"), std::string::npos);
  EXPECT_FALSE(preview_method_parse("taesd").ok());
  EXPECT_EQ(*preview_method_parse("auto"), PreviewMethod::LATENT2RGB);
  EXPECT_EQ(*preview_method_parse("none"), PreviewMethod::NONE);
}

TEST(PngEncode, BytesInMemoryReadBackLikeAFile) {
  Image8 img;
  img.width = 5;
  img.height = 3;
  img.channels = 4;
  for (int i = 0; i < 5 * 3 * 4; ++i) img.pixels.push_back(uint8_t(i * 7));
  img.text = {{"prompt", "{}"}};
  Result<std::string> png = png_encode(img);
  ASSERT_TRUE(png.ok()) << png.status().str();
  EXPECT_EQ(png->substr(0, 4), "\x89PNG");
  auto path = std::filesystem::temp_directory_path() / "hr_png_encode_test.png";
  std::ofstream(path, std::ios::binary) << *png;
  Result<Image8> back = png_read(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(back.ok()) << back.status().str();
  EXPECT_EQ(back->pixels, img.pixels);
  EXPECT_EQ(back->text, img.text);
  img.pixels.pop_back();
  EXPECT_FALSE(png_encode(img).ok());  // a size that does not match is refused, not written
}

}  // namespace
}  // namespace hr
