// GET /view's preview= and channel= (ComfyUI's thumbnails and channel views).
#include <gtest/gtest.h>

#include <fstream>

#include "core/png_io.h"
#include "server/view_transform.h"
#include "server_fixture.h"

namespace hr::test {
namespace {

class ViewTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    std::filesystem::create_directories(dir_ / "input");
    Image8 img;
    img.width = 4;
    img.height = 2;
    img.channels = 4;
    for (int i = 0; i < 8; ++i) img.pixels.insert(img.pixels.end(), {200, 100, 50, uint8_t(i * 30)});
    ASSERT_TRUE(png_write((dir_ / "input" / "pic.png").string(), img).ok());
  }
  HttpResult view(const std::string& params) {
    return http_call(port_, "GET", "/view?filename=pic.png&type=input" + params);
  }
  Image8 png_of(const HttpResult& r) {
    auto path = dir_ / "back.png";
    std::ofstream(path, std::ios::binary) << r.body;
    Result<Image8> img = png_read(path.string());
    EXPECT_TRUE(img.ok()) << img.status().str();
    return img.ok() ? *img : Image8();
  }
};

TEST_F(ViewTest, ChannelsAsComfyUi) {
  HttpResult plain = view("");
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(png_of(plain).channels, 4);
  HttpResult rgb = view("&channel=rgb");
  ASSERT_EQ(rgb.status, 200);
  EXPECT_EQ(rgb.content_type, "image/png");
  Image8 c = png_of(rgb);
  EXPECT_EQ(c.channels, 3);
  EXPECT_EQ(c.pixels[0], 200);
  HttpResult a = view("&channel=a");
  ASSERT_EQ(a.status, 200);
  Image8 al = png_of(a);
  ASSERT_EQ(al.channels, 4);
  EXPECT_EQ(al.pixels[0], 0);       // colour dropped
  EXPECT_EQ(al.pixels[4 + 3], 30);  // alpha of the second pixel kept
  EXPECT_EQ(view("&channel=bogus").status, 400);
}

TEST_F(ViewTest, PreviewReencodesAtTheAskedFormat) {
  HttpResult webp = view("&preview=webp;50");
  ASSERT_EQ(webp.status, 200);
  if (view_has_webp()) {
    EXPECT_EQ(webp.content_type, "image/webp");
    EXPECT_EQ(webp.body.substr(0, 4), "RIFF");
    EXPECT_EQ(webp.body.substr(8, 4), "WEBP");
  } else {
    EXPECT_EQ(webp.content_type, "image/png");
  }
  HttpResult jpeg = view("&preview=jpeg;80");
  ASSERT_EQ(jpeg.status, 200);
  if (view_has_jpeg()) {
    EXPECT_EQ(jpeg.content_type, "image/jpeg");
    EXPECT_EQ(uint8_t(jpeg.body[0]), 0xFF);
    EXPECT_EQ(uint8_t(jpeg.body[1]), 0xD8);
  }
  // An alpha channel asked for turns a jpeg preview into webp, as in ComfyUI.
  HttpResult alpha = view("&preview=jpeg;80&channel=a");
  ASSERT_EQ(alpha.status, 200);
  EXPECT_NE(alpha.content_type, "image/jpeg");
  // Paths stay confined with the new parameters too.
  EXPECT_EQ(http_call(port_, "GET", "/view?filename=../jobs.sqlite&type=input&preview=webp").status,
            403);
}

}  // namespace
}  // namespace hr::test
