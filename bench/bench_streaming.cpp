// Weight streaming benchmark (the memory issue's item 9): full-size SD1.5 and SDXL UNet steps
// (random weights of the real shapes) under budgets that leave 100, 75, 50, 25 and 0 % of the
// weights resident, each against the resident step and against the floor
// max(resident step, streamed bytes / host-to-device bandwidth), both measured in this run.
// Then the SD VAE decode at 2048x2048 under a 1 GiB budget (tiled) against untiled.
//
//   bench_streaming [--device cuda] [--dtype f16] [--steps 10]
//                   [--only sd15|sdxl|vae|switch|fp8|flux|flux-fp8|flux-all|zimage]
//                   [--size full|tiny]
// (switch: SDXL model switches under a one-model budget, Note [weight block cache]; only alone)
// (fp8: the SDXL step with its weights stored in fp8 and dequantized before use, resident and at
// 75/50/25/0 % resident against its floor, then f16 and fp8 within one 2 GiB budget)
// (flux: the Flux.1-dev DiT step 1024x1024 b1 resident and at 75/50/25/0 % resident; flux-fp8:
// bf16 against fp8 and fp8 _fast resident, fp8 at 75/50/25/0 %, both within 8 GiB; flux-all: both
// on one set of weights; --size tiny: the tiny Flux, Note [tiny flux bench] in bench_flux.h)
// (zimage: the Z-Image Turbo DiT step 1024x1024 b1 with the template's caption, resident and at
// 75/50/25/0 % resident; --size tiny: Note [tiny z-image bench] in bench_zimage.h)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "bench_common.h"
#include "bench_flux.h"
#include "bench_zimage.h"
#include "core/bytes.h"
#include "graph/planner.h"
#include "graph/residency.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/checkpoint.h"
#include "models/sd/vae_tiled.h"

namespace hr {
namespace {

using bench::Clock;
using bench::median;
using bench::ms_since;



// Host-to-device bandwidth from page-locked memory (best of 5 copies of 256 MiB), bytes/s.
double h2d_bandwidth(Backend& b) {
  const size_t n = 256ull << 20;
  Result<void*> h = b.host_alloc_pinned(n);
  Result<void*> d = b.device_alloc(n);
  if (!h.ok() || !d.ok()) return 0;
  std::memset(*h, 1, n);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = Clock::now();
    (void)b.copy_h2d(*d, *h, n, nullptr);
    (void)b.stream_sync(nullptr);
    const double s = ms_since(t0) / 1e3;
    if (i > 0) best = std::max(best, double(n) / s);
  }
  b.host_free_pinned(*h);
  b.device_free(*d);
  return best;
}

uint64_t driver_used(Backend& b) {
  const DeviceInfo d = b.info();
  return d.memory_total - d.memory_free;
}

struct Row {
  std::string work, target;
  double ms = 0, ms_min = 0, ms_max = 0;
  double resident_frac = 0;
  uint64_t streamed = 0;
  double floor_ms = 0;
  uint64_t alloc_peak = 0, driver_peak = 0;
  std::string residency;
  std::vector<double> node_ms;  // one timed (uncaptured) run, per node (Note [node timing])
  std::string timeline;         // Note [streaming timeline], streamed rows
};

// Where a streamed step loses time against the resident one (Note [streaming timeline]): the
// step's nodes in tenths, each with the resident run's ms, this run's ms (a node that waited
// for a copy takes longer) and the MiB its nodes read first from the ring; then how long the
// copy stream worked (bytes / bandwidth) against when its last copy ended.
std::string timeline_text(const Executor::StreamTimeline& t, const std::vector<double>& ms,
                          const std::vector<double>& resident_ms, double bw) {
  const size_t n = ms.size();
  if (t.groups.empty() || n == 0 || resident_ms.size() != n) return "";
  double waited = 0;
  for (size_t i = 0; i < n; ++i) waited += std::max(0.0, ms[i] - resident_ms[i]);
  uint64_t bytes = 0;
  for (const auto& g : t.groups) bytes += g.bytes;
  const double busy = bw > 0 ? double(bytes) / bw * 1e3 : 0;
  std::string out = fmt::format(
      "timed step {:.2f} ms (resident {:.2f}); compute waited {:.2f} ms for copies; {} copy "
      "groups, copy stream busy {:.2f} ms, last copy ended at {:.2f} ms\n      tenths of the "
      "step (resident ms / streamed ms / MiB first read):",
      t.node_end_ms.empty() ? 0.0 : t.node_end_ms.back(),
      std::accumulate(resident_ms.begin(), resident_ms.end(), 0.0), waited, t.groups.size(), busy,
      t.groups.back().end_ms);
  for (int d = 0; d < 10; ++d) {
    const size_t lo = n * size_t(d) / 10, hi = n * size_t(d + 1) / 10;
    double a = 0, b = 0, mib = 0;
    for (size_t i = lo; i < hi; ++i) {
      a += resident_ms[i];
      b += ms[i];
    }
    for (const auto& g : t.groups)
      if (size_t(g.first) >= lo && size_t(g.first) < hi) mib += double(g.bytes) / (1 << 20);
    out += fmt::format(" {:.1f}/{:.1f}/{:.0f}", a, b, mib);
  }
  // The nodes that waited longest, with the end of the copy group their first weights were in.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::partial_sort(order.begin(), order.begin() + std::min<size_t>(5, n), order.end(),
                    [&](size_t x, size_t y) { return ms[x] - resident_ms[x] > ms[y] - resident_ms[y]; });
  out += "\n      waited longest (node: +ms at ms):";
  for (size_t j = 0; j < std::min<size_t>(5, n); ++j) {
    const size_t i = order[j];
    out += fmt::format(" {} {}: +{:.2f} at {:.2f};", i,
                       i < t.node_names.size() ? t.node_names[i] : std::string("?"),
                       ms[i] - resident_ms[i], t.node_end_ms[i]);
  }
  return out;
}

