// The end-to-end tests' PNG criterion (png_compare.h) on ComfyUI's own PNGs: an image passes
// against itself under the f32 and the f16 bounds, and a block of changed pixels (a wrong tile,
// a kernel that breaks at an edge) fails both, so the f16 check of the CUDA cases can fail.
#include <gtest/gtest.h>

#include <string>

#include "png_compare.h"
#include "test_paths.h"

namespace hr::test {
namespace {

Image8 golden_png(const std::string& name) {
  Result<Image8> img = png_read(e2e_path(name));
  EXPECT_TRUE(img.ok()) << name << ": " << img.status().str();
  return img.ok() ? std::move(img).value() : Image8{};
}

// `img` with the values of a size x size block at (x0, y0) replaced by 255 - v.
Image8 block_inverted(Image8 img, int x0, int y0, int size) {
  for (int y = y0; y < y0 + size && y < img.height; ++y)
    for (int x = x0; x < x0 + size && x < img.width; ++x)
      for (int ch = 0; ch < img.channels; ++ch) {
        uint8_t& v = img.pixels[(size_t(y) * img.width + x) * img.channels + ch];
        v = uint8_t(255 - v);
      }
  return img;
}

// `img` with every value moved by `delta`, clamped to [0, 255].
Image8 shifted(Image8 img, int delta) {
  for (uint8_t& v : img.pixels) v = uint8_t(std::clamp(int(v) + delta, 0, 255));
  return img;
}

TEST(PngCompare, GoldenPassesAgainstItself) {
  for (const char* name : {"e2e0_0.png", "e2e4_0.png"}) {
    const Image8 img = golden_png(name);
    const PngStats s = png_compare(img, img);
    EXPECT_EQ(s.equal, 1.0) << name;
    EXPECT_TRUE(png_within(s, kF32PngBounds)) << name << ": " << png_describe(s);
    EXPECT_TRUE(png_within(s, kF16PngBounds)) << name << ": " << png_describe(s);
  }
}

// A 16x16 block of a 64x64 image (1/16 of it) inverted fails the f32 and the f16 bounds.
TEST(PngCompare, ABlockOfChangedPixelsFails) {
  for (const char* name : {"e2e0_0.png", "e2e4_0.png"}) {
    const Image8 img = golden_png(name);
    const PngStats s = png_compare(block_inverted(img, 24, 24, 16), img);
    std::printf("%s with a 16x16 block inverted: %s\n", name, png_describe(s).c_str());
    EXPECT_FALSE(png_within(s, kF32PngBounds)) << name << ": " << png_describe(s);
    EXPECT_FALSE(png_within(s, kF16PngBounds)) << name << ": " << png_describe(s);
  }
}

// Rounding differences of one pass the f32 bounds; two everywhere fail them.
TEST(PngCompare, OffByOnePassesOffByTwoFails) {
  const Image8 img = golden_png("e2e0_0.png");
  EXPECT_TRUE(png_within(png_compare(shifted(img, 1), img), kF32PngBounds));
  EXPECT_FALSE(png_within(png_compare(shifted(img, 2), img), kF32PngBounds));
}

TEST(PngCompare, DifferentSizesFail) {
  const Image8 a = golden_png("e2e0_0.png"), b = golden_png("e2e4_0.png");  // 64x64, 80x64
  const PngStats s = png_compare(a, b);
  EXPECT_FALSE(s.same_size);
  EXPECT_FALSE(png_within(s, kF16PngBounds));
}

}  // namespace
}  // namespace hr::test
