// SDXL conditioning vector against the golden unet.sdxl.y (pooled text_embeds + time_ids).
#include <gtest/gtest.h>

#include <cmath>

#include "models/safetensors.h"
#include "models/sd/sdxl_adm.h"
#include "test_paths.h"

namespace hr {
namespace {

TEST(SdxlAdm, MatchesGoldenY) {
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok()) << g.status().str();
  HostTensor te = std::move((*g)->load("unet.sdxl.text_embeds", DType::F32)).value();
  HostTensor ids = std::move((*g)->load("unet.sdxl.time_ids", DType::F32)).value();
  HostTensor y = std::move((*g)->load("unet.sdxl.y", DType::F32)).value();
  int64_t b = te.shape()[0], p = te.shape()[1], adm = y.shape()[1];
  double num = 0, den = 0;
  for (int64_t r = 0; r < b; ++r) {
    HostTensor pooled(DType::F32, Shape{1, p});
    std::copy_n(te.f32() + r * p, p, pooled.f32());
    std::vector<double> v(ids.f32() + r * 6, ids.f32() + r * 6 + 6);
    auto got = sdxl_adm_vector(pooled, v, adm, 1);
    ASSERT_TRUE(got.ok()) << got.status().str();
    for (int64_t i = 0; i < adm; ++i) {
      double d = double(got->f32()[i]) - double(y.f32()[r * adm + i]);
      num += d * d;
      den += double(y.f32()[r * adm + i]) * double(y.f32()[r * adm + i]);
    }
  }
  // cos/sin of arguments up to ~1344 in float32: the reference's own rounding is ~1e-7 relative.
  EXPECT_LT(std::sqrt(num / den), 1e-5);
  HostTensor bad(DType::F32, Shape{1, p});
  EXPECT_FALSE(sdxl_adm_vector(bad, {1, 2, 3, 4, 5}, adm, 1).ok());  // 48 not divisible by 5
}

}  // namespace
}  // namespace hr