// Steps of w within `budget` (UINT64_MAX: none) on a fresh allocator and executor.
// `spread`: the streamed set planned on the clock (Note [spreading copies]), else by reuse alone.
Row time_steps(Backend& b, bench::Workload& w, uint64_t budget, int steps,
               const std::vector<double>* resident_node_ms, double bw, bool spread) {
  Row row;
  Allocator alloc(b, budget == UINT64_MAX ? Allocator::kUnlimited : budget, eviction_policy());
  Executor ex(b, alloc, executor_policies_default(b));
  ResidencyOptions o = ex.residency_options();
  o.spread = spread;
  ex.set_residency_options(o);
  w.weights->bind(&b, &alloc);
  const uint64_t driver_base = driver_used(b);
  for (int i = 0; i < 3; ++i) {  // warm-up: uploads, pinned copies, capture
    auto out = ex.run(w.graph, w.host_inputs(), *w.weights);
    if (!out.ok()) {
      row.residency = "failed: " + out.status().str();
      w.weights->release_device();
      return row;
    }
  }
  alloc.reset_peak();
  uint64_t driver_peak = 0;
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    auto out = ex.run(w.graph, w.host_inputs(), *w.weights);
    ms.push_back(ms_since(t0));
    driver_peak = std::max(driver_peak, driver_used(b));
  }
  row.ms = median(ms);
  row.ms_min = *std::min_element(ms.begin(), ms.end());
  row.ms_max = *std::max_element(ms.begin(), ms.end());
  const ResidencyPlan& r = ex.last_residency();
  row.streamed = r.streamed_bytes;
  row.resident_frac = double(r.resident_bytes) / double(r.resident_bytes + r.streamed_bytes);
  row.residency = ex.last_residency_text();
  if (r.streams())
    row.residency += fmt::format(" [residency plan made once in {:.1f} ms of CPU]",
                                 ex.residency_plan_ms());
  row.alloc_peak = alloc.total().peak;
  row.driver_peak = driver_peak > driver_base ? driver_peak - driver_base : 0;
  ex.set_node_timing(true);  // one more run, timed node by node (Note [streaming timeline])
  if (ex.run(w.graph, w.host_inputs(), *w.weights).ok()) {
    row.node_ms = ex.node_ms();
    if (resident_node_ms && r.streams())
      row.timeline = timeline_text(ex.last_timeline(), row.node_ms, *resident_node_ms, bw);
  }
  w.weights->release_device();
  w.weights->bind(nullptr, nullptr);
  return row;
}

// BENCH_STREAMING_BUDGETS=75,50 times only those rows (after the resident one); default all.
std::vector<int> budgets_wanted() {
  const char* e = std::getenv("BENCH_STREAMING_BUDGETS");
  std::vector<int> out;
  for (const char* p = e; p && *p;) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;
    out.push_back(int(v));
    p = *end == ',' ? end + 1 : end;
  }
  if (out.empty()) out = {100, 75, 50, 25, 0};
  return out;
}

