// The checks the DiT families' end-to-end tests (flux_e2e_test.cpp, zimage_e2e_test.cpp) share:
// a stage against its golden tensor, SaveImage's PNG against the reference's, and the sampler's
// trajectory step by step against the reference's callback record.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/png_io.h"
#include "graph/executor.h"
#include "nodes/values.h"
#include "png_compare.h"
#include "sampling/cfg.h"
#include "sampling/model_sampling.h"
#include "sampling/sample.h"
#include "sampling/schedulers.h"
#include "sampling/torch_rng.h"
#include "test_compare.h"

namespace hr::test {

// A stage's relative error, printed and checked against `tol`.
inline void expect_stage(const HostTensor& got, const HostTensor& want, double tol,
                         const std::string& what) {
  const double e = rel_err(got, want);
  std::printf("  %-22s rel err %.3g\n", what.c_str(), e);
  EXPECT_LT(e, tol) << what;
}

// The PNG SaveImage wrote against the reference's: every value within one level.
inline void expect_png_within_one_level(const std::string& got_path, const std::string& want_path) {
  auto png = png_read(got_path);
  ASSERT_TRUE(png.ok()) << png.status().str();
  auto want = png_read(want_path);
  ASSERT_TRUE(want.ok()) << want.status().str();
  const PngStats s = png_compare(*png, *want);
  std::printf("  png: %s\n", png_describe(s).c_str());
  EXPECT_TRUE(png_within(s, kF32PngBounds)) << png_describe(s);
  EXPECT_LE(s.max_abs, 1) << "every value within one level";
}

// What the reference recorded of one KSampler run: its settings, initial noise, the callback's
// x and denoised per step (model space, stacked on axis 0) and the node's latent (VAE space).
struct TrajectoryGolden {
  std::string sampler, scheduler;
  int steps = 0;
  uint64_t seed = 0;
  HostTensor noise, steps_x, steps_denoised, latent;
};

// KSampler's sigmas (g's scheduler, sampler and steps on `ms`) and initial noise (g's seed)
// against the golden's.
inline void expect_sampling_inputs(const ModelSampling& ms, const TrajectoryGolden& g,
                                   const HostTensor& want_sigmas) {
  auto sigmas = ksampler_sigmas(ms, g.scheduler, g.sampler, g.steps);
  ASSERT_TRUE(sigmas.ok()) << sigmas.status().str();
  HostTensor got(DType::F32, Shape{int64_t(sigmas->size())});
  std::copy(sigmas->begin(), sigmas->end(), got.f32());
  expect_stage(got, want_sigmas, 1e-6, "sigmas");
  expect_stage(prepare_noise(g.noise.shape(), g.seed), g.noise, 1e-7, "noise");
}

// KSampler's latent (VAE space) and VAEDecode's image within `tol` of the golden's, and the PNG
// SaveImage wrote within one level of the reference's.
inline void expect_decoded(const Latent& latent, const ImageValue& image,
                           const HostTensor& want_latent, const HostTensor& want_image, double tol,
                           const std::string& png_path, const std::string& want_png_path) {
  expect_stage(*latent.samples, want_latent, tol, "latent");
  expect_stage(*image.pixels, want_image, tol, "image");
  expect_png_within_one_level(png_path, want_png_path);
}

// The workflow's patched model and positive conditioning through sample() at cfg 1 (the
// negative must never be called: ComfyUI's cfg-1 optimisation), each step within `tol` of the
// golden's, and the end, back in VAE space, equal to the KSampler node's `node_latent`.
inline void expect_trajectory(const ModelValue& model, const Conditioning& pos,
                              const Conditioning& neg, Executor& ex, const TrajectoryGolden& g,
                              const HostTensor& node_latent, double tol) {
  const std::unique_ptr<ModelSampling> ms = model_sampling_create(model.sampling_spec());
  auto call = [&](const Conditioning& c) -> ModelFn {
    return [&, entry = &c.entries.at(0)](const HostTensor& x, float t) -> Result<HostTensor> {
      HostTensor ts(DType::F32, Shape{x.shape()[0]});
      for (int64_t i = 0; i < ts.numel(); ++i) ts.f32()[i] = t;
      const CondEntry* entries[] = {entry};
      return model.model->diffusion->run(ex, model.weights(), x, ts, entries);
    };
  };
  int uncond_calls = 0;
  ModelFn uncond = [&](const HostTensor& x, float t) {
    ++uncond_calls;
    return call(neg)(x, t);
  };
  SampleParams p;
  p.sampler = g.sampler;
  auto sigmas = ksampler_sigmas(*ms, g.scheduler, g.sampler, g.steps);
  ASSERT_TRUE(sigmas.ok());
  p.sigmas = *sigmas;
  p.seed = g.seed;
  std::vector<HostTensor> xs, x0s;
  p.callback = [&](int, int, const HostTensor& x, const HostTensor& x0) {
    xs.push_back(x.clone());
    x0s.push_back(x0.clone());
  };
  const Shape shape = g.noise.shape();
  auto out = sample(*ms, cfg_denoiser(*ms, call(pos), uncond, 1.0f), prepare_noise(shape, p.seed),
                    HostTensor(DType::F32, shape), p);
  ASSERT_TRUE(out.ok()) << out.status().str();
  EXPECT_EQ(uncond_calls, 0) << "cfg 1 skips the negative";
  const int64_t steps = g.steps_x.shape()[0], per = g.steps_x.numel() / steps;
  ASSERT_EQ(int64_t(xs.size()), steps);
  for (int64_t i = 0; i < steps; ++i) {
    HostTensor wx(DType::F32, shape), wd(DType::F32, shape);
    std::copy_n(g.steps_x.f32() + i * per, per, wx.f32());
    std::copy_n(g.steps_denoised.f32() + i * per, per, wd.f32());
    expect_stage(xs[size_t(i)], wx, tol, fmt::format("step {} x", i));
    expect_stage(x0s[size_t(i)], wd, tol, fmt::format("step {} denoised", i));
  }
  HostTensor end = std::move(out).value();
  model.model->latent_format().process_out(end.f32(), end.numel());
  expect_stage(end, g.latent, tol, "latent (sampler)");
  EXPECT_EQ(rel_err(end, node_latent), 0.0) << "KSampler runs the same steps";
}

}  // namespace hr::test
