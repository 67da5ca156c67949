// The CUDA backend against the float64 reference (every harness case in f32, f16 and bf16; the
// full-size production cases are in op_cuda_production_test.cpp), plus its allocator,
// stream/event/copy and deferred-error behaviour. Every test skips with "no CUDA device: ..." where there is no GPU
// (fails where one is required, Note [required GPU] in test_gpu.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "op_harness.h"
#include "test_gpu.h"

#ifdef HEADROOM_WITH_CUDA
#include <cudnn.h>

#include "backend/cuda/cuda_norm.h"
#include "backend/cuda/cuda_ops.h"
#endif

namespace hr::test {
namespace {

// Note [required GPU]: skips without a GPU, fails where one is required.
#define REQUIRE_CUDA() HR_HARNESS_CUDA(gpu)

class OpCudaTest : public ::testing::TestWithParam<CaseParam> {};

TEST_P(OpCudaTest, MatchesReference) {
  REQUIRE_CUDA();
  const OpCase& c = harness_cases()[GetParam().index];
  OpResult r = op_case_run(gpu, c, GetParam().dtype, op_seed());
  if (r.skipped) GTEST_SKIP() << r.message;
  std::cout << "  " << r.message << "\n";
  ASSERT_TRUE(r.status.ok()) << r.message;
  EXPECT_TRUE(r.pass) << r.message;
}

INSTANTIATE_TEST_SUITE_P(Cases, OpCudaTest, ::testing::ValuesIn(case_params()),
                         [](const ::testing::TestParamInfo<CaseParam>& info) {
                           return case_param_name(info.param);
                         });

// Every compute op takes the three float dtypes on the GPU (layout ops take any).
TEST(CudaBackend, SupportsEveryOpInEveryFloatDtype) {
  REQUIRE_CUDA();
  for (int k = 0; k < int(OpKind::COUNT_); ++k)
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      if (OpKind(k) == OpKind::LINEAR_FP8 && !gpu.runs_fp8_gemm()) continue;  // sm_89 and later
      EXPECT_TRUE(gpu.op_supported(OpKind(k), t)) << op_name(OpKind(k)) << " " << dtype_name(t);
    }
  EXPECT_FALSE(gpu.memory_is_host());
  EXPECT_EQ(gpu.torch_generator(), TorchGenerator::CUDA_PHILOX);
  EXPECT_EQ(gpu.compute_dtype_default(), DType::F16);
  EXPECT_TRUE(gpu.prefers_stacked_weights());
  DeviceInfo info = gpu.info();
  EXPECT_EQ(info.kind, "cuda");
  EXPECT_GT(info.memory_total, 0u);
  EXPECT_LE(info.memory_free, info.memory_total);
  std::cout << "  " << info.name << ": " << (info.memory_free >> 20) << " MiB free of "
            << (info.memory_total >> 20) << " MiB\n";
}

// Note [cuDNN attention shapes]: cuDNN's engine must accept SD's long self-attentions (a refusal
// would silently leave them on the slower kernels); the 77-key cross-attentions stay ours.
TEST(CudaBackend, CudnnAttentionTakesSdSelfAttentionShapes) {
  REQUIRE_CUDA();
  ASSERT_EQ(gpu.info().kind, "cuda");  // the plans are made on the current device
#ifdef HEADROOM_WITH_CUDA
  if (const char* e = std::getenv("HEADROOM_CUDNN_ATTENTION"); e && std::string(e) == "0")
    GTEST_SKIP() << "HEADROOM_CUDNN_ATTENTION=0";
  cuda::CudaContext ctx;
  ASSERT_EQ(cudnnCreate(&ctx.dnn), CUDNN_STATUS_SUCCESS);
  struct Sd {
    int64_t n, heads, d;
  };
  for (DType t : {DType::F16, DType::BF16})
    for (Sd s : {Sd{4096, 8, 40}, Sd{1024, 8, 80}, Sd{4096, 10, 64}, Sd{1024, 20, 64}}) {
      EXPECT_TRUE(cuda::attention_dnn_applies(t, s.n, s.n, s.d, s.d, false));
      const cuda::DnnAttentionPlan& p =
          cuda::attention_dnn_plan(ctx, cuda::attention_dnn_key(t, 2, s.n, s.n, s.heads, s.d, s.d));
      EXPECT_TRUE(p.ok()) << dtype_name(t) << " " << s.n << " d" << s.d << ": " << p.refused;
      // The same attention reading Q, K and V as windows of one stacked [B, N, 3 H D] projection
      // (Note [stacked context projections], self-attention mode): rows 3 H D apart.
      const int64_t pitch = 3 * s.heads * s.d;
      const cuda::DnnAttentionPlan& w = cuda::attention_dnn_plan(
          ctx, cuda::attention_dnn_key(t, 2, s.n, s.n, s.heads, s.d, s.d, pitch, pitch, pitch));
      EXPECT_TRUE(w.ok()) << dtype_name(t) << " " << s.n << " d" << s.d << " pitch " << pitch
                          << ": " << w.refused;
    }
  EXPECT_FALSE(cuda::attention_dnn_applies(DType::F16, 4096, 77, 64, 64, false));
  EXPECT_FALSE(cuda::attention_dnn_applies(DType::F16, 4096, 4096, 64, 64, true));  // causal
  cudnnDestroy(ctx.dnn);
#endif
}

// What CI without a GPU sees: a clean NOT_FOUND (or UNSUPPORTED in a build without CUDA);
// where a GPU is required (Note [required GPU]) either is a failure. Not a CudaBackend.* test,
// so that it runs in CI's set (Note [test labels] in tests/CMakeLists.txt).
TEST(CudaBackendCreate, FailsCleanlyOrWorks) {
  Result<std::unique_ptr<Backend>> r = cuda_backend_create(0);
  if (gpu_required()) {
    ASSERT_TRUE(r.ok()) << "HEADROOM_REQUIRE_GPU is set: " << r.status().str();
  }
  if (!cuda_backend_built()) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::UNSUPPORTED);
    return;
  }
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), ErrorCode::NOT_FOUND) << r.status().str();
    EXPECT_NE(r.status().message().find("no CUDA device"), std::string::npos) << r.status().str();
    return;
  }
  Result<std::unique_ptr<Backend>> bad = cuda_backend_create(1 << 20);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::NOT_FOUND);
}