// `reuse_rows`: beside each partly resident row, the same budget with the streamed set planned by
// reuse alone.
void unet_rows(Backend& b, bench::Workload& w, int steps, double bw, std::vector<Row>& rows,
               bool reuse_rows = true) {
  Allocator a(b, Allocator::kUnlimited, eviction_policy());
  Executor probe(b, a, executor_policies_default(b));
  auto c = probe.compile(w.graph);
  if (!c.ok()) {
    std::printf("%s: %s\n", w.name.c_str(), c.status().str().c_str());
    return;
  }
  const uint64_t arena = (*c)->plan->arena_bytes, weights = (*c)->weight_bytes;
  uint64_t largest = 0;
  for (const WeightUse& u : (*c)->weights) largest = std::max(largest, u.bytes);
  const uint64_t ring = ResidencyOptions().depth * largest;
  std::printf("%s: weights %s, arena %s, ring %s\n", w.name.c_str(), bytes_format(weights).c_str(),
              bytes_format(arena).c_str(), bytes_format(ring).c_str());
  Row resident = time_steps(b, w, UINT64_MAX, steps, nullptr, bw, false);
  resident.work = w.name;
  resident.target = "resident (no budget)";
  resident.floor_ms = resident.ms;
  rows.push_back(resident);
  // One row within `budget`: spread (the default plans) or the streamed set by reuse alone.
  auto row_at = [&](uint64_t budget, bool spread, std::string target) {
    Row row = time_steps(b, w, budget, steps, &resident.node_ms, bw, spread);
    row.work = w.name;
    row.target = std::move(target);
    row.floor_ms = std::max(resident.ms, bw > 0 ? double(row.streamed) / bw * 1e3 : 0.0);
    rows.push_back(row);
    std::fflush(stdout);
  };
  for (int pct : budgets_wanted()) {
    const uint64_t room = pct == 100 ? weights : uint64_t(double(weights) * pct / 100.0) + ring;
    row_at(arena + room, true,
           fmt::format("{} % resident (budget {})", pct, bytes_format(arena + room)));
    if (reuse_rows && pct > 0 && pct < 100)
      row_at(arena + room, false, fmt::format("{} % (streamed set by reuse alone)", pct));
  }
}

void vae_rows(Backend& b, DType dt, int steps, std::vector<Row>& rows) {
  SDVAE m(vae_config_sd(), dt, "");
  auto g = vae_decode_graph(m.config, 1, 8, 8, dt);
  if (!g.ok()) return;
  make_model_random_weights(*g, 2, m.store);
  HostTensor latent = bench::filled(DType::F32, Shape{1, 4, 256, 256}, 1.0f);
  HostTensor images[2];
  for (int tiled = 0; tiled < 2; ++tiled) {
    Allocator alloc(b, tiled ? (1ull << 30) : Allocator::kUnlimited, eviction_policy());
    Executor ex(b, alloc, executor_policies_default(b));
    m.store.bind(&b, &alloc);
    Row row;
    row.work = "SD VAE decode 2048x2048 b1";
    std::vector<double> ms;
    const uint64_t driver_base = driver_used(b);
    uint64_t driver_peak = 0;
    for (int i = 0; i < steps + 1; ++i) {
      const auto t0 = Clock::now();
      auto out = vae_decode_auto(ex, m, latent);
      if (!out.ok()) {
        row.residency = "failed: " + out.status().str();
        break;
      }
      if (i > 0) ms.push_back(ms_since(t0));  // the first run plans and uploads
      if (i == 0) alloc.reset_peak();
      driver_peak = std::max(driver_peak, driver_used(b));
      row.residency = out->decision.reason;
      images[tiled] = std::move(out->image);
    }
    row.target = tiled ? "1 GiB budget" : "no budget (untiled)";
    if (!ms.empty()) {
      row.ms = median(ms);
      row.ms_min = *std::min_element(ms.begin(), ms.end());
      row.ms_max = *std::max_element(ms.begin(), ms.end());
    }
    row.floor_ms = tiled ? rows.back().ms : row.ms;
    row.alloc_peak = alloc.total().peak;
    row.driver_peak = driver_peak > driver_base ? driver_peak - driver_base : 0;
    row.resident_frac = 1;
    rows.push_back(row);
    m.store.release_device();
    m.store.bind(nullptr, nullptr);
  }
  if (images[0].numel() && images[0].numel() == images[1].numel()) {
    float most = 0;
    for (int64_t i = 0; i < images[0].numel(); ++i)
      most = std::max(most, std::fabs(images[0].f32()[i] - images[1].f32()[i]));
    std::printf("VAE 2048x2048 tiled vs untiled: largest pixel difference %.4f (of a [-1, 1] "
                "range, %.2f in 8-bit levels)\n",
                double(most), double(most) * 127.5);
  }
}

