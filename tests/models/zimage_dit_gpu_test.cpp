// The Z-Image DiT on the CUDA backend against diffusers' ZImageTransformer2DModel
// (tests/data/zimage/dit_golden.safetensors, as zimage_dit_test.cpp on the CPU), in f32 and bf16
// (skips where no GPU is present).
#include <gtest/gtest.h>

#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/weight_set.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "models/zimage/zimage_config.h"
#include "models/zimage/zimage_dit.h"
#include "test_compare.h"
#include "test_cuda_dtype.h"
#include "test_paths.h"

namespace hr {
namespace {

class CudaZImageDit : public test::CudaDtypeTest {};

TEST_P(CudaZImageDit, MatchesDiffusers) {
  const DType dt = GetParam();
  // f32 differs from the CPU by summation order only; bf16 activations cost ~4e-3 per op (the
  // bound the Flux DiT's GPU test uses for bf16).
  const double tol = dt == DType::F32 ? 1e-4 : 6e-2;
  auto f = SafetensorsFile::open(test::data_path("zimage/dit_golden.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().str();
  const SafetensorsFile& file = **f;
  Result<ZImageConfig> c = zimage_config_detect(file, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  c->axes_dim = {8, 4, 4};  // make_dit_golden.py's axes (head dim 16)
  Allocator alloc(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend_, alloc, executor_policies_default(*backend_));
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, file, "", dt).ok());
  auto ld = [&](const std::string& n) { return std::move(file.load(n, DType::F32)).value(); };
  for (const char* name : {"a", "b"}) {
    const std::string p = std::string("golden.") + name;
    HostTensor x = ld(p + ".x"), sigma = ld(p + ".sigma"), ctx = ld(p + ".context");
    ZImageInputs in{&x, &sigma, &ctx};
    Result<HostTensor> out = zimage_dit_run(ex, *c, w, dt, in);
    ASSERT_TRUE(out.ok()) << out.status().str();
    const double err = test::rel_err(*out, ld(p + ".out"));
    std::printf("cuda %s zimage dit case %s rel err %.3g\n", dtype_name(dt), name, err);
    EXPECT_LT(err, tol) << "case " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaZImageDit, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hr
