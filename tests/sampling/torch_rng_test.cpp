// Torch-compatible noise against the golden noise streams (CPU mt19937, CUDA Philox,
// ancestral draws, prepare_noise).
#include "sampling/torch_rng.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "golden_sampling.h"

namespace hr {
namespace {

using test::float_diff;
using test::FloatDiff;

// "noise.cpu.seed42.1x4x8x8" -> seed 42, shape [1, 4, 8, 8].
bool parse_noise_name(const std::string& name, const std::string& prefix, uint64_t* seed,
                      Shape* shape) {
  if (name.rfind(prefix, 0) != 0) return false;
  std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string::npos) return false;
  *seed = std::stoull(rest.substr(0, dot));
  std::string dims = rest.substr(dot + 1);
  if (dims.find('.') != std::string::npos) return false;  // ancestral ".drawK"
  std::vector<int64_t> d;
  size_t pos = 0;
  while (pos <= dims.size()) {
    size_t x = dims.find('x', pos);
    if (x == std::string::npos) x = dims.size();
    d.push_back(std::stoll(dims.substr(pos, x - pos)));
    pos = x + 1;
  }
  *shape = Shape();
  shape->rank = int(d.size());
  for (size_t i = 0; i < d.size(); ++i) shape->dims[i] = d[i];
  return true;
}

void report(const std::string& name, const FloatDiff& d) {
  std::printf("  %-48s n=%-6lld exact=%.4f max_ulp=%lld max_abs=%.3g\n", name.c_str(),
              (long long)d.n, d.exact_fraction(), (long long)d.max_ulp, d.max_abs);
}

TEST(TorchRng, CpuNoiseMatchesGolden) {
  HR_GOLDEN_OR_FAIL(g);
  int checked = 0;
  int64_t total = 0, exact = 0;
  for (const auto& e : g->entries()) {
    uint64_t seed;
    Shape shape;
    if (!parse_noise_name(e.name, "noise.cpu.seed", &seed, &shape)) continue;
    auto ref = g->load(e.name, DType::F32);
    ASSERT_TRUE(ref.ok()) << ref.status().str();
    ASSERT_EQ(ref->shape(), shape) << e.name;
    HostTensor got = randn_cpu(seed, shape);
    FloatDiff d = float_diff(got.f32(), ref->f32(), got.numel());
    report(e.name, d);
    total += d.n;
    exact += d.exact;
    // PyTorch's vectorised log/sin/cos differ from libm by a few ulp (golden README); measured:
    // ~83% bit-exact, max 3 ulp.
    EXPECT_LE(d.max_ulp, 4) << e.name;
    EXPECT_LE(d.max_abs, 1e-6) << e.name;
    EXPECT_GE(d.exact_fraction(), 0.7) << e.name;
    if (shape.numel() < 16) {
      EXPECT_EQ(d.exact, d.n) << e.name << ": the double-precision path is exact";
    }
    ++checked;
  }
  std::printf("  cpu noise overall exact fraction %.4f over %lld values\n",
              double(exact) / double(total), (long long)total);
  EXPECT_GE(double(exact) / double(total), 0.8);
  EXPECT_GE(checked, 17);
}

TEST(TorchRng, CudaNoiseMatchesGolden) {
  HR_GOLDEN_OR_FAIL(g);
  int checked = 0;
  for (const auto& e : g->entries()) {
    uint64_t seed;
    Shape shape;
    if (!parse_noise_name(e.name, "noise.cuda.seed", &seed, &shape)) continue;
    auto ref = g->load(e.name, DType::F32);
    ASSERT_TRUE(ref.ok());
    HostTensor got = randn_cuda(seed, shape, CUDAGridLimits{132, 2048});
    FloatDiff d = float_diff(got.f32(), ref->f32(), got.numel());
    report(e.name, d);
    // The device's __logf/__sincosf are approximations: ~20% bit-exact, within 2e-6 absolute.
    EXPECT_LE(d.max_abs, 5e-6) << e.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

void check_draws(const SafetensorsFile* g, const std::string& prefix, NoiseDevice dev,
                 const Shape& shape, int n, double tol) {
  NoiseGenerator gen(42, dev);
  for (int k = 0; k < n; ++k) {
    const std::string name = prefix + ".draw" + std::to_string(k);
    auto ref = g->load(name, DType::F32);
    ASSERT_TRUE(ref.ok()) << ref.status().str();
    HostTensor got = gen.draw(shape);
    FloatDiff d = float_diff(got.f32(), ref->f32(), got.numel());
    report(name, d);
    EXPECT_LE(d.max_abs, tol) << name;
  }
}

TEST(TorchRng, AncestralDrawsMatchGolden) {
  HR_GOLDEN_OR_FAIL(g);
  check_draws(g, "noise.ancestral.cpu.seed42.1x4x8x8", NoiseDevice::CPU, Shape{1, 4, 8, 8}, 6,
              1e-6);
  check_draws(g, "noise.ancestral.cuda.seed42.1x4x8x8", NoiseDevice::CUDA, Shape{1, 4, 8, 8}, 3,
              5e-6);
  check_draws(g, "noise.ancestral.cuda.seed42.1x4x64x64", NoiseDevice::CUDA, Shape{1, 4, 64, 64}, 2,
              5e-6);
}

TEST(TorchRng, SeedUsesLow32BitsOnCpu) {
  HostTensor a = randn_cpu(42, Shape{1, 4, 8, 8});
  HostTensor b = randn_cpu((uint64_t(1) << 32) + 42, Shape{1, 4, 8, 8});
  HostTensor c = randn_cpu(~uint64_t(0), Shape{33});
  HostTensor d = randn_cpu(0xFFFFFFFFu, Shape{33});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0);
  EXPECT_EQ(std::memcmp(c.data(), d.data(), c.bytes()), 0);
}

TEST(TorchRng, SmallDrawsShareTheCachedNormal) {
  // The double path caches the second Box-Muller value in the generator: randn(1) twice
  // equals randn(2) once.
  TorchCPUGenerator a(7), b(7);
  float x[2], y[2];
  a.randn(std::span<float>(x, 1));
  a.randn(std::span<float>(x + 1, 1));
  b.randn(std::span<float>(y, 2));
  EXPECT_EQ(x[0], y[0]);
  EXPECT_EQ(x[1], y[1]);
}

TEST(TorchRng, PrepareNoiseBatchIndexSkipsEarlierDraws) {
  HR_GOLDEN_OR_FAIL(g);
  auto ref = g->load("noise.cpu.seed0.2x4x64x64", DType::F32);
  ASSERT_TRUE(ref.ok());
  // 16384 is a multiple of 16, so successive [1, 4, 64, 64] draws equal one [2, ...] draw.
  const int64_t idx[] = {1, 0, 1};
  HostTensor got = prepare_noise(Shape{3, 4, 64, 64}, 0, idx);
  ASSERT_EQ(got.shape(), (Shape{3, 4, 64, 64}));
  const int64_t per = 4 * 64 * 64;
  const float* r = ref->f32();
  for (int k = 0; k < 3; ++k) {
    FloatDiff d = float_diff(got.f32() + k * per, r + idx[k] * per, per);
    EXPECT_LE(d.max_abs, 1e-6) << "row " << k;
  }
  HostTensor whole = prepare_noise(Shape{2, 4, 64, 64}, 0);
  EXPECT_LE(float_diff(whole.f32(), r, whole.numel()).max_abs, 1e-6);
}

TEST(TorchRng, CudaOffsetAdvancesPerCall) {
  // 16384 elements need one float4 per thread: the philox offset grows by 4 per draw.
  TorchCUDAGenerator gen(42);
  std::vector<float> buf(16384);
  gen.randn(buf);
  EXPECT_EQ(gen.offset(), 4u);
  gen.randn(buf);
  EXPECT_EQ(gen.offset(), 8u);
  // Large tensors are capped at SMs * 8 blocks and need several float4 per thread.
  TorchCUDAGenerator big(1, CUDAGridLimits{132, 2048});
  std::vector<float> large(132 * 2048 * 4 + 1);
  big.randn(large);
  EXPECT_EQ(big.offset(), 8u);
}

}  // namespace
}  // namespace hr