// Model switches under a budget that holds one model's weights (Note [weight block cache]): two
// UNets of the same shapes (the second a copy of the first's weights) run in turn, so every run
// evicts the other model's weights and uploads its own. Cache on: the new weights land in the old
// blocks; off (cap 0): every eviction is a device free and every upload a device allocation.
// Per mode: the median time of a run after a switch, against a run of the same model again.
void switch_rows(Backend& b, bench::Workload& w, int steps) {
  WeightSet other;
  for (const std::string& n : w.weights->names()) other.put(n, w.weights->find(n)->clone());
  Allocator probe_alloc(b, Allocator::kUnlimited, eviction_policy());
  Executor probe(b, probe_alloc, executor_policies_default(b));
  auto c = probe.compile(w.graph);
  if (!c.ok()) return;
  const uint64_t budget = (*c)->plan->arena_bytes + (*c)->weight_bytes * 11 / 10 + (64ull << 20);
  std::printf("\n%s model switches, budget %s (one model's weights and the arena):\n\n"
              "| weight block cache | run after a switch ms | same model again ms | switch costs ms "
              "| device allocations per switch | blocks reused per switch |\n|---|---|---|---|---|---|\n",
              w.name.c_str(), bytes_format(budget).c_str());
  for (const bool cache : {true, false}) {
    Allocator alloc(b, budget, eviction_policy());
    if (!cache) alloc.set_weight_cache_cap(0);
    Executor ex(b, alloc, executor_policies_default(b));
    w.weights->bind(&b, &alloc);
    other.bind(&b, &alloc);
    WeightSet* sets[2] = {w.weights.get(), &other};
    std::vector<double> switched, again;
    const int rounds = std::max(3, steps / 2);
    uint64_t allocs = 0, reused = 0;
    for (int i = 0; i < rounds + 1; ++i) {
      const PoolStats before = alloc.stats(Pool::WEIGHTS);
      auto t0 = Clock::now();
      auto out = ex.run(w.graph, w.host_inputs(), *sets[i % 2]);
      const double ms = ms_since(t0);
      const PoolStats after = alloc.stats(Pool::WEIGHTS);
      t0 = Clock::now();
      auto same = ex.run(w.graph, w.host_inputs(), *sets[i % 2]);
      const double ms_again = ms_since(t0);
      if (!out.ok() || !same.ok()) {
        std::printf("| %s | failed: %s |\n", cache ? "on" : "off",
                    (out.ok() ? same.status() : out.status()).str().c_str());
        break;
      }
      if (i == 0) continue;  // the first run uploads into an empty budget
      switched.push_back(ms);
      again.push_back(ms_again);
      allocs += after.allocations - before.allocations;
      reused += after.reused - before.reused;
    }
    w.weights->bind(nullptr, nullptr);
    other.bind(nullptr, nullptr);
    if (switched.empty()) continue;
    const double n = double(switched.size());
    std::printf("| %s | %.1f | %.1f | %.1f | %.0f | %.0f |\n", cache ? "on" : "off",
                median(switched), median(again), median(switched) - median(again),
                double(allocs) / n, double(reused) / n);
  }
}