TEST(CudaBackend, AllocatorBudgetAndDeviceRefusal) {
  REQUIRE_CUDA();
  constexpr size_t kMiB = size_t(1) << 20;
  Allocator alloc(gpu, 64 * kMiB);
  Result<DeviceBuffer> a = alloc.allocate(40 * kMiB, Pool::ACTIVATIONS, "arena");
  ASSERT_TRUE(a.ok()) << a.status().str();
  Result<DeviceBuffer> b = alloc.allocate(40 * kMiB, Pool::WEIGHTS, "weights");
  ASSERT_FALSE(b.ok()) << "a budget of 64 MiB let 80 MiB through";
  EXPECT_EQ(b.status().code(), ErrorCode::OUT_OF_MEMORY);
  ASSERT_TRUE(b.status().segments().has_value());
  EXPECT_EQ(b.status().segments()->activations, 40 * kMiB);
  EXPECT_EQ(alloc.stats(Pool::ACTIVATIONS).current, 40 * kMiB);
  a->reset();
  EXPECT_EQ(alloc.total().current, 0u);

  // The device itself refuses an impossible request; the error is not sticky.
  alloc.set_budget(Allocator::kUnlimited);
  Result<DeviceBuffer> huge = alloc.allocate(size_t(1) << 50, Pool::OTHER, "a petabyte");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::OUT_OF_MEMORY) << huge.status().str();
  Result<DeviceBuffer> after = alloc.allocate(kMiB, Pool::OTHER, "after the refusal");
  ASSERT_TRUE(after.ok()) << after.status().str();
  EXPECT_TRUE(gpu.memset_zero(after->data(), kMiB, nullptr).ok());
  EXPECT_TRUE(gpu.stream_sync(nullptr).ok());
}

