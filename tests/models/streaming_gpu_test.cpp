// Weight streaming on the GPU (Note [streamed execution] in graph/stream_copies.cpp): many UNet steps
// through a ring of two or three of the largest weights, copies on their own stream and the steps captured as CUDA
// graphs, give the resident run's outputs bit for bit; memory taken by someone else between
// steps is recovered from by planning again (Note [OOM recovery]).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/sd_unet.h"
#include "test_gpu.h"
#include "test_paths.h"

namespace hr {
namespace {

bool bit_equal(const HostTensor& a, const HostTensor& b) {
  return a.desc() == b.desc() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Unbinds a model's weights at scope exit: declared after the allocator they were bound to, it
// runs before that allocator dies (the weights' device copies are the allocator's buffers; a
// model outliving its allocator while bound crashed at the end of a test).
struct Unbind {
  WeightSet& weights;
  ~Unbind() { weights.bind(nullptr, nullptr); }
};

class CudaStreaming : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = cuda_backend_create(0);
    HR_SKIP_UNLESS_GPU(b.ok(), b.status().message());
    backend_ = std::move(b).value();
    auto g = SafetensorsFile::open(test::golden_path("golden-unet-vae.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().str();
    auto ld = [&](const char* n) { return std::move((*g)->load(n, DType::F32)).value(); };
    x_ = ld("unet.sd1.x");
    t_ = ld("unet.sd1.timesteps");
    c_ = ld("unet.sd1.context");
  }
  std::unique_ptr<LoadedModel> load() {
    LoadOptions o;
    o.diffusion_dtype = DType::F16;
    o.load_vae = false;
    auto m = model_load(test::golden_path("tiny-sd1.safetensors"), o);
    EXPECT_TRUE(m.ok()) << m.status().str();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  // Step i's input: the golden latent scaled, so that every step differs.
  HostTensor step_input(int i) const {
    HostTensor x = x_.clone();
    for (int64_t k = 0; k < x.numel(); ++k) x.f32()[k] *= 1.0f + 0.03f * float(i);
    return x;
  }
  // An executor whose budget holds the arena and a quarter of the weights, streaming through a
  // ring of two or three of the largest.
  struct Streamed {
    std::unique_ptr<Allocator> alloc;
    std::unique_ptr<Executor> ex;
  };
  Streamed streamed_executor(uint64_t budget) {
    Streamed s;
    s.alloc = std::make_unique<Allocator>(*backend_, budget, eviction_policy());
    s.ex = std::make_unique<Executor>(*backend_, *s.alloc, executor_policies_default(*backend_));
    ResidencyOptions o;
    o.depth = 2;
    o.small_bytes = 0;
    s.ex->set_residency_options(o);
    return s;
  }
  std::unique_ptr<Backend> backend_;
  HostTensor x_, t_, c_;
};

TEST_F(CudaStreaming, ManyStepsThroughTwoSlotsEqualTheResidentRunBitwise) {
  constexpr int kSteps = 24;
  auto resident_model = load(), streamed_model = load();
  ASSERT_TRUE(resident_model && streamed_model);
  Allocator a1(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor e1(*backend_, a1, executor_policies_default(*backend_));
  sd_unet(*resident_model)->store.bind(backend_.get(), &a1);
  Unbind unbind1{sd_unet(*resident_model)->store};
  std::vector<HostTensor> want;
  for (int i = 0; i < kSteps; ++i) {
    auto out = unet_run(e1, *sd_unet(*resident_model), step_input(i), t_, c_);
    ASSERT_TRUE(out.ok()) << out.status().str();
    want.push_back(std::move(out).value());
  }
  const uint64_t weights = sd_unet(*resident_model)->store.device_bytes(), arena = e1.arena_held();
  // The room for weights: a quarter of them, at least a ring of two of the largest.
  const uint64_t budget = arena + weights / 4;
  Streamed st = streamed_executor(budget);
  Allocator& a2 = *st.alloc;
  Executor& e2 = *st.ex;
  sd_unet(*streamed_model)->store.bind(backend_.get(), &a2);
  Unbind unbind2{sd_unet(*streamed_model)->store};
  for (int i = 0; i < kSteps; ++i) {
    auto out = unet_run(e2, *sd_unet(*streamed_model), step_input(i), t_, c_);
    ASSERT_TRUE(out.ok()) << out.status().str();
    EXPECT_TRUE(bit_equal(*out, want[size_t(i)])) << "step " << i;
  }
  const ResidencyPlan& r = e2.last_residency();
  EXPECT_TRUE(r.streams());
  EXPECT_LE(r.ring_bytes, 3 * r.largest_streamed) << e2.last_residency_text();
  EXPECT_LE(a2.total().peak, budget);
  EXPECT_GE(e2.streamed_total(), uint64_t(kSteps) * r.streamed_bytes);
  std::printf("%d steps, budget %llu KiB: %s; streamed %llu KiB in all, bitwise equal\n", kSteps,
              (unsigned long long)(budget >> 10), e2.last_residency_text().c_str(),
              (unsigned long long)(e2.streamed_total() >> 10));
}

// Note [captures and freed memory]: between captured streamed steps the ring and the arena are
// freed (another graph ran, or the allocator reclaimed them) and the weights are uploaded again;
// the new blocks usually land at the old addresses. The replays must still read the new blocks
// (before the fix the second image of SDXL in --novram crashed inside cudaGraphLaunch).
TEST_F(CudaStreaming, CapturedStepsSurviveBuffersFreedAndReallocated) {
  auto resident_model = load(), streamed_model = load();
  ASSERT_TRUE(resident_model && streamed_model);
  Allocator a1(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor e1(*backend_, a1, executor_policies_default(*backend_));
  sd_unet(*resident_model)->store.bind(backend_.get(), &a1);
  Unbind unbind1{sd_unet(*resident_model)->store};
  auto want = unet_run(e1, *sd_unet(*resident_model), x_, t_, c_);
  ASSERT_TRUE(want.ok()) << want.status().str();
  Streamed st =
      streamed_executor(e1.arena_held() + sd_unet(*resident_model)->store.device_bytes() / 4);
  Executor& e2 = *st.ex;
  sd_unet(*streamed_model)->store.bind(backend_.get(), st.alloc.get());
  Unbind unbind2{sd_unet(*streamed_model)->store};
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 3; ++i) {  // plain, captured, replayed
      auto out = unet_run(e2, *sd_unet(*streamed_model), x_, t_, c_);
      ASSERT_TRUE(out.ok()) << out.status().str();
      EXPECT_TRUE(bit_equal(*out, *want)) << "round " << round << " step " << i;
    }
    ASSERT_TRUE(e2.last_residency().streams()) << e2.last_residency_text();
    e2.release_arena();
    sd_unet(*streamed_model)->store.release_device();
  }
}

// Another allocation (standing for another process) takes all but a little of the device
// between two steps; the next step's weight upload is refused by the device, and the executor
// frees what it caches, plans within what is free and streams.
TEST_F(CudaStreaming, MemoryTakenBetweenStepsIsRecoveredByStreaming) {
  auto m = load();
  ASSERT_TRUE(m);
  // No budget: only the device refuses.
  Allocator alloc(*backend_, Allocator::kUnlimited, eviction_policy());
  Executor ex(*backend_, alloc, executor_policies_default(*backend_));
  sd_unet(*m)->store.bind(backend_.get(), &alloc);
  Unbind unbind{sd_unet(*m)->store};
  auto first = unet_run(ex, *sd_unet(*m), x_, t_, c_);
  ASSERT_TRUE(first.ok()) << first.status().str();
  const uint64_t weights = sd_unet(*m)->store.device_bytes(), arena = ex.arena_held();
  sd_unet(*m)->store.release_device();  // the next step allocates its arena and uploads again
  ex.release_arena();
  alloc.cache_release(UINT64_MAX);  // the freed weight blocks too (Note [weight block cache])
  // Leave the arena, 2 MiB and a quarter of the weights free: cudaMalloc works in 2 MiB pages, so
  // the arena may take up to 2 MiB more than its size (with only a third of the weights beside
  // it, the arena itself was refused on the H200), and up to 2 MiB more stay free.
  const uint64_t leave = arena + (2ull << 20) + weights / 4;
  const uint64_t free_now = backend_->info().memory_free;
  ASSERT_GT(free_now, leave + (64ull << 20));
  ASSERT_LT(leave + (2ull << 20), arena + weights);
  std::vector<void*> hogs;
  uint64_t taken = 0;
  const uint64_t block = 64ull << 20;
  while (backend_->info().memory_free > leave + block) {
    Result<void*> p = backend_->device_alloc(block);
    if (!p.ok()) break;
    hogs.push_back(*p);
    taken += block;
  }
  for (uint64_t b = 2ull << 20; backend_->info().memory_free > leave + b;) {
    Result<void*> p = backend_->device_alloc(b);
    if (!p.ok()) break;
    hogs.push_back(*p);
  }
  const uint64_t free_left = backend_->info().memory_free;
  auto second = unet_run(ex, *sd_unet(*m), x_, t_, c_);
  for (void* p : hogs) backend_->device_free(p);
  ASSERT_TRUE(second.ok()) << second.status().str();
  EXPECT_GE(ex.recoveries(), 1u) << "the device had room for everything: " << free_left;
  EXPECT_TRUE(ex.last_residency().streams()) << ex.last_residency_text();
  EXPECT_TRUE(bit_equal(*second, *first));
  std::printf("took %llu MiB, left %llu KiB free (weights %llu KiB, arena %llu KiB): recovered "
              "%llu time(s): %s\n",
              (unsigned long long)(taken >> 20), (unsigned long long)(free_left >> 10),
              (unsigned long long)(weights >> 10), (unsigned long long)(arena >> 10),
              (unsigned long long)ex.recoveries(), ex.last_residency_text().c_str());
}

}  // namespace
}  // namespace hr
