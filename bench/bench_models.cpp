// Model-level benchmark: full-size UNet step and VAE decode with random weights on the CPU or
// CUDA backend. Prints median ms, allocator-level and driver-level peaks, and the ratio to the
// PyTorch reference figures of the CUDA issues (measured on an H200, PyTorch 2.11).
//
//   bench_models [--device cpu|cuda] [--dtype f16|bf16|f32] [--steps N] [--only sd15|sdxl|unet|vae]
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
#include "bench_common.h"

using namespace hr;

namespace {

struct Row {
  std::string work;
  double ms = 0;
  double alloc_peak_gib = 0, driver_peak_gib = 0, planned_gib = 0;
  double ref_ms = 0, ref_compile_ms = 0, ref_peak_gib = 0;
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
  r.driver_peak = 0;
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

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::args_parse(argc, argv, 20);
  const std::string& dtype_s = args.dtype;
  const std::string& only = args.only;
  const int steps = args.steps;
  std::unique_ptr<Backend> backend = bench::backend_for(args.device);
  if (!backend) return 0;
  DType dt = *dtype_from_name(dtype_s);
  Runner r(*backend);
  std::printf("device: %s, dtype %s, %d timed steps after 2 warm-up runs, graph passes %s, "
              "CUDA graphs %s\n", backend->info().name.c_str(), dtype_s.c_str(), steps,
              r.ex.passes() ? "on" : "off (HEADROOM_GRAPH_PASSES=0)",
              backend->capture_supported() ? "where the backend can" : "n/a");
  std::vector<Row> rows;
  auto add = [&](Result<bench::Workload> w, int n) {
    if (!w.ok()) {
      std::printf("%s\n", w.status().str().c_str());
      return;
    }
    Row row = time_graph(r, w->name, w->graph, w->host_inputs(), *w->weights, n);
    row.ref_ms = w->ref_eager_ms;
    row.ref_compile_ms = w->ref_compile_ms;
    row.ref_peak_gib = w->ref_peak_gib;
    rows.push_back(row);
    w->weights->release_device();
    r.ex.release_arena();
  };
  if (only.empty() || only == "unet" || only == "sd15") add(bench::workload_sd15(dt), steps);
  if (only.empty() || only == "unet" || only == "sdxl") add(bench::workload_sdxl(dt), steps);
  if (only.empty() || only == "vae") {
    std::shared_ptr<WeightSet> vw;
    for (int px : {512, 1024, 2048}) {
      auto w = bench::workload_vae(dt, px, vw);
      if (w.ok()) vw = w->weights;
      add(std::move(w), std::max(3, steps / 4));
    }
  }
  std::printf("\n| work | ms | planned arena GiB | allocator-level peak GiB | driver-level used GiB "
              "| PyTorch eager ms | torch.compile ms | ratio to target | PyTorch allocator peak GiB |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    const double target = row.ref_compile_ms > 0 ? row.ref_compile_ms : row.ref_ms;
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %s | %.2fx %s | %.2f |\n", row.work.c_str(),
                row.ms, row.planned_gib, row.alloc_peak_gib, row.driver_peak_gib, row.ref_ms,
                row.ref_compile_ms > 0 ? fmt::format("{:.2f}", row.ref_compile_ms).c_str() : "-",
                row.ms > 0 && target > 0 ? row.ms / target : 0.0,
                row.ref_compile_ms > 0 ? "compile" : "eager", row.ref_peak_gib);
  }
  std::printf("\nratio to target = headroom ms / the issue's target (torch.compile for UNet steps, "
              "eager for VAE decode; below 1 is faster). Allocator level = headroom's own counters "
              "(weights + arenas); driver level = cudaMemGetInfo used (all processes, includes "
              "the CUDA context).\n");
  return 0;
}
