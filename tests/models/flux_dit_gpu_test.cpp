// The Flux.1 DiT on the CUDA backend against ComfyUI's Flux (tests/data/flux/dit_golden.safetensors,
// as flux_dit_test.cpp on the CPU), in f32 and bf16 (skips where no GPU is present).
#include <gtest/gtest.h>

#include <memory>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/weight_set.h"
#include "models/flux/flux_dit.h"
#include "models/flux/flux_tokens.h"
#include "models/safetensors.h"
#include "models/weight_load.h"
#include "test_compare.h"
#include "test_cuda_dtype.h"
#include "test_paths.h"

namespace hr {
namespace {

class CudaFluxDit : public test::CudaDtypeTest {};

TEST_P(CudaFluxDit, MatchesComfyFlux) {
  const DType dt = GetParam();
  // f32 differs from the CPU by summation order only; bf16 activations cost ~4e-3 per op (the
  // bound the SD goldens use for bf16).
  const double tol = dt == DType::F32 ? 1e-4 : 6e-2;
  auto f = SafetensorsFile::open(test::data_path("flux/dit_golden.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().str();
  const SafetensorsFile& file = **f;
  Result<FluxConfig> c = flux_config_detect(file, "");
  ASSERT_TRUE(c.ok()) << c.status().str();
  c->axes_dim = {4, 6, 6};  // make_dit_golden.py's axes (head dim 16)
  auto ld = [&](const char* n, DType d) { return std::move(file.load(n, DType::F32)).value().to(d); };
  HostTensor img = ld("golden.img", dt), txt = ld("golden.txt", dt), y = ld("golden.y", dt);
  HostTensor t = ld("golden.timesteps", DType::F32), guidance = ld("golden.guidance", DType::F32);
  HostTensor ref = ld("golden.out", DType::F32);
  Result<HostTensor> pe = flux_pe_table(5, 4, 3, c->axes_dim, c->theta);
  ASSERT_TRUE(pe.ok()) << pe.status().str();
  Result<Graph> g = flux_dit_graph(*c, 2, 4, 3, 5, dt);
  ASSERT_TRUE(g.ok()) << g.status().str();

  Allocator alloc(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend_, alloc, executor_policies_default(*backend_));
  WeightSet w;
  ASSERT_TRUE(weights_load_prefix(w, file, "", dt).ok());
  w.bind(backend_.get(), &alloc);
  HostInputs in = {{"img", &img}, {"txt", &txt}, {"timesteps", &t},
                   {"y", &y},     {"guidance", &guidance}, {"pe", &*pe}};
  Result<std::vector<HostTensor>> out = ex.run(*g, in, w);
  ASSERT_TRUE(out.ok()) << out.status().str();
  ASSERT_EQ(out->size(), 1u);
  HostTensor got = (*out)[0].dtype() == DType::F32 ? std::move((*out)[0]) : (*out)[0].to(DType::F32);
  const double err = test::rel_err(got, ref);
  std::printf("cuda %s flux dit rel err %.3g\n", dtype_name(dt), err);
  EXPECT_LT(err, tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFluxDit, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hr
