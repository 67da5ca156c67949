// Benchmark of the CUDA normalisation kernels at SD1.5 / SDXL / VAE shapes (f16 and bf16): layer
// norm and channels-last group norm (with and without SiLU), the first kernels (layer_norm_v1,
// group_norm_nhwc_v1) against the current ones (Note [vectorised norms] in cuda_norm.cu) in the
// same run, with effective GB/s (layer norm: x read once and y written; group norm: x read
// twice and y written) and the largest difference between the two outputs. Launches run back to
// back on the same buffers, so inputs that fit the L2 cache (50 MiB on an H200) stay there and
// their GB/s can exceed HBM's; in a UNet step the producer usually leaves x in L2 as well.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#ifdef HEADROOM_WITH_CUDA
#include "backend/cuda/cuda_common.h"
#include "bench_cuda.h"

namespace {

// Up to 5000 launches: the smallest norms take ~4 us.
template <typename Fn>
double time_ms(Fn&& fn) {
  return hr::bench::time_ms(std::forward<Fn>(fn), 5000);
}

using hr::bench::half_bits;
using hr::bench::half_value;

// n values uniform in [lo, hi), as f16 or bf16 bits, on the device.
void* random_device(size_t n, float lo, float hi, hr::DType t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<uint16_t> h(n);
  for (auto& x : h) x = half_bits(u(rng), t);
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  CHECK_CUDA(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
  return p;
}

// Largest |a - b| over two device buffers of n 16-bit values.
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

struct LnShape {
  const char* name;
  int64_t rows, c;
};

struct GnShape {
  const char* name;
  int64_t n, s, c;
  bool silu;
};

void print_row(const char* name, double ms_old, double ms_new, double bytes, double diff) {
  std::printf("%-30s %9.2f %9.2f %8.0f %8.0f %7.2fx  %.2e\n", name, ms_old * 1e3, ms_new * 1e3,
              bytes / (ms_old * 1e6), bytes / (ms_new * 1e6), ms_old / ms_new, diff);
}

}  // namespace

int main() {
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("bench_norms: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // Layer norm rows: SDXL at 1024^2 (batch 2) has widths 640 (8192 rows) and 1280 (2048 rows);
  // SD1.5 at 512^2 320 / 640 / 1280 over 8192 / 2048 / 512 rows; CLIP-L's text encoder 768.
  const std::vector<LnShape> ln_shapes = {
      {"ln sdxl 8192x640", 8192, 640}, {"ln sdxl 2048x1280", 2048, 1280},
      {"ln sd15 8192x320", 8192, 320}, {"ln sd15 2048x640", 2048, 640},
      {"ln sd15 512x1280", 512, 1280}, {"ln clip 154x768", 154, 768},
  };
  // Channels-last group norm [N, S, C], 32 groups: ResBlock norms (SiLU), transformer norms (no
  // SiLU) of SD1.5 at 512^2 / SDXL at 1024^2, batch 2, and the VAE decoder's norms.
  const std::vector<GnShape> gn_shapes = {
      {"gn silu [2,128^2,320]", 2, 128 * 128, 320, true},
      {"gn [2,128^2,320]", 2, 128 * 128, 320, false},
      {"gn silu [2,64^2,640]", 2, 64 * 64, 640, true},
      {"gn [2,64^2,640]", 2, 64 * 64, 640, false},
      {"gn silu [2,32^2,1280]", 2, 32 * 32, 1280, true},
      {"gn [2,32^2,1280]", 2, 32 * 32, 1280, false},
      {"gn silu [2,64^2,320]", 2, 64 * 64, 320, true},
      {"gn silu [2,16^2,1280]", 2, 16 * 16, 1280, true},
      {"gn silu vae [1,128^2,512]", 1, 128 * 128, 512, true},
      {"gn silu vae [1,256^2,512]", 1, 256 * 256, 512, true},
      {"gn silu vae [1,512^2,256]", 1, 512 * 512, 256, true},
      {"gn silu vae [1,512^2,128]", 1, 512 * 512, 128, true},
      {"gn silu vae [1,1024^2,128]", 1, 1024 * 1024, 128, true},
  };

  std::mt19937 rng(1234);
  for (hr::DType t : {hr::DType::F16, hr::DType::BF16}) {
    std::printf("\n%s | us and GB/s per kernel; new/old speed-up; maxdiff = max |new - old|\n",
                t == hr::DType::F16 ? "f16" : "bf16");
    std::printf("%-30s %9s %9s %8s %8s %8s  %s\n", "shape", "us old", "us new", "GB/s old",
                "GB/s new", "speed", "maxdiff");
    double ln_old = 0.0, ln_new = 0.0;
    for (const LnShape& sh : ln_shapes) {
      const size_t n = size_t(sh.rows * sh.c);
      void* x = random_device(n, -1.0f, 3.0f, t, rng);
      void* g = random_device(size_t(sh.c), 0.5f, 1.5f, t, rng);
      void* b = random_device(size_t(sh.c), -0.5f, 0.5f, t, rng);
      void *y_old, *y_new;
      CHECK_CUDA(cudaMalloc(&y_old, n * 2));
      CHECK_CUDA(cudaMalloc(&y_new, n * 2));
      const double ms_old = time_ms([&] {
        CHECK_CUDA(hr::cuda::layer_norm_v1(t, x, g, b, y_old, sh.rows, sh.c, 1e-5f, nullptr));
      });
      const double ms_new = time_ms([&] {
        CHECK_CUDA(hr::cuda::layer_norm(t, x, g, b, y_new, sh.rows, sh.c, 1e-5f, nullptr));
      });
      print_row(sh.name, ms_old, ms_new, 2.0 * 2.0 * double(n), max_diff(y_old, y_new, n, t));
      ln_old += ms_old;
      ln_new += ms_new;
      for (void* p : {x, g, b, y_old, y_new}) cudaFree(p);
    }
    double gn_old = 0.0, gn_new = 0.0;
    for (const GnShape& sh : gn_shapes) {
      const size_t n = size_t(sh.n * sh.s * sh.c);
      const int groups = 32;
      void* x = random_device(n, -1.0f, 3.0f, t, rng);
      void* g = random_device(size_t(sh.c), 0.5f, 1.5f, t, rng);
      void* b = random_device(size_t(sh.c), -0.5f, 0.5f, t, rng);
      void *y_old, *y_new, *ws_old, *ws_new;
      CHECK_CUDA(cudaMalloc(&y_old, n * 2));
      CHECK_CUDA(cudaMalloc(&y_new, n * 2));
      CHECK_CUDA(cudaMalloc(
          &ws_old, hr::cuda::group_norm_nhwc_plan_v1(sh.n, sh.s, sh.c, groups).workspace()));
      CHECK_CUDA(cudaMalloc(&ws_new,
                            hr::cuda::group_norm_nhwc_plan(sh.n, sh.s, sh.c, groups).workspace()));
      const double ms_old = time_ms([&] {
        CHECK_CUDA(hr::cuda::group_norm_nhwc_v1(t, x, g, b, y_old, sh.n, sh.s, sh.c, groups, 1e-5f,
                                                sh.silu, ws_old, nullptr));
      });
      const double ms_new = time_ms([&] {
        CHECK_CUDA(hr::cuda::group_norm_nhwc(t, x, g, b, y_new, sh.n, sh.s, sh.c, groups, 1e-5f,
                                             sh.silu, ws_new, nullptr));
      });
      print_row(sh.name, ms_old, ms_new, 3.0 * 2.0 * double(n), max_diff(y_old, y_new, n, t));
      gn_old += ms_old;
      gn_new += ms_new;
      for (void* p : {x, g, b, y_old, y_new, ws_old, ws_new}) cudaFree(p);
    }
    std::printf(
        "sum over the shapes above: layer norm %.1f -> %.1f us (%.2fx), group norm %.1f -> "
        "%.1f us (%.2fx)\n",
        ln_old * 1e3, ln_new * 1e3, ln_old / ln_new, gn_old * 1e3, gn_new * 1e3, gn_old / gn_new);
  }
  return 0;
}

#else
int main() {
  std::printf("bench_norms: built without CUDA\n");
  return 0;
}
#endif