// h2d on one stream, d2d on a second that waits on an event, d2h into pinned memory.
TEST(CudaBackend, StreamsEventsAndAsyncCopies) {
  REQUIRE_CUDA();
  constexpr size_t kN = 1 << 22;  // 4 MiB
  Result<void*> src = gpu.host_alloc_pinned(kN);
  Result<void*> dst = gpu.host_alloc_pinned(kN);
  ASSERT_TRUE(src.ok() && dst.ok());
  uint8_t* hs = static_cast<uint8_t*>(*src);
  uint8_t* hd = static_cast<uint8_t*>(*dst);
  for (size_t i = 0; i < kN; ++i) hs[i] = uint8_t(i * 131 + 7);
  std::memset(hd, 0, kN);

  Allocator alloc(gpu);
  Result<DeviceBuffer> d1 = alloc.allocate(kN, Pool::STAGING, "copy test 1");
  Result<DeviceBuffer> d2 = alloc.allocate(kN, Pool::STAGING, "copy test 2");
  ASSERT_TRUE(d1.ok() && d2.ok());
  Result<std::unique_ptr<Stream>> copy = gpu.stream_create();
  Result<std::unique_ptr<Stream>> compute = gpu.stream_create();
  Result<std::unique_ptr<Event>> ev = gpu.event_create();
  ASSERT_TRUE(copy.ok() && compute.ok() && ev.ok());

  ASSERT_TRUE(gpu.copy_h2d(d1->data(), hs, kN, copy->get()).ok());
  ASSERT_TRUE(gpu.event_record(ev->get(), copy->get()).ok());
  ASSERT_TRUE(gpu.stream_wait_event(compute->get(), ev->get()).ok());
  ASSERT_TRUE(gpu.memset_zero(d2->data(), kN, compute->get()).ok());
  ASSERT_TRUE(gpu.copy_d2d(d2->data(), d1->data(), kN / 2, compute->get()).ok());
  ASSERT_TRUE(gpu.copy_d2h(hd, d2->data(), kN, compute->get()).ok());
  ASSERT_TRUE(gpu.stream_sync(compute->get()).ok());
  ASSERT_TRUE(gpu.event_sync(ev->get()).ok());
  EXPECT_EQ(std::memcmp(hs, hd, kN / 2), 0);
  for (size_t i = kN / 2; i < kN; ++i)
    if (hd[i] != 0) {
      ADD_FAILURE() << "byte " << i << " not zeroed";
      break;
    }
  gpu.host_free_pinned(hs);
  gpu.host_free_pinned(hd);
}

TEST(CudaBackend, EmbeddingIdOutOfRangeIsAnError) {
  REQUIRE_CUDA();
  for (DType id_type : {DType::I32, DType::I64})
    for (double bad : {10.0, -1.0}) {
      RefTensor ids{TensorDesc{id_type, Shape{3}}, {0.0, bad, 2.0}};
      RefTensor table{TensorDesc{DType::F32, Shape{10, 4}}, std::vector<double>(40, 0.5)};
      std::vector<RefTensor> in{ids, table};
      Result<RefTensor> r = op_execute(gpu, OpKind::EMBEDDING, OpParams{}, in);
      EXPECT_FALSE(r.ok()) << dtype_name(id_type) << " id " << bad << " was accepted";
      // Reported once: the next op is clean.
      RefTensor good{TensorDesc{id_type, Shape{2}}, {1.0, 9.0}};
      std::vector<RefTensor> in2{good, table};
      EXPECT_TRUE(op_execute(gpu, OpKind::EMBEDDING, OpParams{}, in2).ok());
    }
}

#ifdef HEADROOM_WITH_CUDA
// Channels-last group norm through cuda::group_norm_nhwc_kernels on raw device buffers: x [n, s, c]
// off-centre, gamma near 1, beta small (16-bit types as their bits); returns y's bytes.
struct GnNhwcRun {
  DType t;
  int64_t n, s, c;
  bool silu;
  std::vector<uint8_t> x, gamma, beta;

