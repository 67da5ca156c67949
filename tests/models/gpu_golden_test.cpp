// Model goldens on the CUDA backend: the tiny SD1 UNet and VAE in f32 and f16 against the
// reference tensors (skips where no GPU is present).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_vae.h"
#include "models/sd/sd_unet.h"
#include "test_compare.h"
#include "test_cuda_dtype.h"
#include "test_paths.h"

namespace hr {
namespace {

using test::rel_err;

class CudaGolden : public test::CudaDtypeTest {};

TEST_P(CudaGolden, UNetAndVAEMatchReference) {
  DType dt = GetParam();
  // f32 on the GPU differs from the CPU only by summation order (~1e-6); f16 storage of
  // activations costs ~1e-3 per op, compounded over ~100 ops of the tiny UNet.
  double tol = dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 2e-2 : 6e-2;
  Allocator alloc(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend_, alloc, executor_policies_default(*backend_));
  LoadOptions o;
  o.diffusion_dtype = o.vae_dtype = dt;
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  sd_unet(**m)->store.bind(backend_.get(), &alloc);
  sd_vae(**m)->store.bind(backend_.get(), &alloc);
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok());
  auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
  HostTensor x = ld("unet.sd1.x"), t = ld("unet.sd1.timesteps"), c = ld("unet.sd1.context");
  auto out = unet_run(ex, *sd_unet(**m), x, t, c);
  ASSERT_TRUE(out.ok()) << out.status().str();
  double e = rel_err(*out, ld("unet.sd1.out"));
  std::printf("cuda %s unet.sd1.out rel err %.3g\n", dtype_name(dt), e);
  EXPECT_LT(e, tol);
  // A latent whose halvings are odd (Note [odd latent sizes]): channels-last slices on the GPU.
  auto go = SafetensorsFile::open(test::golden_path("golden-unet-odd.safetensors"));
  ASSERT_TRUE(go.ok());
  auto lo = [&](const char* n) { return std::move((*go)->load(n, DType::F32)).value(); };
  auto odd = unet_run(ex, *sd_unet(**m), lo("unet_odd.sd1.b.x"), lo("unet_odd.sd1.b.t"),
                      lo("unet_odd.sd1.b.context"));
  ASSERT_TRUE(odd.ok()) << odd.status().str();
  e = rel_err(*odd, lo("unet_odd.sd1.b.out"));
  std::printf("cuda %s unet_odd.sd1.b.out rel err %.3g\n", dtype_name(dt), e);
  EXPECT_LT(e, tol);
  auto img = vae_decode(ex, *sd_vae(**m), ld("vae.sd1.decode.latent"));
  ASSERT_TRUE(img.ok()) << img.status().str();
  e = rel_err(*img, ld("vae.sd1.decode.image"));
  std::printf("cuda %s vae.sd1.decode.image rel err %.3g\n", dtype_name(dt), e);
  EXPECT_LT(e, tol);
  auto mo = vae_encode(ex, *sd_vae(**m), ld("vae.sd1.encode.image"));
  ASSERT_TRUE(mo.ok()) << mo.status().str();
  e = rel_err(mo->mean, ld("vae.sd1.encode.mean"));
  std::printf("cuda %s vae.sd1.encode.mean rel err %.3g\n", dtype_name(dt), e);
  EXPECT_LT(e, tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGolden, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hr

namespace hr {
namespace {

// Note [captured steps]: replays of a recorded step give the same results as plain runs, and a
// new input is picked up by the replay.
TEST(CudaCapture, ReplayMatchesPlainRuns) {
  auto b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
  std::unique_ptr<Backend> backend = std::move(b).value();
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  Executor captured(*backend, alloc, executor_policies_default(*backend));
  setenv("HEADROOM_CUDA_GRAPHS", "0", 1);
  Executor plain(*backend, alloc, executor_policies_default(*backend));
  unsetenv("HEADROOM_CUDA_GRAPHS");
  LoadOptions o;
  o.diffusion_dtype = DType::F16;
  o.load_vae = false;
  auto m = model_load(test::golden_path("tiny-sd1.safetensors"), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  sd_unet(**m)->store.bind(backend.get(), &alloc);
  auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  ASSERT_TRUE(g.ok());
  auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
  HostTensor x = ld("unet.sd1.x"), t = ld("unet.sd1.timesteps"), c = ld("unet.sd1.context");
  auto ref = unet_run(plain, *sd_unet(**m), x, t, c);
  ASSERT_TRUE(ref.ok()) << ref.status().str();
  for (int i = 0; i < 4; ++i) {  // run 1 plain, run 2 records, runs 3-4 replay
    auto out = unet_run(captured, *sd_unet(**m), x, t, c);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_LT(rel_err(*out, *ref), 1e-4) << "run " << i;  // same kernels; allow atomics order
  }
  HostTensor x2 = x.clone();
  for (int64_t i = 0; i < x2.numel(); ++i) x2.f32()[i] *= -0.5f;
  auto ref2 = unet_run(plain, *sd_unet(**m), x2, t, c);
  auto out2 = unet_run(captured, *sd_unet(**m), x2, t, c);
  ASSERT_TRUE(ref2.ok() && out2.ok());
  EXPECT_LT(rel_err(*out2, *ref2), 1e-4);
  EXPECT_GT(rel_err(*out2, *ref), 1e-3);
}

}  // namespace
}  // namespace hr
