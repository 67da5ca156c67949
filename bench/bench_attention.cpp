// Benchmark of the tensor-core attention kernels at SD1.5 / SDXL shapes (f16, batch 2): the
// first kernel (V1, cuda_attention_tc.cu), each block shape of the FlashAttention-2-style
// kernel (cuda_attention_fa2.cu), the per-shape choice among them (AUTO), and
// cuDNN's fused attention (Note [cuDNN attention], cuda_attention_dnn.cpp), all in the same run,
// with TFLOP/s against an f16 cuBLAS GEMM (8192^3, f32 accumulation) measured in that run too.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#ifdef HEADROOM_WITH_CUDA
#include <cublas_v2.h>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_ops.h"
#include "bench_cuda.h"

namespace {

using hr::cuda::AttentionArgs;
using hr::cuda::AttentionTc;

using hr::bench::time_ms;

// f16 GEMM ceiling: C[n, n] = A B, f16 in and out, f32 accumulation.
double gemm_tflops() {
  constexpr int n = 8192;
  void *a, *b, *c;
  CHECK_CUDA(cudaMalloc(&a, size_t(n) * n * 2));
  CHECK_CUDA(cudaMalloc(&b, size_t(n) * n * 2));
  CHECK_CUDA(cudaMalloc(&c, size_t(n) * n * 2));
  CHECK_CUDA(cudaMemset(a, 0, size_t(n) * n * 2));
  CHECK_CUDA(cudaMemset(b, 0, size_t(n) * n * 2));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0.0;
  const float one = 1.0f, zero = 0.0f;
  const double ms = time_ms([&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b, CUDA_R_16F, n,
                 &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * double(n) / (ms * 1e9);
}

struct Shape {
  const char* name;
  int nq, nk, heads, d;
  int per_step;  // layers of this shape in one UNet step (SD1.5 or SDXL)
  bool sdxl;
};

// Random f16/bf16 of unit range: bits from floats on the host.
std::vector<uint16_t> random_bits(size_t n, hr::DType t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = hr::bench::half_bits(u(rng), t);
  return out;
}

using hr::bench::half_value;

const char* kernel_name(AttentionTc k) {
  switch (k) {
    case AttentionTc::AUTO: return "auto";
    case AttentionTc::V1: return "v1";
    case AttentionTc::Q64_K64: return "q64k64";
    case AttentionTc::Q64_K80: return "q64k80";
    case AttentionTc::Q128_K64: return "q128k64";
    case AttentionTc::Q128_K80: return "q128k80";
  }
  return "?";
}

}  // namespace

int main() {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_attention: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double ceiling = gemm_tflops();
  std::printf("%s, %d SMs; f16 cuBLAS GEMM 8192^3: %.0f TFLOP/s (the ceiling below)\n",
              prop.name, prop.multiProcessorCount, ceiling);

  const int b = 2;
  const std::vector<Shape> shapes = {
      {"sd15 self 4096 d40 h8", 4096, 4096, 8, 40, 5, false},
      {"sd15 cross 4096x77 d40", 4096, 77, 8, 40, 5, false},
      {"sd15 self 1024 d80 h8", 1024, 1024, 8, 80, 5, false},
      {"sd15 cross 1024x77 d80", 1024, 77, 8, 80, 5, false},
      {"sd15 self 256 d160 h8", 256, 256, 8, 160, 5, false},
      {"sd15 cross 256x77 d160", 256, 77, 8, 160, 5, false},
      {"sd15 mid self 64 d160", 64, 64, 8, 160, 1, false},
      {"sd15 mid cross 64x77 d160", 64, 77, 8, 160, 1, false},
      {"sdxl self 4096 d64 h10", 4096, 4096, 10, 64, 10, true},
      {"sdxl cross 4096x77 d64", 4096, 77, 10, 64, 10, true},
      {"sdxl self 1024 d64 h20", 1024, 1024, 20, 64, 60, true},
      {"sdxl cross 1024x77 d64", 1024, 77, 20, 64, 60, true},
  };
  // The short-key kernel that left the product is timed by bench/dev/bench_attention_short.
  const AttentionTc variants[] = {AttentionTc::V1,       AttentionTc::Q64_K64,
                                  AttentionTc::Q128_K64, AttentionTc::Q64_K80,
                                  AttentionTc::Q128_K80, AttentionTc::AUTO};

  hr::cuda::CudaContext ctx;
  if (cudnnCreate(&ctx.dnn) != CUDNN_STATUS_SUCCESS) {
    std::printf("bench_attention: cudnnCreate failed\n");
    return 1;
  }
  std::mt19937 rng(1234);
  double step_old[2] = {0, 0}, step_new[2] = {0, 0}, step_dnn[2] = {0, 0};
  std::vector<std::string> refusals;
  for (hr::DType t : {hr::DType::F16, hr::DType::BF16}) {
    std::printf("\n%s | %s\n", t == hr::DType::F16 ? "f16" : "bf16",
                "ms and TFLOP/s per kernel; auto/v1 = speed-up; %ceil = auto vs GEMM; maxdiff = "
                "max |auto - v1|");
    std::printf("%-26s", "shape");
    for (AttentionTc k : variants) std::printf(" %17s", kernel_name(k));
    std::printf(" %17s  auto/v1  %%ceil  maxdiff  cudnn/auto  cudnn maxdiff\n", "cudnn");
    for (const Shape& sh : shapes) {
      if (t == hr::DType::BF16 && sh.per_step < 10 && sh.nk != 4096) continue;  // f16 covers it
      const size_t n_q = size_t(b) * sh.nq * sh.heads * sh.d;
      const size_t n_k = size_t(b) * sh.nk * sh.heads * sh.d;
      void *q, *k, *v, *o_old, *o_new;
      CHECK_CUDA(cudaMalloc(&q, n_q * 2));
      CHECK_CUDA(cudaMalloc(&k, n_k * 2));
      CHECK_CUDA(cudaMalloc(&v, n_k * 2));
      CHECK_CUDA(cudaMalloc(&o_old, n_q * 2));
      CHECK_CUDA(cudaMalloc(&o_new, n_q * 2));
      for (auto [p, n] : {std::pair{q, n_q}, std::pair{k, n_k}, std::pair{v, n_k}}) {
        std::vector<uint16_t> h = random_bits(n, t, rng);
        CHECK_CUDA(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
      }
      AttentionArgs a;
      a.dtype = t;
      a.q = q;
      a.k = k;
      a.v = v;
      a.b = b;
      a.nq = sh.nq;
      a.nk = sh.nk;
      a.heads = sh.heads;
      a.d = a.dv = sh.d;
      a.scale = 1.0f / std::sqrt(float(sh.d));
      const double flop = 4.0 * b * sh.heads * double(sh.nq) * sh.nk * sh.d;
      std::printf("%-26s", sh.name);
      double ms_v1 = 0, ms_auto = 0;
      for (AttentionTc kern : variants) {
        a.o = kern == AttentionTc::V1 ? o_old : o_new;
        const double ms = time_ms([&] { CHECK_CUDA(hr::cuda::attention_tc(a, nullptr, kern)); });
        if (kern == AttentionTc::V1) ms_v1 = ms;
        if (kern == AttentionTc::AUTO) ms_auto = ms;
        std::printf(" %7.4f %4.0fTF/s", ms, flop / (ms * 1e9));
      }
      // AUTO ran last: o_new holds its output.
      std::vector<uint16_t> ho(n_q), hn(n_q);
      CHECK_CUDA(cudaMemcpy(ho.data(), o_old, n_q * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(hn.data(), o_new, n_q * 2, cudaMemcpyDeviceToHost));
      double maxdiff = 0;
      for (size_t i = 0; i < n_q; ++i)
        maxdiff = std::max(maxdiff, double(std::fabs(half_value(ho[i], t) - half_value(hn[i], t))));
      // cuDNN into o_old, compared with AUTO's output.
      const hr::cuda::DnnAttentionPlan& plan = hr::cuda::attention_dnn_plan(
          ctx, hr::cuda::attention_dnn_key(t, b, sh.nq, sh.nk, sh.heads, sh.d, sh.d));
      double ms_dnn = 0, dnn_diff = 0;
      if (plan.ok()) {
        const hr::TensorDesc dq{t, hr::Shape{b, sh.nq, int64_t(sh.heads) * sh.d}};
        const hr::TensorDesc dk{t, hr::Shape{b, sh.nk, int64_t(sh.heads) * sh.d}};
        const hr::TensorRef in[3] = {{dq, q}, {dk, k}, {dk, v}};
        void* ws = nullptr;
        if (plan.workspace) CHECK_CUDA(cudaMalloc(&ws, plan.workspace));
        hr::OpCall c;
        c.kind = hr::OpKind::ATTENTION;
        c.inputs = in;
        c.output = hr::TensorRef{dq, o_old};
        c.workspace = ws;
        c.workspace_bytes = plan.workspace;
        ms_dnn = time_ms([&] {
          hr::Status st = hr::cuda::attention_dnn(ctx, plan, c, a.scale, nullptr);
          if (!st.ok()) std::printf("\ncudnn: %s\n", st.str().c_str());
        });
        CHECK_CUDA(cudaMemcpy(ho.data(), o_old, n_q * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n_q; ++i)
          dnn_diff = std::max(dnn_diff, double(std::fabs(half_value(ho[i], t) - half_value(hn[i], t))));
        if (ws) cudaFree(ws);
        std::printf(" %7.4f %4.0fTF/s", ms_dnn, flop / (ms_dnn * 1e9));
      } else {
        std::printf(" %17s", "refused");
        refusals.push_back(std::string(sh.name) + ": " + plan.refused);
      }
      const double best = ms_dnn > 0 ? std::min(ms_auto, ms_dnn) : ms_auto;
      std::printf("  %6.2fx  %4.1f%%  %.2e  %9.2fx  %.2e\n", ms_v1 / ms_auto,
                  100.0 * flop / (best * 1e9) / ceiling, maxdiff,
                  ms_dnn > 0 ? ms_auto / ms_dnn : 0.0, dnn_diff);
      if (t == hr::DType::F16) {
        step_old[sh.sdxl] += sh.per_step * ms_v1;
        step_new[sh.sdxl] += sh.per_step * ms_auto;
        step_dnn[sh.sdxl] += sh.per_step * best;
      }
      for (void* p : {q, k, v, o_old, o_new}) cudaFree(p);
    }
  }
  std::printf("\nattention per UNet step (f16, layers x shape time, v1 -> auto -> the faster of "
              "auto and cuDNN): SD1.5 %.3f -> %.3f -> %.3f ms, SDXL %.3f -> %.3f -> %.3f ms\n",
              step_old[0], step_new[0], step_dnn[0], step_old[1], step_new[1], step_dnn[1]);
  for (const std::string& r : refusals) std::printf("cuDNN refused %s\n", r.c_str());
  cudnnDestroy(ctx.dnn);
  return 0;
}

#else
int main() {
  std::printf("bench_attention: built without CUDA\n");
  return 0;
}
#endif
