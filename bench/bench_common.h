// What the model benchmarks run: full-size SD1.5 / SDXL UNet steps and SD VAE decodes with
// random weights of the real shapes. No PyTorch figures live here: they move from run to run
// and machine to machine, so scripts/device.sh compare measures the PyTorch reference in the
// same run and joins the two by Workload::key.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/fp8_round.h"
#include "graph/executor.h"
#include "models/make_model.h"
#include "models/sd/unet.h"
#include "models/sd/vae.h"
#include "models/weight_format.h"

namespace hr::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The middle value (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Workload {
  std::string name;
  std::string key;  // stable id for machine-read output: sd15_unet, sdxl_unet, vae_decode_<px>
  Graph graph;
  std::vector<std::pair<std::string, HostTensor>> inputs;
  std::shared_ptr<WeightSet> weights;

  HostInputs host_inputs() const {
    HostInputs in;
    for (const auto& [k, v] : inputs) in.emplace_back(k, &v);
    return in;
  }
};

inline HostTensor filled(DType dt, Shape s, float v) {
  HostTensor t(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v * float((i * 7919) % 1000) / 1000.0f;
  return dt == DType::F32 ? std::move(t) : t.to(dt);
}

inline HostTensor timesteps(float t) {
  HostTensor h(DType::F32, Shape{2});
  h.f32()[0] = h.f32()[1] = t;
  return h;
}

inline Result<Workload> workload_sd15(DType dt) {
  Workload w;
  w.name = "SD1.5 UNet step 512x512 b2";
  w.key = "sd15_unet";
  HR_ASSIGN_OR_RETURN(w.graph, unet_graph(unet_config_sd15(), 2, 64, 64, 77, dt));
  w.weights = std::make_shared<WeightSet>();
  make_model_random_weights(w.graph, 1, *w.weights);
  w.inputs.emplace_back("x", filled(dt, Shape{2, 4, 64, 64}, 1.0f));
  w.inputs.emplace_back("timesteps", timesteps(999.0f));
  w.inputs.emplace_back("context", filled(dt, Shape{2, 77, 768}, 0.5f));
  return w;
}

inline Result<Workload> workload_sdxl(DType dt) {
  Workload w;
  w.name = "SDXL UNet step 1024x1024 b2";
  w.key = "sdxl_unet";
  UNetConfig cfg = unet_config_sdxl();
  HR_ASSIGN_OR_RETURN(w.graph, unet_graph(cfg, 2, 128, 128, 77, dt));
  w.weights = std::make_shared<WeightSet>();
  make_model_random_weights(w.graph, 3, *w.weights);
  w.inputs.emplace_back("x", filled(dt, Shape{2, 4, 128, 128}, 1.0f));
  w.inputs.emplace_back("timesteps", timesteps(999.0f));
  w.inputs.emplace_back("context", filled(dt, Shape{2, 77, 2048}, 0.5f));
  w.inputs.emplace_back("y", filled(dt, Shape{2, cfg.adm_in_channels}, 0.5f));
  return w;
}

// The SDXL step with every float weight stored in fp8 e4m3 (round to nearest even, as ComfyUI's
// weight_dtype fp8_e4m3fn stores it) and dequantized before use (Note [fp8 weights] in
// graph/graph.h): the same random weights as workload_sdxl in half their f16 bytes.
inline Result<Workload> workload_sdxl_fp8(DType dt) {
  HR_ASSIGN_OR_RETURN(Workload w, workload_sdxl(dt));
  auto storage = std::make_shared<WeightStorageMap>();
  auto stored = std::make_shared<WeightSet>();
  for (const std::string& n : w.weights->names()) {
    const HostTensor* h = w.weights->find(n);
    if (!dtype_is_float(h->dtype()) || h->shape().rank < 1) {
      stored->put(n, h->clone());
      continue;
    }
    (*storage)[n] = WeightStorage{DType::F8_E4M3, ""};
    const HostTensor f = h->to(DType::F32);
    HostTensor q(DType::F8_E4M3, h->shape());
    f32_to_f8(f.f32(), DType::F8_E4M3, static_cast<uint8_t*>(q.data()), f.numel());
    stored->put(n, std::move(q));
  }
  UNetConfig cfg = unet_config_sdxl();
  cfg.storage = storage;
  cfg.storage_key = weight_storage_key(storage.get());
  HR_ASSIGN_OR_RETURN(w.graph, unet_graph(cfg, 2, 128, 128, 77, dt));
  w.weights = std::move(stored);
  w.name += ", fp8 weights";
  w.key = "sdxl_unet_fp8";
  return w;
}

// The fp8 SDXL step as UNETLoader's fp8_e4m3fn_fast runs it: the same stored weights, the
// linear layers as fp8 GEMMs where the GPU has fp8 tensor cores (Note [fp8 linear] in
// graph/pass_fp8.cpp).
inline Result<Workload> workload_sdxl_fp8_fast(const Workload& fp8, DType dt) {
  WeightFormats formats;
  formats.storage = std::make_shared<const WeightStorageMap>(*fp8.graph.weight_storage());
  formats = weight_formats_fast(std::move(formats));  // as UNETLoader's _fast marks them
  UNetConfig cfg = unet_config_sdxl();
  cfg.storage = formats.storage;
  cfg.storage_key = weight_storage_key(formats.storage.get());
  Workload w;
  w.name = "SDXL UNet step 1024x1024 b2, fp8 weights, _fast";
  w.key = "sdxl_unet_fp8_fast";
  HR_ASSIGN_OR_RETURN(w.graph, unet_graph(cfg, 2, 128, 128, 77, dt));
  w.weights = fp8.weights;
  for (const auto& [n, t] : fp8.inputs) w.inputs.emplace_back(n, t.clone());
  return w;
}

// `weights` may be shared between sizes (the VAE's weights do not depend on the size).
inline Result<Workload> workload_vae(DType dt, int px, std::shared_ptr<WeightSet> weights) {
  Workload w;
  w.name = fmt::format("SD VAE decode {}x{} b1", px, px);
  w.key = fmt::format("vae_decode_{}", px);
  HR_ASSIGN_OR_RETURN(w.graph, vae_decode_graph(vae_config_sd(), 1, px / 8, px / 8, dt));
  w.weights = weights ? weights : std::make_shared<WeightSet>();
  if (!weights) make_model_random_weights(w.graph, 2, *w.weights);
  w.inputs.emplace_back("latent", filled(dt, Shape{1, 4, px / 8, px / 8}, 1.0f));
  return w;
}

// Command line shared by the model benchmarks: --device, --dtype, --steps, --only, --top, --json,
// --size (full or tiny: the Flux workloads' sizes, Note [tiny flux bench] in bench_flux.h).
struct Args {
  std::string device = "cuda", dtype = "f16", only, json, size = "full";
  int steps = 20, top = 12;
};

inline Args args_parse(int argc, char** argv, int default_steps) {
  Args a;
  a.steps = default_steps;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--device") a.device = argv[++i];
    else if (k == "--dtype") a.dtype = argv[++i];
    else if (k == "--steps") a.steps = std::atoi(argv[++i]);
    else if (k == "--only") a.only = argv[++i];
    else if (k == "--top") a.top = std::atoi(argv[++i]);
    else if (k == "--json") a.json = argv[++i];
    else if (k == "--size") a.size = argv[++i];
  }
  if (a.device != "cuda" && a.dtype == "f16") a.dtype = "f32";  // the CPU computes in f32
  return a;
}

inline std::unique_ptr<Backend> backend_for(const std::string& device) {
  if (device == "cuda") {
    auto c = cuda_backend_create(0);
    if (!c.ok()) {
      std::printf("no CUDA device (%s); use --device cpu\n", c.status().message().c_str());
      return nullptr;
    }
    return std::move(c).value();
  }
  return cpu_backend_create(0);
}

}  // namespace hr::bench