  GnNhwcRun(DType t_, int64_t n_, int64_t s_, int64_t c_, bool silu_, uint32_t seed)
      : t(t_), n(n_), s(s_), c(c_), silu(silu_) {
    std::mt19937 rng(seed);
    x = draw(size_t(n * s * c), -1.0f, 3.0f, rng);
    gamma = draw(size_t(c), 0.5f, 1.5f, rng);
    beta = draw(size_t(c), -0.5f, 0.5f, rng);
  }
  std::vector<uint8_t> draw(size_t count, float lo, float hi, std::mt19937& rng) const {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> f(count);
    for (float& v : f) v = u(rng);
    std::vector<uint8_t> out(count * dtype_size(t));
    dtype_convert(f.data(), DType::F32, out.data(), t, count);
    return out;
  }
  std::vector<uint8_t> run(cuda::GroupNormNhwcKernels k) const {
    const size_t ws_bytes = cuda::group_norm_nhwc_plan(n, s, c, 32).workspace();
    void *dx = nullptr, *dg = nullptr, *db = nullptr, *dy = nullptr, *dws = nullptr;
    EXPECT_EQ(cudaMalloc(&dx, x.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dg, gamma.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&db, beta.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dy, x.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dws, ws_bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dg, gamma.data(), gamma.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(db, beta.data(), beta.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(dy, 0xFF, x.size()), cudaSuccess);
    EXPECT_EQ(cuda::group_norm_nhwc_kernels(k, t, dx, dg, db, dy, n, s, c, 32, 1e-5f, silu, dws,
                                            nullptr),
              cudaSuccess);
    std::vector<uint8_t> y(x.size());
    EXPECT_EQ(cudaMemcpy(y.data(), dy, y.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (void* p : {dx, dg, db, dy, dws}) cudaFree(p);
    return y;
  }
  std::vector<float> as_f32(const std::vector<uint8_t>& y) const {
    std::vector<float> f(y.size() / dtype_size(t));
    dtype_convert(y.data(), t, f.data(), DType::F32, f.size());
    return f;
  }
};
#endif

// Note [single-pass group norm]: the op's result is bitwise the same run to run (CUDA-graph
// replays are compared bitwise with uncaptured runs), on both the single-pass and the
// three-kernel path.
TEST(CudaBackend, GroupNormNhwcIsBitwiseReproducible) {
  REQUIRE_CUDA();
  ASSERT_EQ(gpu.info().kind, "cuda");  // the kernels run on the current device
#ifdef HEADROOM_WITH_CUDA
  for (auto k : {cuda::GroupNormNhwcKernels::AUTO, cuda::GroupNormNhwcKernels::THREE_PASS})
    for (const GnNhwcRun& r : {GnNhwcRun(DType::F16, 2, 4096, 640, true, 1),
                               GnNhwcRun(DType::BF16, 2, 1024, 1280, false, 2),
                               GnNhwcRun(DType::F16, 2, 999, 1920, true, 3)}) {
      const std::vector<uint8_t> a = r.run(k), b = r.run(k);
      EXPECT_TRUE(a == b) << dtype_name(r.t) << " [" << r.n << "," << r.s << "," << r.c
                          << "] kernels " << int(k) << " differ between two runs";
    }
#endif
}

// The single-pass kernel against the three kernels at SD shapes: both are two-pass f32 statistics
// rounded once, so they differ by at most about one unit in the last place of the dtype.
TEST(CudaBackend, GroupNormNhwcSinglePassMatchesThreePass) {
  REQUIRE_CUDA();
  ASSERT_EQ(gpu.info().kind, "cuda");
#ifdef HEADROOM_WITH_CUDA
  struct Shape3 {
    int64_t n, s, c;
    bool silu;
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (Shape3 sh : {Shape3{2, 4096, 640, true}, Shape3{2, 1024, 1280, false},
                      Shape3{2, 1024, 2560, true}}) {
      const std::string config =
          cuda::group_norm_nhwc_single_pass_config(t, sh.n, sh.s, sh.c, 32, sh.silu);
      const std::string what = fmt::format("{} [{},{},{}]{} ({})", dtype_name(t), sh.n, sh.s,
                                           sh.c, sh.silu ? " silu" : "", config);
      if (config.empty()) {
        // Every one of these shapes fits in one wave of an H100/H200-class GPU (132 SMs).
        int dev = 0, major = 0, sms = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        EXPECT_FALSE(major >= 9 && sms >= 132)
            << what << ": no single-pass configuration on an sm_" << major << "x GPU with "
            << sms << " SMs";
        std::cout << "  " << what << ": no single-pass configuration on this GPU\n";
        continue;
      }
      const GnNhwcRun r(t, sh.n, sh.s, sh.c, sh.silu, 7);
      const std::vector<float> one = r.as_f32(r.run(cuda::GroupNormNhwcKernels::SINGLE_PASS));
      const std::vector<float> three = r.as_f32(r.run(cuda::GroupNormNhwcKernels::THREE_PASS));
      // One ulp at |y| <= 8 (f16 2^-8, bf16 2^-5), a few f32 roundings for f32.
      const double tol = t == DType::F16 ? 4e-3 : t == DType::BF16 ? 3.2e-2 : 2e-5;
      double worst = 0.0;
      size_t at = 0;
      for (size_t i = 0; i < one.size(); ++i) {
        const double d = std::abs(double(one[i]) - double(three[i]));
        if (!(d <= worst)) {
          worst = d;
          at = i;
        }
      }
      std::cout << "  " << what << ": max |single - three| " << worst << "\n";
      EXPECT_LE(worst, tol) << what << " at flat " << at << ": " << one[at] << " vs " << three[at];
    }
#endif
}

}  // namespace
}  // namespace hr::test
