// bench/dev: the short-key attention kernel (attention_short.cu, Note [short-key attention])
// against the production v2 kernels (cuda_attention_fa2.cu) in one run. First a check: both tile
// sizes against the v2 kernel with one 80-key tile (itself checked against the float64 reference
// by the op harness) at sizes where blocks walk several tiles and cross heads, partial last tiles,
// 1 to 80 keys, every head dim, both 16-bit dtypes, dense and strided rows (what
// CudaBackend.ShortKeyAttentionMatchesV2Kernel checked while the kernel was in the product); any
// mismatch makes the exit code 1. Then ms per call at SD1.5 / SDXL cross-attention shapes (batch
// 2), dense, and strided as in the UNet step (K and V windows of the stacked context projection).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "bench_cuda.h"
#include "dev/dev_kernels.h"

namespace {

using hr::DType;
using hr::cuda::AttentionArgs;
using hr::cuda::AttentionTc;

struct Case {
  const char* name;
  int b, nq, nk, heads, d;
  bool strided;
};

// Device buffers of one case: Q rows 64 elements wider than H D when strided, K at column 0 and
// V at column H D of [B, Nk, 2 H D] rows (V in its own buffer, offset the same way).
struct Buffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o_ref = nullptr, *o = nullptr;
  size_t no_el = 0;
  AttentionArgs a;
  Buffers(const Case& c, DType t, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
    const int64_t hd = int64_t(c.heads) * c.d;
    const int64_t ldq = c.strided ? hd + 64 : 0, ldkv = c.strided ? 2 * hd : 0;
    const size_t nq_el = size_t(c.b) * c.nq * (ldq ? ldq : hd);
    const size_t nk_el = size_t(c.b) * c.nk * (ldkv ? ldkv : hd);
    no_el = size_t(c.b) * c.nq * hd;
    for (auto [p, n] : {std::pair{&q, nq_el}, std::pair{&k, nk_el}, std::pair{&v, nk_el}}) {
      std::vector<uint16_t> h(n);
      for (uint16_t& x : h) x = hr::bench::half_bits(uni(rng), t);
      CHECK_CUDA(cudaMalloc(p, n * 2));
      CHECK_CUDA(cudaMemcpy(*p, h.data(), n * 2, cudaMemcpyHostToDevice));
    }
    CHECK_CUDA(cudaMalloc(&o_ref, no_el * 2));
    CHECK_CUDA(cudaMalloc(&o, no_el * 2));
    a.dtype = t;
    a.q = q;
    a.k = k;
    a.v = static_cast<char*>(v) + (c.strided ? size_t(hd) * 2 : 0);
    a.b = c.b;
    a.nq = c.nq;
    a.nk = c.nk;
    a.heads = c.heads;
    a.d = a.dv = c.d;
    a.ldq = ldq;
    a.ldk = a.ldv = ldkv;
    a.scale = 1.0f / std::sqrt(float(c.d));
  }
  ~Buffers() {
    for (void* p : {q, k, v, o_ref, o}) cudaFree(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// Largest |o - o_ref| (NaN where the kernel left a poisoned element).
double max_diff(const Buffers& bf, DType t) {
  std::vector<uint16_t> ref(bf.no_el), got(bf.no_el);
  CHECK_CUDA(cudaMemcpy(ref.data(), bf.o_ref, bf.no_el * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(got.data(), bf.o, bf.no_el * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < bf.no_el && !std::isnan(worst); ++i) {
    const double d = std::fabs(double(hr::bench::half_value(got[i], t)) -
                               double(hr::bench::half_value(ref[i], t)));
    if (!(d <= worst)) worst = d;  // the first NaN ends the search
  }
  return worst;
}

int check(std::mt19937_64& rng) {
  const Case cases[] = {{"b2 nq1000 nk77 h20 d64", 2, 1000, 77, 20, 64, false},
                        {"b2 nq1000 nk77 h20 d64 strided", 2, 1000, 77, 20, 64, true},
                        {"b1 nq1000 nk1 h8 d40", 1, 1000, 1, 8, 40, false},
                        {"b2 nq1000 nk80 h8 d80 strided", 2, 1000, 80, 8, 80, true},
                        {"b2 nq333 nk33 h8 d160", 2, 333, 33, 8, 160, false},
                        {"b2 nq4096 nk77 h10 d64 strided", 2, 4096, 77, 10, 64, true}};
  int failures = 0;
  for (DType t : {DType::F16, DType::BF16})
    for (const Case& c : cases) {
      Buffers bf(c, t, rng);
      if (!hr::dev::attention_short_supported(bf.a)) {
        std::printf("check %s %s: not supported\n", hr::dtype_name(t), c.name);
        ++failures;
        continue;
      }
      bf.a.o = bf.o_ref;
      CHECK_CUDA(hr::cuda::attention_tc(bf.a, nullptr, AttentionTc::Q64_K80));
      for (int warps : {2, 4}) {
        CHECK_CUDA(cudaMemset(bf.o, 0xFF, bf.no_el * 2));  // NaNs wherever nothing lands
        bf.a.o = bf.o;
        CHECK_CUDA(hr::dev::attention_short(bf.a, nullptr, warps));
        CHECK_CUDA(cudaDeviceSynchronize());
        // Both kernels round P to T the same way; what differs is the order of f32 sums.
        const double tol = t == DType::BF16 ? 1.6e-2 : 2e-3, d = max_diff(bf, t);
        const bool ok = d <= tol;
        failures += !ok;
        std::printf("check %-5s %-32s q%-3d max |diff| %.2e (tol %.0e) %s\n", hr::dtype_name(t),
                    c.name, warps * 16, d, tol, ok ? "ok" : "FAILED");
      }
    }
  return failures;
}

void timing(std::mt19937_64& rng) {
  const Case cases[] = {{"sd15 cross 4096x77 d40", 2, 4096, 77, 8, 40, false},
                        {"sd15 cross 1024x77 d80", 2, 1024, 77, 8, 80, false},
                        {"sd15 cross 256x77 d160", 2, 256, 77, 8, 160, false},
                        {"sdxl cross 4096x77 d64", 2, 4096, 77, 10, 64, false},
                        {"sdxl cross 1024x77 d64", 2, 1024, 77, 20, 64, false},
                        {"sdxl cross 4096x77 d64 strided", 2, 4096, 77, 10, 64, true},
                        {"sdxl cross 1024x77 d64 strided", 2, 1024, 77, 20, 64, true}};
  std::printf("\nf16, ms per call: production v2 kernels (auto = what the product runs) against "
              "the short-key kernel; short/auto < 1 is a gain\n");
  std::printf("%-32s %9s %9s %9s %9s %9s %10s\n", "shape", "q64k80", "q128k80", "auto",
              "short q32", "short q64", "short/auto");
  double step_auto = 0, step_short = 0;
  for (const Case& c : cases) {
    Buffers bf(c, DType::F16, rng);
    bf.a.o = bf.o;
    auto tc = [&](AttentionTc k) {
      return hr::bench::time_ms([&] { CHECK_CUDA(hr::cuda::attention_tc(bf.a, nullptr, k)); });
    };
    auto sh = [&](int w) {
      return hr::bench::time_ms([&] { CHECK_CUDA(hr::dev::attention_short(bf.a, nullptr, w)); });
    };
    const double q64 = tc(AttentionTc::Q64_K80), q128 = tc(AttentionTc::Q128_K80);
    const double au = tc(AttentionTc::AUTO), s32 = sh(2), s64 = sh(4);
    std::printf("%-32s %9.4f %9.4f %9.4f %9.4f %9.4f %9.2fx\n", c.name, q64, q128, au, s32, s64,
                s64 / au);
    if (c.strided) {  // SDXL's step: 10 layers at 4096x77 and 60 at 1024x77
      const int layers = c.nq == 4096 ? 10 : 60;
      step_auto += layers * au;
      step_short += layers * s64;
    }
  }
  std::printf("\nSDXL cross-attention per UNet step (strided, layers x shape time): auto %.3f ms, "
              "short q64 %.3f ms\n", step_auto, step_short);
}

}  // namespace

int main() {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_dev_attention_short: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::mt19937_64 rng(1234);
  const int failures = check(rng);
  timing(rng);
  if (failures) std::printf("\n%d check(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