// fp8 weights (issue 38): the SDXL step with its weights in f16, in fp8 (dequantized) and in
// fp8 _fast (fp8 GEMMs), each resident; fp8 at every budget against its floor; and f16 and fp8
// within one 2 GiB budget.
void fp8_rows(Backend& b, DType dt, int steps, double bw, std::vector<Row>& rows) {
  auto f16 = bench::workload_sdxl(dt);
  if (!f16.ok()) return;
  Row plain = time_steps(b, *f16, UINT64_MAX, steps, nullptr, bw, false);
  plain.work = f16->name;
  plain.target = "resident (no budget)";
  plain.floor_ms = plain.ms;
  rows.push_back(plain);
  constexpr uint64_t kFixed = 2ull << 30;
  Row plain_fixed = time_steps(b, *f16, kFixed, steps, &plain.node_ms, bw, true);
  f16->weights.reset();  // the f16 copies go before the fp8 ones are made
  auto fp8 = bench::workload_sdxl_fp8(dt);
  if (!fp8.ok()) return;
  const size_t fp8_resident = rows.size();  // unet_rows' first row: fp8, resident
  unet_rows(b, *fp8, steps, bw, rows);
  if (rows.size() <= fp8_resident) return;
  Row fp8_fixed = time_steps(b, *fp8, kFixed, steps, nullptr, bw, true);
  for (Row* r : {&plain_fixed, &fp8_fixed}) {
    r->work = r == &plain_fixed ? f16->name : fp8->name;
    r->target = "2 GiB budget";
    r->floor_ms = std::max(r == &plain_fixed ? plain.ms : rows[fp8_resident].ms,
                           bw > 0 ? double(r->streamed) / bw * 1e3 : 0.0);
    rows.push_back(*r);
  }
  std::printf("fp8 / f16 resident: %.3fx (%.2f / %.2f ms)\n", rows[fp8_resident].ms / plain.ms,
              rows[fp8_resident].ms, plain.ms);
  if (auto fast = bench::workload_sdxl_fp8_fast(*fp8, dt); fast.ok()) {
    Row r = time_steps(b, *fast, UINT64_MAX, steps, nullptr, bw, false);
    r.work = fast->name;
    r.target = "resident (no budget)";
    r.floor_ms = r.ms;
    rows.push_back(r);
    std::printf("fp8 _fast / f16 resident: %.3fx (%.2f / %.2f ms)\n", r.ms / plain.ms, r.ms,
                plain.ms);
  }
  std::printf("fp8 / f16 within 2 GiB: %.3fx (%.2f / %.2f ms)\n", fp8_fixed.ms / plain_fixed.ms,
              fp8_fixed.ms, plain_fixed.ms);
}

// Flux.1-dev (issues 38 and 39): the planned arena and weight bytes of w's step (0, 0: no plan).
std::pair<uint64_t, uint64_t> step_sizes(Backend& b, const bench::Workload& w) {
  Allocator a(b, Allocator::kUnlimited, eviction_policy());
  Executor probe(b, a, executor_policies_default(b));
  auto c = probe.compile(w.graph);
  if (!c.ok()) return {0, 0};
  return {(*c)->plan->arena_bytes, (*c)->weight_bytes};
}

// A row of w within `budget` (UINT64_MAX: resident) against the floor max(`resident_ms`,
// streamed bytes / bandwidth); resident_ms 0: the row is its own resident step.
Row flux_row(Backend& b, bench::Workload& w, uint64_t budget, int steps, double bw,
             double resident_ms, std::string target) {
  Row r = time_steps(b, w, budget, steps, nullptr, bw, true);
  r.work = w.name;
  r.target = std::move(target);
  r.floor_ms = std::max(resident_ms > 0 ? resident_ms : r.ms,
                        bw > 0 ? double(r.streamed) / bw * 1e3 : 0.0);
  std::printf("  %s / %s: %.2f ms (floor %.2f)\n", r.work.c_str(), r.target.c_str(), r.ms,
              r.floor_ms);
  std::fflush(stdout);
  return r;
}

// Each streamed row from `first` on against its floor and the goal of issues 39 and 40 (<= 1.15x).
void floor_summary(const char* family, const std::vector<Row>& rows, size_t first) {
  std::printf("\n%s streamed rows against their floors (goal <= 1.15x):\n", family);
  for (size_t i = first; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (r.streamed == 0 || r.floor_ms <= 0) continue;
    const double x = r.ms / r.floor_ms;
    std::printf("  %s / %s: %.3fx (%.2f / %.2f ms, %s per step) %s\n", r.work.c_str(),
                r.target.c_str(), x, r.ms, r.floor_ms, bytes_format(r.streamed).c_str(),
                x <= 1.15 ? "met" : "MISSED");
  }
}

// The fixed budget both weight formats run within: 8 GiB at full size (a third of the bf16
// weights); tiny: the arena and the same third of its weights.
uint64_t flux_fixed_budget(const bench::FluxBenchSize& size, uint64_t arena, uint64_t weights) {
  return size.tiny ? arena + weights / 3 : (8ull << 30);
}

