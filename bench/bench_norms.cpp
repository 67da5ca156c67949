// Benchmark of the CUDA normalisation kernels at SD1.5 / SDXL / VAE shapes (f16 and bf16): layer
// norm and channels-last group norm (with and without SiLU), the first layer norm kernels
// (layer_norm_v1) against the current ones (Note [vectorised norms] in cuda_norm.cu) in the
// same run, and for group norm the three kernels against the single-pass cluster
// kernel (Note [single-pass group norm]; "-" where the shape takes the three kernels), with
// effective GB/s (x read once and y written once, whatever the kernels read) and the largest
// difference between the outputs (group norm: single-pass against three-pass). Launches run back to
// back on the same buffers, so inputs that fit the L2 cache (50 MiB on an H200) stay there and
// their GB/s can exceed HBM's; in a UNet step the producer usually leaves x in L2 as well.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#ifdef HEADROOM_WITH_CUDA
#include "backend/cuda/cuda_norm.h"
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

// us for three-pass, single-pass (0: none), GB/s of what the op runs, speed-up single- over
// three-pass, max |single - three|, and the single-pass configuration. (The first group norm
// kernels are timed against these by bench/dev/bench_group_norm_v1.)
void print_gn_row(const char* name, double ms_3, double ms_1, double bytes, double diff,
                  const std::string& config) {
  if (ms_1 <= 0.0) {
    std::printf("%-32s %8.2f %8s %8.0f %7s  %-9s %s\n", name, ms_3 * 1e3, "-",
                bytes / (ms_3 * 1e6), "-", "-", "three kernels");
    return;
  }
  std::printf("%-32s %8.2f %8.2f %8.0f %6.2fx  %.2e %s\n", name, ms_3 * 1e3, ms_1 * 1e3,
              bytes / (ms_1 * 1e6), ms_3 / ms_1, diff, config.c_str());
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
  // Channels-last group norm [N, S, C], 32 groups, batch 2: ResBlock norms (SiLU) and
  // transformer norms (no SiLU) of SDXL at 1024^2 (S 128^2 / 64^2 / 32^2) and SD1.5 at 512^2
  // (64^2 / 32^2 / 16^2 / 8^2) at their widths, and the VAE decoder's norms.
  const std::vector<GnShape> gn_shapes = {
      {"gn silu [2,128^2,320]", 2, 128 * 128, 320, true},
      {"gn [2,128^2,320]", 2, 128 * 128, 320, false},
      {"gn silu [2,128^2,640]", 2, 128 * 128, 640, true},
      {"gn silu [2,128^2,960]", 2, 128 * 128, 960, true},
      {"gn silu [2,64^2,320]", 2, 64 * 64, 320, true},
      {"gn silu [2,64^2,640]", 2, 64 * 64, 640, true},
      {"gn [2,64^2,640]", 2, 64 * 64, 640, false},
      {"gn silu [2,64^2,960]", 2, 64 * 64, 960, true},
      {"gn silu [2,64^2,1280]", 2, 64 * 64, 1280, true},
      {"gn silu [2,64^2,1920]", 2, 64 * 64, 1920, true},
      {"gn silu [2,32^2,640]", 2, 32 * 32, 640, true},
      {"gn silu [2,32^2,1280]", 2, 32 * 32, 1280, true},
      {"gn [2,32^2,1280]", 2, 32 * 32, 1280, false},
      {"gn silu [2,32^2,1920]", 2, 32 * 32, 1920, true},
      {"gn silu [2,32^2,2560]", 2, 32 * 32, 2560, true},
      {"gn silu [2,16^2,1280]", 2, 16 * 16, 1280, true},
      {"gn silu [2,16^2,2560]", 2, 16 * 16, 2560, true},
      {"gn silu [2,8^2,1280]", 2, 8 * 8, 1280, true},
      {"gn silu [2,8^2,2560]", 2, 8 * 8, 2560, true},
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
    std::printf("%-32s %8s %8s %8s %8s  %-9s %s\n", "group norm", "us 3-pass", "us 1-pass", "GB/s",
                "1p/3p", "maxdiff", "single-pass configuration");
    double gn_3 = 0.0, gn_best = 0.0;
    for (const GnShape& sh : gn_shapes) {
      const size_t n = size_t(sh.n * sh.s * sh.c);
      const int groups = 32;
      void* x = random_device(n, -1.0f, 3.0f, t, rng);
      void* g = random_device(size_t(sh.c), 0.5f, 1.5f, t, rng);
      void* b = random_device(size_t(sh.c), -0.5f, 0.5f, t, rng);
      void *y_3, *y_1, *ws;
      CHECK_CUDA(cudaMalloc(&y_3, n * 2));
      CHECK_CUDA(cudaMalloc(&y_1, n * 2));
      CHECK_CUDA(
          cudaMalloc(&ws, hr::cuda::group_norm_nhwc_plan(sh.n, sh.s, sh.c, groups).workspace()));
      auto run = [&](hr::cuda::GroupNormNhwcKernels k, void* y) {
        return hr::cuda::group_norm_nhwc_kernels(k, t, x, g, b, y, sh.n, sh.s, sh.c, groups, 1e-5f,
                                                 sh.silu, ws, nullptr);
      };
      const double ms_3 =
          time_ms([&] { CHECK_CUDA(run(hr::cuda::GroupNormNhwcKernels::THREE_PASS, y_3)); });
      const std::string config =
          hr::cuda::group_norm_nhwc_single_pass_config(t, sh.n, sh.s, sh.c, groups, sh.silu);
      double ms_1 = 0.0, diff = 0.0;
      if (!config.empty()) {
        ms_1 = time_ms([&] { CHECK_CUDA(run(hr::cuda::GroupNormNhwcKernels::SINGLE_PASS, y_1)); });
        diff = max_diff(y_3, y_1, n, t);
      }
      print_gn_row(sh.name, ms_3, ms_1, 2.0 * 2.0 * double(n), diff, config);
      gn_3 += ms_3;
      gn_best += ms_1 > 0.0 ? ms_1 : ms_3;
      for (void* p : {x, g, b, y_3, y_1, ws}) cudaFree(p);
    }
    std::printf(
        "sum over the shapes above: layer norm %.1f -> %.1f us (%.2fx), group norm three-pass "
        "%.1f, single-pass where it fits (the op's choice) %.1f us (%.2fx)\n",
        ln_old * 1e3, ln_new * 1e3, ln_old / ln_new, gn_3 * 1e3, gn_best * 1e3, gn_3 / gn_best);
  }
  return 0;
}

#else
int main() {
  std::printf("bench_norms: built without CUDA\n");
  return 0;
}
#endif
