// bench/dev: the first channels-last group norm (group_norm_v1.cu) against the production op
// (group_norm_nhwc: the vectorised three kernels, or the single-pass cluster kernel where it fits;
// Note [single-pass group norm] in src/backend/cuda/cuda_norm.cu) in one run, f16 and bf16, at the
// UNet's and the VAE's shapes (32 groups), with the largest difference between the two outputs.
// Launches run back to back on the same buffers, as in bench_norms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "bench_cuda.h"
#include "dev/dev_kernels.h"

namespace {

using hr::bench::half_bits;
using hr::bench::half_value;

void* random_device(size_t n, float lo, float hi, hr::DType t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> h(n);
  for (auto& x : h) x = half_bits(u(rng), t);
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  CHECK_CUDA(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}

double max_diff(const void* a, const void* b, size_t n, hr::DType t) {
  std::vector<uint16_t> ha(n), hb(n);
  CHECK_CUDA(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(half_value(ha[i], t)) - double(half_value(hb[i], t)));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

struct GnShape {
  const char* name;
  int64_t n, s, c;
  bool silu;
};

}  // namespace

int main() {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_dev_group_norm_v1: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const std::vector<GnShape> shapes = {
      {"gn silu [2,128^2,320]", 2, 128 * 128, 320, true},
      {"gn silu [2,64^2,640]", 2, 64 * 64, 640, true},
      {"gn [2,64^2,640]", 2, 64 * 64, 640, false},
      {"gn silu [2,32^2,1280]", 2, 32 * 32, 1280, true},
      {"gn silu [2,8^2,1280]", 2, 8 * 8, 1280, true},
      {"gn silu vae [1,512^2,256]", 1, 512 * 512, 256, true},
      {"gn silu vae [1,1024^2,128]", 1, 1024 * 1024, 128, true},
  };
  std::mt19937 rng(1234);
  int failures = 0;
  for (hr::DType t : {hr::DType::F16, hr::DType::BF16}) {
    std::printf("\n%s | us per call: v1 (bench/dev) against the production op; maxdiff = max "
                "|op - v1|\n", hr::dtype_name(t));
    std::printf("%-30s %9s %9s %8s  %s\n", "shape", "us v1", "us op", "v1/op", "maxdiff");
    double sum_v1 = 0.0, sum_op = 0.0;
    for (const GnShape& sh : shapes) {
      const size_t n = size_t(sh.n * sh.s * sh.c);
      const int groups = 32;
      void* x = random_device(n, -1.0f, 3.0f, t, rng);
      void* g = random_device(size_t(sh.c), 0.5f, 1.5f, t, rng);
      void* b = random_device(size_t(sh.c), -0.5f, 0.5f, t, rng);
      void *y_v1, *y_op, *ws_v1, *ws;
      CHECK_CUDA(cudaMalloc(&y_v1, n * 2));
      CHECK_CUDA(cudaMalloc(&y_op, n * 2));
      CHECK_CUDA(cudaMalloc(
          &ws_v1, hr::dev::group_norm_nhwc_plan_v1(sh.n, sh.s, sh.c, groups).workspace()));
      CHECK_CUDA(
          cudaMalloc(&ws, hr::cuda::group_norm_nhwc_plan(sh.n, sh.s, sh.c, groups).workspace()));
      const double ms_v1 = hr::bench::time_ms([&] {
        CHECK_CUDA(hr::dev::group_norm_nhwc_v1(t, x, g, b, y_v1, sh.n, sh.s, sh.c, groups, 1e-5f,
                                               sh.silu, ws_v1, nullptr));
      }, 5000);
      const double ms_op = hr::bench::time_ms([&] {
        CHECK_CUDA(hr::cuda::group_norm_nhwc(t, x, g, b, y_op, sh.n, sh.s, sh.c, groups, 1e-5f,
                                             sh.silu, ws, nullptr));
      }, 5000);
      const double diff = max_diff(y_v1, y_op, n, t);
      // Both are two-pass f32 statistics; the outputs differ by the 16-bit rounding of y.
      const double tol = t == hr::DType::BF16 ? 6.25e-2 : 1e-2;
      failures += !(diff <= tol);
      std::printf("%-30s %9.2f %9.2f %7.2fx  %.2e%s\n", sh.name, ms_v1 * 1e3, ms_op * 1e3,
                  ms_v1 / ms_op, diff, diff <= tol ? "" : "  FAILED");
      sum_v1 += ms_v1;
      sum_op += ms_op;
      for (void* p : {x, g, b, y_v1, y_op, ws_v1, ws}) cudaFree(p);
    }
    std::printf("sum: v1 %.1f us, op %.1f us (%.2fx)\n", sum_v1 * 1e3, sum_op * 1e3,
                sum_v1 / sum_op);
  }
  if (failures) std::printf("\n%d shape(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