// The fp8 half of flux_rows: `plain`'s weights stored in fp8 e4m3 (its own bf16 copies dropped
// once made), resident (dequantized and `_fast`), at 75/50/25/0 % resident, and `plain` and fp8
// within one fixed budget; `plain_ms`: plain's resident step.
void flux_fp8_rows(Backend& b, const bench::FluxBenchSize& size, DType dt, int steps, double bw,
                   bench::Workload& plain, double plain_ms, std::vector<Row>& rows) {
  const auto [arena, weights] = step_sizes(b, plain);
  const uint64_t fixed = flux_fixed_budget(size, arena, weights);
  const std::string fixed_name = fmt::format("fixed budget {}", bytes_format(fixed));
  const Row plain_fixed = flux_row(b, plain, fixed, steps, bw, plain_ms, fixed_name);
  rows.push_back(plain_fixed);
  const auto t0 = Clock::now();
  auto q = bench::workload_flux_fp8(size, plain, dt, false, nullptr);
  if (!q.ok()) {
    std::printf("Flux fp8 workload: %s\n", q.status().str().c_str());
    return;
  }
  auto fast = bench::workload_flux_fp8(size, plain, dt, true, q->weights);
  q->name += fmt::format(", {}", dtype_name(dt));
  if (fast.ok()) fast->name += fmt::format(", {}", dtype_name(dt));
  plain.weights.reset();  // the bf16 copies go before the fp8 rows pin theirs
  std::printf("%s: stored in fp8 in %.1f s\n", q->name.c_str(), ms_since(t0) / 1e3);
  const size_t fp8_first = rows.size();
  unet_rows(b, *q, steps, bw, rows, false);
  if (rows.size() <= fp8_first || rows[fp8_first].ms <= 0) return;  // its row says why
  const double fp8_ms = rows[fp8_first].ms;
  const Row fp8_fixed = flux_row(b, *q, fixed, steps, bw, fp8_ms, fixed_name);
  rows.push_back(fp8_fixed);
  const char* d = dtype_name(dt);
  std::printf("\nFlux fp8 / %s resident: %.3fx (%.2f / %.2f ms; issue 38's SDXL goal <= 1.1x)\n",
              d, fp8_ms / plain_ms, fp8_ms, plain_ms);
  std::printf("Flux fp8 / %s within %s: %.3fx (%.2f / %.2f ms; SDXL goal <= 0.55x)\n", d,
              bytes_format(fixed).c_str(), fp8_fixed.ms / plain_fixed.ms, fp8_fixed.ms,
              plain_fixed.ms);
  if (!fast.ok()) return;
  rows.push_back(flux_row(b, *fast, UINT64_MAX, steps, bw, 0, "resident (no budget)"));
  std::printf("Flux fp8 _fast / %s resident: %.3fx (%.2f / %.2f ms; SDXL goal <= 0.8x)\n", d,
              rows.back().ms / plain_ms, rows.back().ms, plain_ms);
}

// The Flux.1-dev DiT step (bench_flux.h), its weights made once and shared by every row:
// `streamed`: bf16 resident and at 75/50/25/0 % resident against its floor; `fp8`: flux_fp8_rows
// (the bf16 resident row first when not streamed). Then every streamed row against its floor.
void flux_rows(Backend& b, const bench::FluxBenchSize& size, DType dt, int steps, double bw,
               bool streamed, bool fp8, std::vector<Row>& rows) {
  const auto t0 = Clock::now();
  auto plain = bench::workload_flux_sized(size, dt);
  if (!plain.ok()) {
    std::printf("Flux workload: %s\n", plain.status().str().c_str());
    return;
  }
  plain->name += fmt::format(", {}", dtype_name(dt));
  std::printf("%s: random weights made in %.1f s\n", plain->name.c_str(), ms_since(t0) / 1e3);
  const size_t first = rows.size();
  if (streamed)
    unet_rows(b, *plain, steps, bw, rows, false);
  else
    rows.push_back(flux_row(b, *plain, UINT64_MAX, steps, bw, 0, "resident (no budget)"));
  if (fp8 && rows.size() > first && rows[first].ms > 0)  // else failed: its row says why
    flux_fp8_rows(b, size, dt, steps, bw, *plain, rows[first].ms, rows);
  floor_summary("Flux", rows, first);
}

