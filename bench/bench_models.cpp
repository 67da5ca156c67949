// Model-level benchmark: full-size UNet, Flux and Z-Image DiT steps, text encodes and VAE decodes
// with random weights on the CPU or CUDA backend, in one or more dtypes. Prints, per workload and
// dtype, the median ms of the timed runs (captured replays where the backend captures), the median
// ms of uncaptured runs, how far a captured replay's output is from an uncaptured run's (Note
// [replay check]), and allocator- and driver-level peaks. Every run's status is checked: a failed
// run is reported on stderr and in the table, and the exit code is 1. PyTorch figures are not built
// in (they move from run to run): scripts/device.sh compare measures them in the same run and joins
// them with --json's rows.
//
//   bench_models [--device cpu|cuda] [--dtype f16|bf16|f32|f16,bf16] [--steps N]
//                [--only sd15|sdxl|unet|vae|flux|t5|flux-vae|flux-all|zimage|qwen3|zimage-all]
//                [--size full|tiny] [--json PATH]
// (the Flux rows only when asked: flux the Flux.1-dev DiT step 1024x1024 b1, t5 the T5-XXL encode
// of 256 tokens in each dtype and as ComfyUI runs it, flux-vae the Flux VAE decode 1024x1024, keys
// flux_dit, t5xxl_encode, t5xxl_encode_f32_cast, flux_vae_decode; --size tiny: Note [tiny flux
// bench] in bench_flux.h)
// (the Z-Image rows only when asked: zimage the Z-Image Turbo DiT step 1024x1024 b1 with the
// template's caption, qwen3 the Qwen3-4B encode of 128 tokens in each dtype and as ComfyUI runs
// it, zimage-all both; keys zimage_dit, qwen3_4b_encode, qwen3_4b_encode_f32_cast, the ones
// bench/torch_peer_zimage.py writes; --size tiny: Note [tiny z-image bench] in bench_zimage.h)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "bench_common.h"
#include "bench_flux.h"
#include "bench_zimage.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/make_model.h"
#include "models/sd/unet.h"
#include "models/sd/vae.h"

using namespace hr;

