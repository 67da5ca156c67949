// The Flux.1 benchmark workloads (issues 38 and 39): the Flux.1-dev DiT step in bf16 and with fp8
// e4m3 weights (dequantized, and `_fast`), the T5-XXL encode of 256 tokens and the Flux VAE decode
// at 1024x1024, at full size (random weights of the real shapes) or tiny (--size tiny: the same
// code paths on the CPU in seconds, Note [tiny flux bench]).
#pragma once

#include <algorithm>
#include <cstring>
#include <thread>

#include "bench_common.h"
#include "models/flux/flux_dit.h"
#include "models/flux/flux_make_model.h"
#include "models/flux/flux_tokens.h"
#include "models/flux/flux_vae_make.h"
#include "models/t5/t5_encoder.h"

namespace hr::bench {

// Note [tiny flux bench]
// --size tiny runs every Flux workload through the same functions at make-model's tiny sizes
// (models/flux/flux_make_model.cpp, Note [tiny flux]: a 2-head DiT of Flux's head width, a 2-layer
// T5, the 32-channel autoencoder) on a 4x4 grid of patches (a 64x64 image) with 16 text tokens,
// so the CPU exercises the rows, budgets and tables the GPU run prints at full size.
struct FluxBenchSize {
  bool tiny = false;
  FluxMakeConfig models;
  int64_t grid = 64;        // patches per side: 1024 px / 16
  int64_t txt_tokens = 512;  // the DiT's T5 tokens (ComfyUI pads Flux prompts to 256; dev: 512)
  int64_t t5_tokens = 256;   // the T5 encode row (the peer's shape)
  int64_t px = 1024;
  std::string tag() const { return tiny ? " (tiny)" : ""; }
};

inline FluxBenchSize flux_bench_size(const std::string& size) {
  FluxBenchSize s;
  s.tiny = size == "tiny";
  s.models = flux_make_config(s.tiny ? ModelSize::TINY : ModelSize::FULL);
  if (s.tiny) {
    s.grid = 4;
    s.txt_tokens = 16;
    s.t5_tokens = 16;
    s.px = 64;
  }
  return s;
}

// Runs fn(begin, end) over [0, n) on every hardware thread, in contiguous ranges.
template <typename Fn>
void parallel_ranges(int64_t n, Fn fn) {
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t per = (n + threads - 1) / threads;
  if (n < (int64_t(1) << 20) || threads == 1) {
    fn(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < n; b += per) pool.emplace_back(fn, b, std::min(n, b + per));
  for (std::thread& t : pool) t.join();
}

// make_model_random_weights with the conversion to the declared dtype spread over all threads:
// 11.9 G values converted on one thread would take most of a minute.
inline void random_weights_parallel(const Graph& g, uint64_t seed, WeightSet& out) {
  std::mt19937_64 rng(seed);
  for (const Value& v : g.values()) {
    if (v.kind != ValueKind::WEIGHT || out.contains(v.name)) continue;
    HostTensor t(DType::F32, v.desc.shape);
    make_model_random_fill(v.name, t, rng);  // parallel inside
    if (v.desc.dtype == DType::F32) {
      out.put(v.name, std::move(t));
      continue;
    }
    HostTensor c(v.desc.dtype, v.desc.shape);
    const size_t width = dtype_size(v.desc.dtype);
    parallel_ranges(t.numel(), [&](int64_t b, int64_t e) {
      dtype_convert(t.f32() + b, DType::F32, static_cast<char*>(c.data()) + size_t(b) * width,
                    v.desc.dtype, size_t(e - b));
    });
    out.put(v.name, std::move(c));
  }
}

// The Flux.1-dev DiT step at size.px (1024: a 64x64 grid of 2x2 patches, 4096 image tokens, beside
// 512 T5 tokens), batch 1 (cfg 1: one call, as ComfyUI runs Flux), guidance 3.5; the shapes of
// workload_flux. `cfg` may carry an fp8 storage map (weights then come from the caller).
inline Result<Workload> workload_flux_graph(const FluxBenchSize& size, const FluxConfig& cfg,
                                            DType dt) {
  Workload w;
  w.name = fmt::format("Flux.1-dev DiT step {}x{} b1{}", size.px, size.px, size.tag());
  w.key = "flux_dit";
  const int64_t n = size.grid, txt = size.txt_tokens, img = n * n;
  HR_ASSIGN_OR_RETURN(w.graph, flux_dit_graph(cfg, 1, n, n, txt, dt));
  HostTensor g(DType::F32, Shape{1});
  g.f32()[0] = 3.5f;
  HostTensor t(DType::F32, Shape{1});
  t.f32()[0] = 1.0f;
  HR_ASSIGN_OR_RETURN(HostTensor pe, flux_pe_table(txt, n, n, cfg.axes_dim, cfg.theta));
  w.inputs.emplace_back("img", filled(dt, Shape{1, img, cfg.in_channels}, 1.0f));
  w.inputs.emplace_back("txt", filled(dt, Shape{1, txt, cfg.context_in_dim}, 0.5f));
  w.inputs.emplace_back("timesteps", std::move(t));
  w.inputs.emplace_back("y", filled(dt, Shape{1, cfg.vec_in_dim}, 0.5f));
  if (cfg.guidance_embed) w.inputs.emplace_back("guidance", std::move(g));
  w.inputs.emplace_back("pe", std::move(pe));
  return w;
}

// The bf16 (or `dt`) DiT step with random weights made once (random_weights_parallel).
inline Result<Workload> workload_flux_sized(const FluxBenchSize& size, DType dt) {
  HR_ASSIGN_OR_RETURN(Workload w, workload_flux_graph(size, size.models.dit, dt));
  w.weights = std::make_shared<WeightSet>();
  random_weights_parallel(w.graph, 5, *w.weights);
  return w;
}

// The full-size step (bench_models --only flux; the shapes bench/torch_peer_flux.py times).
inline Result<Workload> workload_flux(DType dt) {
  return workload_flux_sized(flux_bench_size("full"), dt);
}

// The same DiT with every float weight of rank >= 1 stored in fp8 e4m3 (round to nearest even, as
// ComfyUI's weight_dtype fp8_e4m3fn casts) from `plain`'s weights and dequantized before use
// (Note [fp8 weights] in graph/graph.h); `fast`: UNETLoader's fp8_e4m3fn_fast, the linear layers
// as fp8 GEMMs where the GPU has fp8 tensor cores (Note [fp8 linear] in graph/pass_fp8.cpp).
// `stored`: the fp8 weights of an earlier call, shared (null: made from plain's).
inline Result<Workload> workload_flux_fp8(const FluxBenchSize& size, const Workload& plain, DType dt,
                                          bool fast, std::shared_ptr<WeightSet> stored) {
  auto storage = std::make_shared<WeightStorageMap>();
  if (!stored) stored = std::make_shared<WeightSet>();
  const bool make = stored->size() == 0;
  for (const std::string& n : plain.weights->names()) {
    const HostTensor* h = plain.weights->find(n);
    if (!dtype_is_float(h->dtype()) || h->shape().rank < 1) {
      if (make) stored->put(n, h->clone());
      continue;
    }
    (*storage)[n] = WeightStorage{DType::F8_E4M3, ""};
    if (!make) continue;
    HostTensor q(DType::F8_E4M3, h->shape());
    const size_t width = dtype_size(h->dtype());
    parallel_ranges(h->numel(), [&](int64_t b, int64_t e) {
      std::vector<float> f(size_t(e - b));
      dtype_convert(static_cast<const char*>(h->data()) + size_t(b) * width, h->dtype(), f.data(),
                    DType::F32, f.size());
      f32_to_f8(f.data(), DType::F8_E4M3, static_cast<uint8_t*>(q.data()) + b, e - b);
    });
    stored->put(n, std::move(q));
  }
  WeightFormats formats;
  formats.storage = storage;
  if (fast) formats = weight_formats_fast(std::move(formats));  // as UNETLoader's _fast marks them
  FluxConfig cfg = size.models.dit;
  cfg.storage = formats.storage;
  cfg.storage_key = weight_storage_key(formats.storage.get());
  HR_ASSIGN_OR_RETURN(Workload w, workload_flux_graph(size, cfg, dt));
  w.weights = std::move(stored);
  w.name += fast ? ", fp8 weights, _fast" : ", fp8 weights";
  w.key = fast ? "flux_dit_fp8_fast" : "flux_dit_fp8";
  return w;
}

// T5-XXL (v1.1 encoder, 24 layers, d_model 4096) encoding one row of size.t5_tokens (256) ids,
// computed in `dt` with its weights in `dt`. `stored` (F16): the weights kept in f16 and cast at
// use into an f32 computation, as ComfyUI runs it (Note [T5 precision] in models/t5/t5_encoder.cpp).
inline Result<Workload> workload_t5xxl(const FluxBenchSize& size, DType dt,
                                       std::optional<DType> stored = std::nullopt) {
  Workload w;
  T5Config cfg = size.models.t5;
  w.key = stored ? "t5xxl_encode_f32_cast" : "t5xxl_encode";
  w.name = fmt::format("T5-XXL encode {} tokens b1{}{}", size.t5_tokens,
                       stored ? fmt::format(", {} weights", dtype_name(*stored)) : std::string(),
                       size.tag());
  HR_ASSIGN_OR_RETURN(Graph probe, t5_encoder_graph(cfg, 1, size.t5_tokens, stored ? *stored : dt));
  w.weights = std::make_shared<WeightSet>();
  random_weights_parallel(probe, 7, *w.weights);
  if (stored) {
    auto map = std::make_shared<WeightStorageMap>();
    for (const std::string& n : w.weights->names())
      if (dtype_is_float(w.weights->find(n)->dtype())) (*map)[n] = WeightStorage{*stored, ""};
    cfg.storage = map;
    w.weights->set_storage(map);
  }
  HR_ASSIGN_OR_RETURN(w.graph, t5_encoder_graph(cfg, 1, size.t5_tokens, dt));
  HostTensor ids(DType::I64, Shape{1, size.t5_tokens});
  for (int64_t i = 0; i < size.t5_tokens; ++i)
    static_cast<int64_t*>(ids.data())[i] = (i * 7919 + 3) % cfg.vocab;
  w.inputs.emplace_back("ids", std::move(ids));
  w.inputs.emplace_back("relative_buckets",
                        t5_relative_bucket_table(size.t5_tokens, cfg.relative_attention_num_buckets,
                                                 cfg.relative_attention_max_distance));
  return w;
}

// The Flux autoencoder's decode of a 16-channel latent of size.px / 8 per side (1x16x128x128 ->
// 1x3x1024x1024), untiled.
inline Result<Workload> workload_flux_vae(const FluxBenchSize& size, DType dt) {
  Workload w;
  w.key = "flux_vae_decode";
  w.name = fmt::format("Flux VAE decode {}x{} b1{}", size.px, size.px, size.tag());
  const int64_t lat = size.px / 8;
  HR_ASSIGN_OR_RETURN(w.graph, vae_decode_graph(size.models.vae, 1, lat, lat, dt));
  w.weights = std::make_shared<WeightSet>();
  random_weights_parallel(w.graph, 2, *w.weights);
  w.inputs.emplace_back("latent", filled(dt, Shape{1, size.models.vae.z_channels, lat, lat}, 1.0f));
  return w;
}

}  // namespace hr::bench
