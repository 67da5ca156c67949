// fp8 weights on the CUDA backend against ComfyUI's own fp8 UNet (issue 38): the tiny SD1 and
// SDXL checkpoints stored as e4m3 at load, one UNet call in f16, dequantizing (weight_dtype
// fp8_e4m3fn) and as fp8 GEMMs (fp8_e4m3fn_fast), against tests/data/fp8/comfy_fp8_unet.safetensors
// (made by make_comfy_fp8_unet_golden.py with ComfyUI's UNetModel and comfy/ops.py on an H200).
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "test_compare.h"
#include "test_gpu.h"
#include "test_paths.h"

namespace hr {
namespace {

struct Fp8Case {
  const char* model;  // "sd1", "sdxl"
  bool fast;
};

class CudaFp8Golden : public ::testing::TestWithParam<Fp8Case> {};

int fp8_gemms(const Graph& g, const BackendKernels& k) {
  Result<Graph> r = graph_passes(g, k);
  int n = 0;
  if (r.ok())
    for (const Node& node : r->nodes()) n += node.kind == OpKind::LINEAR_FP8;
  return n;
}

// Note [fp8 golden tolerances]: ComfyUI and headroom compute the same f16 UNet from the same fp8
// weights; their f16 ops round differently (~1e-3 per op, as CudaGolden's f16 bound): measured
// 2.7e-3 (SD1) and 3.2e-3 (SDXL) dequantizing. The fast mode also rounds every linear layer's
// input to e4m3 (3 mantissa bits), where a 1-ulp f16 difference moves a value to the next fp8
// step (12.5 %), and those flips compound over the layers: ComfyUI's own fast output is 6.2 %
// (SD1) and 9.1 % (SDXL) from its dequantized one, headroom's fast output 7.2 % and 10.4 % from
// ComfyUI's fast one (H200, 2026-12-03). The fp8 GEMM itself and the e4m3 cast are checked
// against exact references op by op (linear_fp8_* and cast_*_to_f8_e4m3 in the op harness);
// here the bound is 1.5x ComfyUI's own spread.
TEST_P(CudaFp8Golden, UNetMatchesComfyUI) {
  const Fp8Case c = GetParam();
  auto b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
  const std::string golden = test::data_path("fp8/comfy_fp8_unet.safetensors");
  ASSERT_TRUE(std::filesystem::exists(golden))
      << golden << " is missing: run tests/data/fp8/make_comfy_fp8_unet_golden.py on the GPU machine";
  Backend& backend = **b;
  Allocator alloc(backend, Allocator::kUnlimited, eviction_policy());
  Executor ex(backend, alloc, executor_policies_default(backend));
  LoadOptions o;
  o.diffusion_dtype = DType::F16;
  o.diffusion_weight_dtype = DType::F8_E4M3;
  o.diffusion_fp8_fast = c.fast;
  o.load_vae = false;
  const std::string model = c.model;
  auto m = model_load(test::golden_path("tiny-" + model + ".safetensors"), o);
  ASSERT_TRUE(m.ok()) << m.status().str();
  SDUNet& unet = *sd_unet(**m);
  unet.store.bind(&backend, &alloc);
  auto gf = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
  auto ff = SafetensorsFile::open(golden);
  ASSERT_TRUE(gf.ok() && ff.ok());
  auto ld = [&](const SafetensorsFile& f, const std::string& n) {
    return std::move(f.load(n, DType::F32)).value();
  };
  const std::string p = "unet." + model + ".";
  HostTensor x = ld(**gf, p + "x"), t = ld(**gf, p + "timesteps"), ctx = ld(**gf, p + "context");
  HostTensor y = model == "sdxl" ? ld(**gf, p + "y") : HostTensor();
  const int gemms = fp8_gemms(unet_graph(unet.config, x.shape()[0], x.shape()[2], x.shape()[3],
                                         ctx.shape()[1], DType::F16)
                                  .value(),
                              backend);
  if (c.fast && backend.runs_fp8_gemm()) {
    EXPECT_GT(gemms, 0) << "no fp8 GEMM in the _fast graph";
  }
  if (!c.fast) {
    EXPECT_EQ(gemms, 0);
  }
  auto out = unet_run(ex, unet, x, t, ctx, model == "sdxl" ? &y : nullptr);
  ASSERT_TRUE(out.ok()) << out.status().str();
  const char* mode = c.fast ? "fast" : "dequant";
  const double e = test::rel_err(*out, ld(**ff, fmt::format("fp8.{}.{}.out", mode, model)));
  std::printf("cuda fp8 %s %s: %d fp8 GEMMs, rel err vs ComfyUI %.3g\n", mode, model.c_str(),
              gemms, e);
  EXPECT_LT(e, c.fast ? 0.15 : 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaFp8Golden,
                         ::testing::Values(Fp8Case{"sd1", false}, Fp8Case{"sd1", true},
                                           Fp8Case{"sdxl", false}, Fp8Case{"sdxl", true}),
                         [](const ::testing::TestParamInfo<Fp8Case>& i) {
                           return std::string(i.param.model) + (i.param.fast ? "_fast" : "_dequant");
                         });

}  // namespace
}  // namespace hr