namespace {

// Note [replay check]
// A captured replay runs recorded kernels on recorded addresses; if a capture went stale (a
// buffer moved, Note [captures and freed memory] in graph/capture_cache.cpp) its replay computes on
// the wrong memory and still returns OK. So after the timed runs, which are replays, the same
// graph runs uncaptured on the same inputs and the two outputs are compared. With the same
// kernels and algorithms (chosen on the first run and cached) they should be bitwise equal; a
// difference beyond kReplayTolerance of the output's magnitude means a wrong replay and makes
// the exit code 1.
constexpr double kReplayTolerance = 1e-2;

struct Row {
  std::string work, key, dtype;
  std::string error;  // non-empty: a run failed
  double ms = 0, uncaptured_ms = 0;
  bool captured = false;        // the timed runs were captured replays (capture on and supported)
  bool replay_bitwise = false;  // replay and uncaptured outputs identical to the bit
  double replay_max_diff = 0, out_max = 0;
  double alloc_peak_gib = 0, driver_peak_gib = 0, planned_gib = 0;
  bool replay_ok() const { return replay_max_diff <= kReplayTolerance * std::max(out_max, 1e-30); }
};

double gib(double b) { return b / double(1ull << 30); }

using bench::median;

// Whether the executor captures on this backend: what Executor's constructor decides.
bool capture_on(const Backend& b) {
  const char* env = std::getenv("HEADROOM_CUDA_GRAPHS");
  return b.capture_supported() && !(env && std::string(env) == "0");
}

struct Runner {
  Backend& backend;
  Allocator alloc;
  Executor ex;
  uint64_t driver_peak = 0;
  explicit Runner(Backend& b)
      : backend(b),
        alloc(b, Allocator::kUnlimited, eviction_policy()),
        ex(b, alloc, executor_policies_default(b)) {}
  void sample_driver() {
    DeviceInfo d = backend.info();
    driver_peak = std::max(driver_peak, d.memory_total - d.memory_free);
  }
};

using Outputs = std::vector<HostTensor>;

// One run, timed, its status checked.
Result<Outputs> run_timed(Runner& r, const bench::Workload& w, const HostInputs& in,
                          std::vector<double>& ms) {
  auto t0 = std::chrono::steady_clock::now();
  Result<Outputs> out = r.ex.run(w.graph, in, *w.weights);
  ms.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

// Note [replay check]: fills row.replay_* from two runs' outputs.
Status outputs_compare(const Outputs& replay, const Outputs& plain, Row& row) {
  if (replay.size() != plain.size())
    return make_error(ErrorCode::INTERNAL, "replay gave {} outputs, the uncaptured run {}",
                      replay.size(), plain.size());
  row.replay_bitwise = true;
  for (size_t i = 0; i < replay.size(); ++i) {
    if (replay[i].desc() != plain[i].desc())
      return make_error(ErrorCode::INTERNAL, "output {}: replay {} vs uncaptured {}", i,
                        replay[i].desc().str(), plain[i].desc().str());
    if (std::memcmp(replay[i].data(), plain[i].data(), replay[i].bytes()) != 0)
      row.replay_bitwise = false;
    const HostTensor a = replay[i].to(DType::F32), b = plain[i].to(DType::F32);
    for (int64_t k = 0; k < a.numel(); ++k) {
      const double x = a.f32()[k], y = b.f32()[k];
      if (!std::isfinite(x) || !std::isfinite(y)) {
        row.replay_max_diff = INFINITY;
        continue;
      }
      row.replay_max_diff = std::max(row.replay_max_diff, std::abs(x - y));
      row.out_max = std::max(row.out_max, std::abs(y));
    }
  }
  return Status();
}

Status time_graph(Runner& r, const bench::Workload& w, int steps, Row& row) {
  const HostInputs in = w.host_inputs();
  w.weights->bind(&r.backend, &r.alloc);
  HR_ASSIGN_OR_RETURN(auto plan, r.ex.plan(w.graph));
  row.planned_gib = gib(double(plan->arena_bytes));
  std::vector<double> ms;
  // Warm-up: uploads weights and chooses algorithms (first run), records the capture (second).
  for (int i = 0; i < 2; ++i) HR_TRY(run_timed(r, w, in, ms).status().with_context("warm-up run"));
  r.alloc.reset_peak();
  r.driver_peak = 0;
  ms.clear();
  Outputs replay;
  for (int i = 0; i < steps; ++i) {
    Result<Outputs> out = run_timed(r, w, in, ms);
    HR_TRY(out.status().with_context(fmt::format("timed run {}", i + 1)));
    r.sample_driver();
    if (i + 1 == steps) replay = std::move(out).value();
  }
  row.ms = median(ms);
  row.alloc_peak_gib = gib(double(r.alloc.total().peak));
  row.driver_peak_gib = gib(double(r.driver_peak));

  // Note [replay check]
  row.captured = capture_on(r.backend);
  r.ex.set_capture(false);
  std::vector<double> plain_ms;
  Outputs plain;
  Status st;
  for (int i = 0; i < 3 && st.ok(); ++i) {
    Result<Outputs> out = run_timed(r, w, in, plain_ms);
    if (out.ok())
      plain = std::move(out).value();
    else
      st = out.status().with_context("uncaptured run");
  }
  r.ex.set_capture(row.captured);
  HR_TRY(st);
  row.uncaptured_ms = median(plain_ms);
  return outputs_compare(replay, plain, row);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1)
    out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

std::string replay_cell(const Row& row) {
  if (!row.error.empty()) return "-";
  const char* what = row.captured ? "" : "not captured; two plain runs ";
  if (row.replay_bitwise) return fmt::format("{}bitwise equal", what);
  return fmt::format("{}max abs diff {:.3g} (outputs up to {:.3g}){}", what, row.replay_max_diff,
                     row.out_max, row.replay_ok() ? "" : " MISMATCH");
}

nlohmann::json row_json(const Row& row) {
  nlohmann::json j = {
      {"key", row.key}, {"work", row.work}, {"dtype", row.dtype}, {"ok", row.error.empty()}};
  if (!row.error.empty()) {
    j["error"] = row.error;
    return j;
  }
  j["ms"] = row.ms;
  j["uncaptured_ms"] = row.uncaptured_ms;
  j["captured"] = row.captured;
  j["replay_bitwise"] = row.replay_bitwise;
  j["replay_max_abs_diff"] = std::isfinite(row.replay_max_diff) ? row.replay_max_diff : -1.0;
  j["out_max_abs"] = row.out_max;
  j["replay_ok"] = row.replay_ok();
  j["planned_arena_gib"] = row.planned_gib;
  j["alloc_peak_gib"] = row.alloc_peak_gib;
  j["driver_used_gib"] = row.driver_peak_gib;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::args_parse(argc, argv, 20);
  const std::string& only = args.only;
  const int steps = std::max(1, args.steps);
  std::vector<DType> dtypes;
  for (const std::string& name : split(args.dtype, ',')) {
    std::optional<DType> t = dtype_from_name(name);
    if (!t) {
      std::fprintf(stderr, "bench_models: unknown dtype '%s' (f32, f16, bf16)\n", name.c_str());
      return 2;
    }
    dtypes.push_back(*t);
  }
  std::unique_ptr<Backend> backend = bench::backend_for(args.device);
  if (!backend) return 1;
  Runner r(*backend);
  std::printf(
      "device: %s, dtypes %s, %d timed runs after 2 warm-up runs, graph passes %s, "
      "CUDA graphs %s\n",
      backend->info().name.c_str(), args.dtype.c_str(), steps,
      r.ex.passes() ? "on" : "off (HEADROOM_GRAPH_PASSES=0)", capture_on(*backend) ? "on" : "off");
  std::fflush(stdout);
  std::vector<Row> rows;
  bool failed = false;
  auto add = [&](Result<bench::Workload> w, DType dt, int n) {
    Row row;
    row.dtype = dtype_name(dt);
    if (!w.ok()) {
      row.work = "(workload)";
      row.error = w.status().str();
    } else {
      row.work = w->name;
      row.key = w->key;
      Status st = time_graph(r, *w, n, row);
      if (!st.ok()) row.error = st.str();
      w->weights->release_device();
      r.ex.release_arena();
    }
    if (!row.error.empty()) {
      std::fprintf(stderr, "bench_models: FAILED %s %s: %s\n", row.work.c_str(), row.dtype.c_str(),
                   row.error.c_str());
      failed = true;
    } else if (!row.replay_ok()) {
      std::fprintf(stderr,
                   "bench_models: %s %s: captured replay differs from an uncaptured run "
                   "by %g (max |out| %g)\n",
                   row.work.c_str(), row.dtype.c_str(), row.replay_max_diff, row.out_max);
      failed = true;
    }
    std::printf("%s %s: %s\n", row.work.c_str(), row.dtype.c_str(),
                row.error.empty() ? fmt::format("{:.2f} ms", row.ms).c_str() : "FAILED");
    std::fflush(stdout);
    rows.push_back(std::move(row));
  };
  const bench::FluxBenchSize flux = bench::flux_bench_size(args.size);
  for (DType dt : dtypes) {
    if (only.empty() || only == "unet" || only == "sd15") add(bench::workload_sd15(dt), dt, steps);
    if (only.empty() || only == "unet" || only == "sdxl") add(bench::workload_sdxl(dt), dt, steps);
    const bool flux_all = only == "flux-all";
    if (only == "flux" || flux_all) add(bench::workload_flux_sized(flux, dt), dt, steps);
    if (only == "t5" || flux_all) add(bench::workload_t5xxl(flux, dt), dt, steps);
    if (only == "flux-vae" || flux_all)
      add(bench::workload_flux_vae(flux, dt), dt, std::max(3, steps / 4));
    if (only.empty() || only == "vae") {
      std::shared_ptr<WeightSet> vw;
      for (int px : {512, 1024, 2048}) {
        auto w = bench::workload_vae(dt, px, vw);
        if (w.ok()) vw = w->weights;
        add(std::move(w), dt, std::max(3, steps / 4));
      }
    }
  }
  const bench::ZImageBenchSize zimage = bench::zimage_bench_size(args.size);
  const bool zimage_all = only == "zimage-all";
  for (DType dt : dtypes) {
    if (only == "zimage" || zimage_all) add(bench::workload_zimage(zimage, dt), dt, steps);
    if (only == "qwen3" || zimage_all) add(bench::workload_qwen3(zimage, dt), dt, steps);
  }
  // Qwen3-4B as ComfyUI and headroom's text encoder run it (Note [LLM encoder precision] in
  // models/llm/llm_encoder.cpp): bf16 weights cast at use into an f32 computation.
  if (only == "qwen3" || zimage_all)
    add(bench::workload_qwen3(zimage, DType::F32, DType::BF16), DType::F32, steps);
  // T5-XXL as ComfyUI runs it (Note [T5 precision] in models/t5/t5_encoder.cpp): f16 weights
  // cast at use into an f32 computation, once whatever --dtype says.
  if (only == "t5" || only == "flux-all")
    add(bench::workload_t5xxl(flux, DType::F32, DType::F16), DType::F32, steps);
  std::printf(
      "\n| work | dtype | ms | uncaptured ms | captured replay vs uncaptured run | planned "
      "arena GiB | allocator-level peak GiB | driver-level used GiB |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    if (!row.error.empty()) {
      std::printf("| %s | %s | FAILED: %s | | | | | |\n", row.work.c_str(), row.dtype.c_str(),
                  row.error.c_str());
      continue;
    }
    std::printf("| %s | %s | %.2f | %.2f | %s | %.2f | %.2f | %.2f |\n", row.work.c_str(),
                row.dtype.c_str(), row.ms, row.uncaptured_ms, replay_cell(row).c_str(),
                row.planned_gib, row.alloc_peak_gib, row.driver_peak_gib);
  }
  std::printf(
      "\nms = median of the timed runs (captured replays where CUDA graphs are on); "
      "uncaptured ms = median of 3 runs with capture off. Allocator level = headroom's own "
      "counters (weights + arenas); driver level = cudaMemGetInfo used (all processes, "
      "includes the CUDA context). PyTorch in the same run: scripts/device.sh compare.\n");
  if (!args.json.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& row : rows) j.push_back(row_json(row));
    std::ofstream f(args.json);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench_models: cannot write %s\n", args.json.c_str());
      failed = true;
    }
  }
  return failed ? 1 : 0;
}
