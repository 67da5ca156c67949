// The Flux DiT component streamed on the GPU (Note [streamed execution] in
// graph/stream_copies.cpp): with room for a quarter of its weights, FluxModel::run on ComfyUI's
// golden inputs streams the rest block by block and gives the resident run's output bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/flux/flux_model.h"
#include "test_gpu.h"
#include "test_paths.h"

namespace hr {
namespace {

// Unbinds the weights before the allocator they were bound to dies (streaming_gpu_test.cpp).
struct Unbind {
  WeightSet& weights;
  ~Unbind() { weights.bind(nullptr, nullptr); }
};

std::shared_ptr<const HostTensor> row(const HostTensor& t, int64_t i) {
  Shape s = t.shape();
  const int64_t per = t.numel() / s[0];
  s[0] = 1;
  auto out = std::make_shared<HostTensor>(DType::F32, s);
  std::memcpy(out->f32(), t.f32() + i * per, size_t(per) * 4);
  return out;
}

TEST(CudaFluxStreaming, StreamedStepsEqualTheResidentRunBitwise) {
  auto b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
  std::unique_ptr<Backend> backend = std::move(b).value();
  const std::string path = test::data_path("flux/dit_golden.safetensors");
  LoadOptions o;
  o.diffusion_dtype = DType::BF16;
  auto resident = model_load(path, o), streamed = model_load(path, o);
  ASSERT_TRUE(resident.ok() && streamed.ok());
  FluxModel *r = flux_model(**resident), *s = flux_model(**streamed);
  ASSERT_TRUE(r && s);
  r->config.axes_dim = s->config.axes_dim = {4, 6, 6};  // make_dit_golden.py's head dim 16
  const SafetensorsFile& f = *(*resident)->file;
  auto ld = [&](const char* n) { return std::move(f.load(n, DType::F32)).value(); };
  HostTensor x = ld("golden.latent"), t = ld("golden.timesteps");
  HostTensor txt = ld("golden.txt"), y = ld("golden.y"), g = ld("golden.guidance");
  std::vector<CondEntry> es(2);
  for (int64_t i = 0; i < 2; ++i) {
    es[size_t(i)].cond = row(txt, i);
    es[size_t(i)].extras.set(kCondPooledOutput, row(y, i));
    es[size_t(i)].extras.set(kCondGuidance, double(g.f32()[i]));
  }
  const CondEntry* entries[] = {&es[0], &es[1]};

  Allocator a1(*backend, Allocator::kUnlimited, eviction_policy());
  Executor e1(*backend, a1, executor_policies_default(*backend));
  r->store.bind(backend.get(), &a1);
  Unbind u1{r->store};
  auto want = r->run(e1, r->weights(), x, t, entries);
  ASSERT_TRUE(want.ok()) << want.status().str();
  const uint64_t budget = e1.arena_held() + r->store.device_bytes() / 4;

  Allocator a2(*backend, budget, eviction_policy());
  Executor e2(*backend, a2, executor_policies_default(*backend));
  ResidencyOptions ro;
  ro.depth = 2;
  ro.small_bytes = 0;
  e2.set_residency_options(ro);
  s->store.bind(backend.get(), &a2);
  Unbind u2{s->store};
  for (int step = 0; step < 3; ++step) {  // plain, captured, replayed
    auto out = s->run(e2, s->weights(), x, t, entries);
    ASSERT_TRUE(out.ok()) << out.status().str();
    ASSERT_EQ(out->desc(), want->desc());
    EXPECT_EQ(std::memcmp(out->data(), want->data(), want->bytes()), 0) << "step " << step;
  }
  EXPECT_TRUE(e2.last_residency().streams()) << e2.last_residency_text();
  EXPECT_LE(a2.total().peak, budget);
  std::printf("flux streamed: %s\n", e2.last_residency_text().c_str());
}

}  // namespace
}  // namespace hr
