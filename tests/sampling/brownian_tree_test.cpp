// ComfyUI's Brownian-tree noise (Note [SDE noise]) against numpy, torchsde and ComfyUI itself:
// SeedSequence words, the noise_sampler draws the SDE samplers make, and the dpmpp_sde /
// dpmpp_2m_sde trajectories of tests/data/golden/sde/golden-sde.safetensors (see its README).
#include "sampling/brownian_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/safetensors.h"
#include "sampling/samplers.h"
#include "test_compare.h"
#include "golden_sampling.h"
#include "test_paths.h"

namespace hr {
namespace {

using test::rel_err;

const SafetensorsFile* golden_sde() {
  static const std::unique_ptr<SafetensorsFile> file = test::golden_file("sde/golden-sde.safetensors");
  return file.get();
}

HostTensor golden(const std::string& name) {
  const SafetensorsFile* g = golden_sde();
  EXPECT_NE(g, nullptr) << "tests/data/golden/sde/golden-sde.safetensors did not open";
  if (!g) return HostTensor();
  auto t = g->load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

std::vector<float> to_vector(const HostTensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// The golden stores each seed as four 16-bit pieces (exact in f32).
uint64_t golden_seed(const std::string& c) {
  HostTensor w = golden(c + ".seed_words");
  uint64_t seed = 0;
  for (int k = 0; k < 4 && k < w.numel(); ++k) seed |= uint64_t(w.f32()[k]) << (16 * k);
  return seed;
}

// The shape of one row of a stacked [n, ...] tensor.
Shape row_shape(const HostTensor& t) {
  Shape s;
  s.rank = t.shape().rank - 1;
  for (int d = 0; d < s.rank; ++d) s[d] = t.shape()[d + 1];
  return s;
}

// Row k of a stacked [n, ...] tensor.
HostTensor row(const HostTensor& t, int64_t k) {
  const Shape s = row_shape(t);
  HostTensor o(DType::F32, s);
  std::copy_n(t.f32() + k * o.numel(), o.numel(), o.f32());
  return o;
}

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, double(std::fabs(a.f32()[i] - b.f32()[i])));
  return m;
}

std::pair<float, float> sigma_range(const std::vector<float>& s) {
  float lo = INFINITY, hi = 0;
  for (float v : s) {
    if (v > 0) lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {lo, hi};
}

// The golden's model: denoised = x * k + k * 0.1, k = 0.5 / (sigma^2 + 1), in float32.
DenoiseFn analytic_denoiser() {
  return [](const HostTensor& x, float sigma) -> Result<HostTensor> {
    const float k = 0.5f / (sigma * sigma + 1.0f);
    const float b = k * 0.1f;
    HostTensor o(x.desc());
    for (int64_t i = 0; i < x.numel(); ++i) o.f32()[i] = x.f32()[i] * k + b;
    return o;
  };
}

const char* const kCases[] = {"s0", "s42", "sbig", "b2"};
const char* const kSamplers[] = {"dpmpp_sde", "dpmpp_2m_sde"};

// Printed by numpy 1.24:
//   /usr/bin/python3 -c "import numpy as np; S = np.random.SeedSequence;
//     print(list(S(0, pool_size=24).generate_state(3)))
//     print(list(S(42, spawn_key=(5, 2), pool_size=24).generate_state(4)))
//     print(list(S(2**63 + 12345, spawn_key=(0, 0), pool_size=24).generate_state(4)))
//     print(list(S(12345).generate_state(4)))
//     print(list(S(7, spawn_key=(2**33 + 1, 30), pool_size=24).generate_state(4)))"
TEST(SeedSequence, MatchesNumpy) {
  EXPECT_EQ(SeedSequence(0, {}, 24).generate_state(3),
            (std::vector<uint32_t>{4025752534u, 2687548107u, 2326983537u}));
  EXPECT_EQ(SeedSequence(42, {5, 2}, 24).generate_state(4),
            (std::vector<uint32_t>{3528112640u, 4072255779u, 1314858982u, 2838150540u}));
  EXPECT_EQ(SeedSequence((uint64_t(1) << 63) + 12345, {0, 0}, 24).generate_state(4),
            (std::vector<uint32_t>{3979444494u, 1596502697u, 4169532024u, 497880404u}));
  EXPECT_EQ(SeedSequence(12345).generate_state(4),
            (std::vector<uint32_t>{2688385916u, 3048105090u, 4196366895u, 3152189807u}));
  EXPECT_EQ(SeedSequence(7, {(uint64_t(1) << 33) + 1, 30}, 24).generate_state(4),
            (std::vector<uint32_t>{2723483507u, 3743898167u, 645539995u, 4113142914u}));
}

// A two-word seed without a spawn key (no zero padding to the pool size).
//   /usr/bin/python3 -c "import numpy as np; print(list(np.random.SeedSequence(2**64 -
//   1).generate_state(2)))"
TEST(SeedSequence, TwoWordEntropy) {
  EXPECT_EQ(SeedSequence(~uint64_t(0)).generate_state(2),
            (std::vector<uint32_t>{2458692877u, 2931597649u}));
}

// Every noise_sampler(sigma, sigma_next) call ComfyUI's samplers made, and the raw tree
// increment behind it, from a fresh tree queried in the same order.
TEST(BrownianTree, IncrementsMatchTorchsde) {
  ASSERT_NE(golden_sde(), nullptr);
  for (const char* c : kCases) {
    const std::vector<float> sigmas = to_vector(golden(std::string(c) + ".sigmas"));
    const uint64_t seed = golden_seed(c);
    const auto [lo, hi] = sigma_range(sigmas);
    for (const char* sampler : kSamplers) {
      const std::string key = std::string(c) + "." + sampler;
      HostTensor q = golden(key + ".query"), noise = golden(key + ".noise"),
                 raw = golden(key + ".raw");
      ASSERT_GT(q.numel(), 0);
      const Shape shape = row_shape(noise);
      BrownianTreeNoiseSampler ns(shape, lo, hi, seed);
      BrownianTree tree(lo, hi, shape, seed);
      double worst = 0;
      for (int64_t k = 0; k < q.shape()[0]; ++k) {
        const float s = q.f32()[2 * k], sn = q.f32()[2 * k + 1];
        auto got = ns.draw(s, sn);
        ASSERT_TRUE(got.ok()) << got.status().str();
        auto w = tree.increment(std::min(s, sn), std::max(s, sn));
        ASSERT_TRUE(w.ok()) << w.status().str();
        const HostTensor ref = row(noise, k), ref_raw = row(raw, k);
        const double e = rel_err(*got, ref), e_raw = rel_err(*w, ref_raw);
        worst = std::max({worst, e, e_raw});
        EXPECT_LT(e, 1e-6) << key << " query " << k << " (" << s << ", " << sn << ")";
        EXPECT_LT(e_raw, 1e-6) << key << " raw query " << k;
        EXPECT_LT(max_abs_diff(*got, ref), 1e-5) << key << " query " << k;
      }
      std::printf("  %-18s %2lld draws, worst rel err %.3g\n", key.c_str(), (long long)q.shape()[0],
                  worst);
    }
  }
}

// Answers do not depend on the query order or on what the tree has cached.
TEST(BrownianTree, DeterministicForASeed) {
  const Shape shape{1, 4, 8, 8};
  const std::vector<std::pair<double, double>> qs = {
      {0.5, 3.0}, {3.0, 14.0}, {0.03, 0.1}, {1.25, 1.2501}, {0.1, 14.6}};
  BrownianTree a(0.0291675, 14.614642, shape, 1234);
  std::vector<HostTensor> first;
  for (auto [s, t] : qs) {
    auto w = a.increment(s, t);
    ASSERT_TRUE(w.ok());
    first.push_back(std::move(w).value());
  }
  BrownianTree b(0.0291675, 14.614642, shape, 1234);
  for (size_t k = qs.size(); k-- > 0;) {
    auto w = b.increment(qs[k].first, qs[k].second);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(max_abs_diff(*w, first[k]), 0.0) << "query " << k;
  }
  // Additivity: W(s, u) + W(u, t) == W(s, t) up to the float sum.
  auto su = a.increment(0.5, 1.25), ut = a.increment(1.25, 3.0), st = a.increment(0.5, 3.0);
  ASSERT_TRUE(su.ok() && ut.ok() && st.ok());
  HostTensor sum = su->clone();
  for (int64_t i = 0; i < sum.numel(); ++i) sum.f32()[i] += ut->f32()[i];
  EXPECT_LT(rel_err(sum, *st), 1e-6);
  // Another seed is another path.
  BrownianTree c(0.0291675, 14.614642, shape, 1235);
  auto other = c.increment(0.5, 3.0);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(rel_err(*other, *st), 0.5);
  // Empty interval: zero increment.
  auto zero = a.increment(2.0, 2.0);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(max_abs_diff(*zero, HostTensor(DType::F32, shape)), 0.0);
}

// Increments over [s, t] are N(0, t - s): the normalised draws have unit variance.
TEST(BrownianTree, NoiseIsStandardNormal) {
  const Shape shape{1, 4, 32, 32};
  BrownianTreeNoiseSampler ns(shape, 0.0291675f, 14.614642f, 99);
  const float pairs[][2] = {{14.614642f, 7.0f}, {7.0f, 1.0f}, {1.0f, 0.5f}, {0.3f, 0.0291675f}};
  for (const auto& p : pairs) {
    auto z = ns.draw(p[0], p[1]);
    ASSERT_TRUE(z.ok());
    double mean = 0, var = 0;
    for (int64_t i = 0; i < z->numel(); ++i) mean += z->f32()[i];
    mean /= double(z->numel());
    for (int64_t i = 0; i < z->numel(); ++i) var += (z->f32()[i] - mean) * (z->f32()[i] - mean);
    var /= double(z->numel());
    EXPECT_NEAR(mean, 0.0, 0.1) << p[0] << " -> " << p[1];
    EXPECT_NEAR(var, 1.0, 0.1) << p[0] << " -> " << p[1];
  }
}

// ComfyUI's sample_dpmpp_sde / sample_dpmpp_2m_sde with the golden's analytic model: the x at
// every step and the final latent.
TEST(SDESamplers, TrajectoriesMatchComfyUI) {
  ASSERT_NE(golden_sde(), nullptr);
  for (const char* c : kCases) {
    const std::vector<float> sigmas = to_vector(golden(std::string(c) + ".sigmas"));
    HostTensor x0 = golden(std::string(c) + ".x_init");
    for (const char* sampler : kSamplers) {
      const std::string key = std::string(c) + "." + sampler;
      HostTensor steps = golden(key + ".x_steps");
      SamplerOptions opt;
      opt.seed = golden_seed(c);
      std::vector<double> step_err;
      opt.callback = [&](int i, int, const HostTensor& x, const HostTensor&) {
        step_err.push_back(i < steps.shape()[0] ? rel_err(x, row(steps, i)) : INFINITY);
      };
      auto out = sampler_run(sampler, analytic_denoiser(), x0.clone(), sigmas, opt);
      ASSERT_TRUE(out.ok()) << key << ": " << out.status().str();
      ASSERT_EQ(int64_t(step_err.size()), steps.shape()[0]) << key;
      for (size_t i = 0; i < step_err.size(); ++i)
        EXPECT_LT(step_err[i], 1e-5) << key << " step " << i;
      HostTensor ref = golden(key + ".final");
      const double e = rel_err(*out, ref);
      EXPECT_LT(e, 1e-5) << key;
      EXPECT_LT(max_abs_diff(*out, ref), 1e-5) << key;
      std::printf("  %-18s final rel err %.3g\n", key.c_str(), e);
    }
  }
}

// The same seed gives the same trajectory; another seed another one (the tree, not the
// ancestral NoiseGenerator, drives these samplers).
TEST(SDESamplers, SeedDeterminesTrajectory) {
  ASSERT_NE(golden_sde(), nullptr);
  const std::vector<float> sigmas = to_vector(golden("s42.sigmas"));
  HostTensor x0 = golden("s42.x_init");
  for (const char* sampler : kSamplers) {
    auto run = [&](uint64_t seed) {
      SamplerOptions opt;
      opt.seed = seed;
      auto r = sampler_run(sampler, analytic_denoiser(), x0.clone(), sigmas, opt);
      EXPECT_TRUE(r.ok()) << r.status().str();
      return r.ok() ? std::move(r).value() : HostTensor();
    };
    HostTensor a = run(42), b = run(42), c = run(43);
    EXPECT_EQ(max_abs_diff(a, b), 0.0) << sampler;
    EXPECT_GT(rel_err(c, a), 1e-3) << sampler;
    EXPECT_FALSE(sampler_needs_noise(sampler)) << sampler;
  }
}

}  // namespace
}  // namespace hr
