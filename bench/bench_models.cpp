// Model-level benchmark: full-size UNet step and VAE decode with random weights on the CPU or
// CUDA backend. Prints median ms, allocator-level and driver-level peaks, and the ratio to the
// PyTorch reference figures of the CUDA issues (measured on an H200, PyTorch 2.11).
//
//   bench_models [--device cpu|cuda] [--dtype f16|bf16|f32] [--steps N] [--only unet|vae]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "models/make_model.h"
#include "models/unet.h"
#include "models/vae.h"

using namespace hr;

namespace {

struct Row {
  std::string work;
  double ms = 0;
  double alloc_peak_gib = 0, driver_peak_gib = 0, planned_gib = 0;
  double ref_ms = 0, ref_peak_gib = 0;
};

double gib(double b) { return b / double(1ull << 30); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Runner {
  Backend& backend;
  Allocator alloc;
  Executor ex;
  uint64_t driver_base = 0;
  uint64_t driver_peak = 0;
  explicit Runner(Backend& b) : backend(b), alloc(b), ex(b, alloc) {
    DeviceInfo d = b.info();
    driver_base = d.memory_total - d.memory_free;
  }
  void sample_driver() {
    DeviceInfo d = backend.info();
    driver_peak = std::max(driver_peak, d.memory_total - d.memory_free);
  }
};

Row time_graph(Runner& r, const std::string& name, Graph& g, const HostInputs& inputs,
               WeightSet& w, int steps) {
  Row row;
  row.work = name;
  w.bind(&r.backend, &r.alloc);
  auto plan = r.ex.plan(g);
  if (plan.ok()) row.planned_gib = gib(double((*plan)->arena_bytes));
  for (int i = 0; i < 2; ++i) {  // warm-up (uploads weights, chooses algorithms)
    auto out = r.ex.run(g, inputs, w);
    if (!out.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", name.c_str(), out.status().str().c_str());
      return row;
    }
  }
  r.alloc.reset_peak();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = r.ex.run(g, inputs, w);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    r.sample_driver();
  }
  row.ms = median(ms);
  row.alloc_peak_gib = gib(double(r.alloc.total().peak));
  row.driver_peak_gib = gib(double(r.driver_peak));
  return row;
}

HostTensor filled(DType dt, Shape s, float v) {
  HostTensor t(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = v * float((i * 7919) % 1000) / 1000.0f;
  return dt == DType::F32 ? std::move(t) : t.to(dt);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cuda", dtype_s = "f16", only;
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) dtype_s = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
  }
  std::unique_ptr<Backend> backend;
  if (device == "cuda") {
    auto c = cuda_backend_create(0);
    if (!c.ok()) {
      std::printf("no CUDA device (%s); use --device cpu\n", c.status().message().c_str());
      return 0;
    }
    backend = std::move(c).value();
  } else {
    backend = cpu_backend_create(0);
    if (dtype_s == "f16") dtype_s = "f32";
  }
  DType dt = *dtype_from_name(dtype_s);
  Runner r(*backend);
  std::printf("device: %s, dtype %s, %d timed steps after 2 warm-up runs\n",
              backend->info().name.c_str(), dtype_s.c_str(), steps);
  std::vector<Row> rows;

  if (only.empty() || only == "unet") {
    UNetConfig cfg = unet_config_sd15();
    auto g = unet_graph(cfg, 2, 64, 64, 77, dt);
    if (!g.ok()) {
      std::printf("unet graph: %s\n", g.status().str().c_str());
      return 1;
    }
    WeightSet w;
    make_model_random_weights(*g, 1, w);
    HostTensor x = filled(DType::F32, Shape{2, 4, 64, 64}, 1.0f);
    HostTensor t(DType::F32, Shape{2});
    t.f32()[0] = t.f32()[1] = 999.0f;
    HostTensor ctx = filled(DType::F32, Shape{2, 77, 768}, 0.5f);
    HostTensor x_in = dt == DType::F32 ? x.clone() : x.to(dt);
    HostTensor ctx_in = dt == DType::F32 ? ctx.clone() : ctx.to(dt);
    Row row = time_graph(r, "SD1.5 UNet step 512x512 b2", *g,
                         {{"x", &x_in}, {"timesteps", &t}, {"context", &ctx_in}}, w, steps);
    row.ref_ms = 36.8;
    row.ref_peak_gib = 1.84;
    rows.push_back(row);
    w.release_device();
  }
  if (only.empty() || only == "sdxl") {
    UNetConfig cfg = unet_config_sdxl();
    auto g = unet_graph(cfg, 2, 128, 128, 77, dt);
    if (g.ok()) {
      WeightSet w;
      make_model_random_weights(*g, 3, w);
      HostTensor x = filled(dt, Shape{2, 4, 128, 128}, 1.0f);
      HostTensor t(DType::F32, Shape{2});
      t.f32()[0] = t.f32()[1] = 999.0f;
      HostTensor ctx = filled(dt, Shape{2, 77, 2048}, 0.5f);
      HostTensor y = filled(dt, Shape{2, cfg.adm_in_channels}, 0.5f);
      Row row = time_graph(r, "SDXL UNet step 1024x1024 b2", *g,
                           {{"x", &x}, {"timesteps", &t}, {"context", &ctx}, {"y", &y}}, w, steps);
      row.ref_ms = 98.5;
      row.ref_peak_gib = 5.23;
      rows.push_back(row);
      w.release_device();
    }
  }
  if (only.empty() || only == "vae") {
    VAEConfig cfg = vae_config_sd();
    struct { int px; double ref_ms, ref_peak; } sizes[] = {{512, 22, 0.8}, {1024, 88, 2.6}};
    WeightSet w;
    for (auto s : sizes) {
      auto g = vae_decode_graph(cfg, 1, s.px / 8, s.px / 8, dt);
      if (!g.ok()) continue;
      make_model_random_weights(*g, 2, w);
      HostTensor z = filled(dt, Shape{1, 4, s.px / 8, s.px / 8}, 1.0f);
      Row row = time_graph(r, fmt::format("SD VAE decode {}x{} b1", s.px, s.px), *g,
                           {{"latent", &z}}, w, std::max(3, steps / 4));
      row.ref_ms = s.ref_ms;
      row.ref_peak_gib = s.ref_peak;
      rows.push_back(row);
    }
  }
  std::printf("\n| work | ms | planned arena GiB | allocator-level peak GiB | driver-level used GiB "
              "| PyTorch eager ms (H200) | ratio | PyTorch allocator peak GiB |\n|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows)
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.2fx | %.2f |\n", row.work.c_str(), row.ms,
                row.planned_gib, row.alloc_peak_gib, row.driver_peak_gib, row.ref_ms,
                row.ms > 0 ? row.ms / row.ref_ms : 0.0, row.ref_peak_gib);
  std::printf("\nratio = headroom ms / PyTorch eager ms (below 1 is faster). Allocator level = "
              "headroom's own counters (weights + arenas); driver level = cudaMemGetInfo used "
              "(all processes, includes context).\n");
  return 0;
}
