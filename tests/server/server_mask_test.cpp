// POST /upload/mask against a running server: the mask's alpha applied to the original image
// (ComfyUI's semantics), saved where /upload/image would save it; bad references and paths
// that leave their folder refused. Also image_alpha_apply on its own.
#include <gtest/gtest.h>

#include "core/png_io.h"
#include "server/atomic_file.h"
#include "server/image_mask.h"
#include "server_fixture.h"

namespace hr::test {
namespace {

namespace fs = std::filesystem;

// A w x h image whose pixel i has the bytes (i, 2i, 3i[, alpha(i)]).
Image8 image_make(int w, int h, int channels, uint8_t (*alpha)(size_t) = nullptr) {
  Image8 img;
  img.width = w;
  img.height = h;
  img.channels = channels;
  for (size_t i = 0; i < size_t(w) * size_t(h); ++i) {
    img.pixels.push_back(uint8_t(i));
    img.pixels.push_back(uint8_t(2 * i));
    img.pixels.push_back(uint8_t(3 * i));
    if (channels == 4) img.pixels.push_back(alpha ? alpha(i) : uint8_t(255));
  }
  return img;
}

uint8_t alpha_pattern(size_t i) { return uint8_t(i * 17); }

struct Field {
  std::string name, value, filename;
};

std::string form_body(const std::vector<Field>& fields) {
  std::string b;
  for (const Field& f : fields) {
    b += "--MaskB\r\nContent-Disposition: form-data; name=\"" + f.name + "\"";
    if (!f.filename.empty()) b += "; filename=\"" + f.filename + "\"\r\nContent-Type: image/png";
    b += "\r\n\r\n" + f.value + "\r\n";
  }
  return b + "--MaskB--\r\n";
}

class MaskUploadTest : public ServerTest {
 protected:
  // The PNG bytes of `img` (written and read back through a file, as png_write writes files).
  std::string png_bytes(const Image8& img) {
    const fs::path p = dir_ / "tmp-encode.png";
    EXPECT_TRUE(png_write(p.string(), img).ok());
    Result<std::string> bytes = file_read(p);
    fs::remove(p);
    return bytes.ok() ? *bytes : std::string();
  }
  HttpResult upload_mask(const std::string& mask_png, const Json& ref,
                         std::vector<Field> extra = {}) {
    std::vector<Field> f = {{"image", mask_png, "mask.png"}, {"original_ref", ref.dump(), ""}};
    f.insert(f.end(), extra.begin(), extra.end());
    return http_call(port_, "POST", "/upload/mask", form_body(f),
                     "multipart/form-data; boundary=MaskB");
  }
  void original_write(const std::string& folder, const Image8& img) {
    Image8 with_text = img;
    with_text.text = {{"prompt", "{\"3\": {}}"}};
    fs::create_directories(dir_ / folder);
    ASSERT_TRUE(png_write((dir_ / folder / "orig.png").string(), with_text).ok());
  }
};

TEST_F(MaskUploadTest, AppliesTheMaskAlphaToTheOriginal) {
  original_write("output", image_make(4, 3, 3));
  const std::string mask = png_bytes(image_make(4, 3, 4, alpha_pattern));
  HttpResult r = upload_mask(mask, Json{{"filename", "orig.png"}, {"subfolder", ""}, {"type", "output"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (Json{{"name", "mask.png"}, {"subfolder", ""}, {"type", "input"}}));

  Result<Image8> saved = png_read((dir_ / "input" / "mask.png").string());
  ASSERT_TRUE(saved.ok()) << saved.status().str();
  const Image8 want = image_make(4, 3, 4, alpha_pattern);
  EXPECT_EQ(saved->channels, 4);
  EXPECT_EQ(saved->pixels, want.pixels);  // original RGB, mask alpha
  ASSERT_EQ(saved->text.size(), 1u);      // the original's metadata kept
  EXPECT_EQ(saved->text[0].first, "prompt");

  // Again without overwrite: ComfyUI's "name (1).ext"; into a subfolder of temp; the original
  // named by ComfyUI's annotated filename ("orig.png [output]") with no type.
  r = upload_mask(mask, Json{{"filename", "orig.png [output]"}},
                  {{"type", "temp", ""}, {"subfolder", "masks", ""}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["subfolder"], "masks");
  EXPECT_TRUE(fs::exists(dir_ / "temp" / "masks" / "mask.png"));
  r = upload_mask(mask, Json{{"filename", "orig.png"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["name"], "mask (1).png");
  r = upload_mask(mask, Json{{"filename", "orig.png"}}, {{"overwrite", "true", ""}});
  EXPECT_EQ(r.json()["name"], "mask.png");
}

TEST_F(MaskUploadTest, RefusesBadReferencesAndEscapes) {
  original_write("output", image_make(4, 3, 3));
  original_write("input", image_make(4, 3, 3));
  const std::string mask = png_bytes(image_make(4, 3, 4, alpha_pattern));
  // Paths out of their folder: 403, and nothing written outside.
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "../input/orig.png"}}).status, 403);
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "/etc/passwd"}}).status, 403);
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "orig.png"}, {"subfolder", "../input"}}).status,
            403);
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "orig.png"}}, {{"subfolder", "../../x", ""}}).status,
            403);
  std::error_code ec;
  fs::create_directory_symlink(dir_ / "output", dir_ / "input" / "link", ec);
  ASSERT_FALSE(ec);
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "orig.png"}}, {{"subfolder", "link", ""}}).status,
            403);
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  EXPECT_FALSE(fs::exists(dir_ / "output" / "mask.png"));
  // Bad input: 400; a missing original: 404.
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "orig.png"}, {"type", "models"}}).status, 400);
  EXPECT_EQ(upload_mask(mask, Json("orig.png")).status, 400);
  EXPECT_EQ(upload_mask(mask, Json{{"filename", "nope.png"}}).status, 404);
  EXPECT_EQ(upload_mask("not a png", Json{{"filename", "orig.png"}}).status, 400);
  EXPECT_EQ(upload_mask(png_bytes(image_make(3, 3, 4)), Json{{"filename", "orig.png"}}).status,
            400);
  HttpResult no_ref = http_call(port_, "POST", "/upload/mask",
                                form_body({{"image", mask, "mask.png"}}),
                                "multipart/form-data; boundary=MaskB");
  EXPECT_EQ(no_ref.status, 400);
  EXPECT_FALSE(fs::exists(dir_ / "input" / "mask.png"));
  // Under /api/ too.
  EXPECT_EQ(http_call(port_, "POST", "/api/upload/mask",
                      form_body({{"image", mask, "m.png"},
                                 {"original_ref", Json{{"filename", "orig.png"}}.dump(), ""}}),
                      "multipart/form-data; boundary=MaskB")
                .status,
            200);
}

TEST(ImageAlphaApply, RgbMaskIsOpaqueAndSizesMustMatch) {
  Result<Image8> out = image_alpha_apply(image_make(2, 2, 4, alpha_pattern), image_make(2, 2, 3));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->pixels, image_make(2, 2, 4).pixels);  // convert("RGBA"): alpha 255
  EXPECT_FALSE(image_alpha_apply(image_make(2, 2, 3), image_make(2, 3, 4)).ok());
}

}  // namespace
}  // namespace hr::test
