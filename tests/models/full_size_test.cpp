// A full-size SD1.5-shaped UNet (random weights, real shapes) at 64x64 latents on the CPU, one
// step as built and one as the GPUs run it, held to each other (Note [full-size two ways]). Its
// own CTest entry, labelled slow (tests/CMakeLists.txt); its time is bench_models' business
// (`bench_models --device cpu --only unet`).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/make_model.h"
#include "models/sd/unet.h"
#include "test_compare.h"

namespace hr {
namespace {

// Note [full-size two ways]: the tiny goldens (unet_test.cpp) cannot reach what only full-size
// shapes do: 320-1280 channels, 4096-token attention at heads of 40, an arena of hundreds of MiB
// planned over 686 weights. So the step runs twice: as built (NCHW) and through the passes the
// GPUs get (channels-last convolutions with OHWI filters, GroupNorm+SiLU and epilogue-add fusion,
// stacked K/V and Q/K/V projections read as windows; graph/passes.h), which share neither the
// convolution and attention input paths nor the arena plan. Both are f32 on the same kernels'
// arithmetic in other orders, which the goldens put at ~1e-6 relative; 1e-4 (the golden
// tolerance, kRelTol in unet_test.cpp) fails a wrong pass, layout or arena overlap at these
// shapes, which moves the output by O(1).
TEST(FullSizeSD15, OneStepAsBuiltEqualsTheGpuPassesAt64x64) {
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
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend, alloc, executor_policies_default(*backend));
  HostTensor x(DType::F32, Shape{1, 4, 64, 64}), t(DType::F32, Shape{1}), c(DType::F32, Shape{1, 77, 768});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(float(i) * 0.01f);
  for (int64_t i = 0; i < c.numel(); ++i) c.f32()[i] = std::cos(float(i) * 0.003f);
  t.f32()[0] = 500.0f;

  ex.set_passes(false);
  auto built = unet_run(ex, cfg, w, DType::F32, x, t, c);
  ASSERT_TRUE(built.ok()) << built.status().str();
  ASSERT_EQ(built->shape(), (Shape{1, 4, 64, 64}));
  double sum = 0;
  for (int64_t i = 0; i < built->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(built->f32()[i]));
    sum += std::fabs(built->f32()[i]);
  }
  EXPECT_GT(sum, 0.0);

  ex.set_passes(true);
  ex.set_pass_options(PassOptions{true, true, true, true});
  auto passed = unet_run(ex, cfg, w, DType::F32, x, t, c);
  ASSERT_TRUE(passed.ok()) << passed.status().str();
  const double err = test::rel_err(*passed, *built);
  std::printf("as built vs channels-last, fused, stacked: rel err %.3g\n", err);
  EXPECT_LT(err, 1e-4);
}

}  // namespace
}  // namespace hr
