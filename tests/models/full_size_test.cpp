// A full-size SD1.5-shaped UNet (random weights, real shapes) builds, plans and runs one step
// at 64x64 latents on the CPU, with finite output. Its time is measured by bench_models
// (`bench_models --device cpu --only unet`), not here.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "models/make_model.h"
#include "models/unet.h"

namespace hr {
namespace {

TEST(FullSizeSD15, OneUNetStepAt64x64OnCpu) {
  UNetConfig cfg = unet_config_sd15();
  auto g = unet_graph(cfg, 1, 64, 64, 77, DType::F32);
  ASSERT_TRUE(g.ok()) << g.status().str();
  WeightSet w;
  make_model_random_weights(*g, 7, w);
  EXPECT_EQ(w.size(), 686u);  // every UNet tensor of a real SD1.5 checkpoint
  uint64_t params = 0;
  for (const std::string& n : w.names()) params += uint64_t(w.find(n)->numel());
  EXPECT_EQ(params, 859520964u);
  auto backend = cpu_backend_create(0);
  Allocator alloc(*backend);
  Executor ex(*backend, alloc);
  HostTensor x(DType::F32, Shape{1, 4, 64, 64}), t(DType::F32, Shape{1}), c(DType::F32, Shape{1, 77, 768});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(float(i) * 0.01f);
  for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = std::cos(float(i) * 0.003f);
  t.f32()[0] = 500.0f;
  auto out = unet_run(ex, cfg, w, DType::F32, x, t, c);
  ASSERT_TRUE(out.ok()) << out.status().str();
  ASSERT_EQ(out->shape(), (Shape{1, 4, 64, 64}));
  double sum = 0;
  for (int64_t i = 0; i < out->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(out->f32()[i]));
    sum += std::fabs(out->f32()[i]);
  }
  EXPECT_GT(sum, 0.0);
}

}  // namespace
}  // namespace hr