// The Z-Image Turbo DiT step (bench_zimage.h, issue 40): resident and at each budget of
// budgets_wanted() against its floor, then every streamed row against the goal.
void zimage_rows(Backend& b, const bench::ZImageBenchSize& size, DType dt, int steps, double bw,
                 std::vector<Row>& rows) {
  const auto t0 = Clock::now();
  auto w = bench::workload_zimage(size, dt);
  if (!w.ok()) {
    std::printf("Z-Image workload: %s\n", w.status().str().c_str());
    return;
  }
  w->name += fmt::format(", {}", dtype_name(dt));
  std::printf("%s: random weights made in %.1f s\n", w->name.c_str(), ms_since(t0) / 1e3);
  const size_t first = rows.size();
  unet_rows(b, *w, steps, bw, rows, false);
  floor_summary("Z-Image", rows, first);
}

}  // namespace
}  // namespace hr

int main(int argc, char** argv) {
  using namespace hr;
  const bench::Args args = bench::args_parse(argc, argv, 10);
  std::unique_ptr<Backend> backend = bench::backend_for(args.device);
  if (!backend) return 0;
  if (backend->memory_is_host())
    std::printf("note: on the CPU 'streaming' copies host memory into staging slots; the "
                "figures show the cost of the copies, not of a bus\n");
  const DType dt = *dtype_from_name(args.dtype);
  const double bw = h2d_bandwidth(*backend);
  std::printf("device %s, %s, %d timed steps (median, after 3 warm-up runs); host-to-device "
              "bandwidth (pinned, measured now): %.1f GB/s\n\n",
              backend->info().name.c_str(), args.dtype.c_str(), args.steps, bw / 1e9);
  std::vector<Row> rows;
  if (args.only.empty() || args.only == "sd15") {
    auto w = bench::workload_sd15(dt);
    if (w.ok()) unet_rows(*backend, *w, args.steps, bw, rows);
  }
  if (args.only.empty() || args.only == "sdxl") {
    auto w = bench::workload_sdxl(dt);
    if (w.ok()) unet_rows(*backend, *w, args.steps, bw, rows);
  }
  if (args.only.empty() || args.only == "vae") vae_rows(*backend, dt, std::max(2, args.steps / 4), rows);
  if (args.only == "fp8") fp8_rows(*backend, dt, args.steps, bw, rows);
  if (args.only == "flux" || args.only == "flux-fp8" || args.only == "flux-all")
    flux_rows(*backend, bench::flux_bench_size(args.size), dt, args.steps, bw,
              args.only != "flux-fp8", args.only != "flux", rows);
  if (args.only == "zimage")
    zimage_rows(*backend, bench::zimage_bench_size(args.size), dt, args.steps, bw, rows);
  if (args.only == "switch") {  // not part of the default run: it needs two models in host memory
    auto w = bench::workload_sdxl(dt);
    if (w.ok()) switch_rows(*backend, *w, args.steps);
    return 0;
  }
  std::printf("\n| work | budget | ms (min-max) | vs resident | resident | streamed/step | floor ms "
              "| vs floor | allocator-level peak | driver-level peak (delta) |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  double resident_ms = 0;
  for (const Row& r : rows) {
    if (r.target.rfind("resident", 0) == 0 || r.target.rfind("no budget", 0) == 0)
      resident_ms = r.ms;
    std::printf("| %s | %s | %.2f (%.2f-%.2f) | %.2fx | %.0f %% | %s | %.2f | %.2fx | %s | %s |\n",
                r.work.c_str(), r.target.c_str(), r.ms, r.ms_min, r.ms_max,
                resident_ms > 0 ? r.ms / resident_ms : 0.0, r.resident_frac * 100,
                bytes_format(r.streamed).c_str(), r.floor_ms,
                r.floor_ms > 0 ? r.ms / r.floor_ms : 0.0, bytes_format(r.alloc_peak).c_str(),
                bytes_format(r.driver_peak).c_str());
  }
  for (const Row& r : rows) {
    std::printf("  %s / %s: %s\n", r.work.c_str(), r.target.c_str(), r.residency.c_str());
    if (!r.timeline.empty()) std::printf("      %s\n", r.timeline.c_str());
  }
  std::printf("\nfloor = max(resident step, streamed bytes / host-to-device bandwidth), both "
              "measured in this run. Allocator level = headroom's own counters (weights, arena, "
              "staging ring); driver level = the growth of cudaMemGetInfo's used memory during the "
              "timed steps over before the row (all processes).\n");
  return 0;
}
