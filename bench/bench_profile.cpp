// Where a UNet step (or VAE decode) spends its time on the device, by op class, against the
// device's ceilings measured in the same run: a large f16 GEMM (TFLOP/s) and a large
// device-to-device copy (GB/s, bytes read + written).
//
//   bench_profile [--device cuda|cpu] [--dtype f16|bf16|f32]
//                 [--only sd15|sdxl|sdxl_fp8|sdxl_fp8_fast|vae512|vae1024|flux] [--steps N]
//                 [--top K]
//
// (--only matches by substring: sdxl_fp8 profiles the f16 SDXL step and its fp8 weights
// dequantized, sdxl_fp8_fast those and the fp8 _fast step too, in one run; flux runs only when
// asked.)
//
// For each workload: the step time as it runs (captured replay where the backend can), the
// time without capture, and one run with a timing event after every node (Note [node timing] in
// graph/executor.h). Per class: summed node time, share of the step, achieved TFLOP/s (op_flops)
// and GB/s (bytes of every input and the output), each as a fraction of the ceiling. "gaps" is
// the step time minus the summed node time: launch and scheduling overhead between kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "bench_common.h"
#include "bench_flux.h"
#include "graph/planner.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"

using namespace hr;

namespace {

using bench::median;

struct Ceilings {
  double gemm_tflops = 0, copy_gbs = 0;
};

// Times `body` `reps` times between timing events on the default stream (ms per call).
template <typename F>
Result<double> time_device(Backend& b, int reps, F&& body) {
  Stream* s = b.default_stream();
  HR_TRY(body());  // warm-up (algorithm choice)
  HR_ASSIGN_OR_RETURN(auto e0, b.timing_event_create());
  HR_ASSIGN_OR_RETURN(auto e1, b.timing_event_create());
  HR_TRY(b.event_record(e0.get(), s));
  for (int i = 0; i < reps; ++i) HR_TRY(body());
  HR_TRY(b.event_record(e1.get(), s));
  HR_TRY(b.stream_sync(s));
  HR_ASSIGN_OR_RETURN(double ms, b.event_elapsed_ms(e0.get(), e1.get()));
  return ms / reps;
}

Result<Ceilings> measure_ceilings(Backend& b, Allocator& alloc, DType dt, bool small) {
  Ceilings c;
  const int64_t n = small ? 1024 : 8192;
  const TensorDesc m{dt, Shape{n, n}};
  HR_ASSIGN_OR_RETURN(DeviceBuffer x, alloc.allocate(m.bytes(), Pool::OTHER, "ceiling gemm x"));
  HR_ASSIGN_OR_RETURN(DeviceBuffer w, alloc.allocate(m.bytes(), Pool::OTHER, "ceiling gemm w"));
  HR_ASSIGN_OR_RETURN(DeviceBuffer y, alloc.allocate(m.bytes(), Pool::OTHER, "ceiling gemm y"));
  HR_TRY(b.memset_zero(x.data(), m.bytes(), nullptr));
  HR_TRY(b.memset_zero(w.data(), m.bytes(), nullptr));
  OpParams p;
  TensorDesc in_d[2] = {m, m};
  const size_t ws_bytes = b.op_workspace(OpKind::LINEAR, p, in_d, m);
  DeviceBuffer ws;
  if (ws_bytes) {
    HR_ASSIGN_OR_RETURN(ws, alloc.allocate(ws_bytes, Pool::OTHER, "ceiling gemm workspace"));
  }
  TensorRef ins[2] = {TensorRef{m, x.data()}, TensorRef{m, w.data()}};
  OpCall call;
  call.kind = OpKind::LINEAR;
  call.params = &p;
  call.inputs = ins;
  call.output = TensorRef{m, y.data()};
  call.workspace = ws_bytes ? ws.data() : nullptr;
  call.workspace_bytes = ws_bytes;
  HR_ASSIGN_OR_RETURN(double gemm_ms, time_device(b, small ? 3 : 20, [&] { return b.op_run(call, b.default_stream()); }));
  c.gemm_tflops = 2.0 * double(n) * double(n) * double(n) / (gemm_ms * 1e-3) / 1e12;

  const size_t bytes = small ? (size_t(64) << 20) : (size_t(1) << 30);
  HR_ASSIGN_OR_RETURN(DeviceBuffer a, alloc.allocate(bytes, Pool::OTHER, "ceiling copy a"));
  HR_ASSIGN_OR_RETURN(DeviceBuffer d, alloc.allocate(bytes, Pool::OTHER, "ceiling copy b"));
  HR_TRY(b.memset_zero(a.data(), bytes, nullptr));
  HR_ASSIGN_OR_RETURN(double copy_ms, time_device(b, small ? 3 : 20, [&] {
    return b.copy_d2d(d.data(), a.data(), bytes, b.default_stream());
  }));
  c.copy_gbs = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  return c;
}

// The class of node n of g: by op, with fp8 weights' casts apart (Note [fp8 weights] in
// graph/graph.h): a dequantizing CAST (its input a stored weight), the `_fast` path's activation
// CAST to e4m3, and its fp8 GEMMs (Note [fp8 linear] in graph/pass_fp8.cpp).
const char* op_class(const Graph& g, const Node& n) {
  if (n.kind == OpKind::CAST && g.value(n.inputs[0]).kind == ValueKind::WEIGHT)
    return "fp8 dequantize";
  if (n.kind == OpKind::CAST && n.params.dtype == DType::F8_E4M3) return "fp8 activation cast";
  switch (n.kind) {
    case OpKind::LINEAR_FP8: return "fp8 GEMM";
    case OpKind::CONV2D: return "convolution";
    case OpKind::LINEAR:
    case OpKind::MATMUL: return "GEMM";
    case OpKind::ATTENTION: return "attention";
    case OpKind::GROUP_NORM:
    case OpKind::LAYER_NORM:
    case OpKind::RMS_NORM:
    case OpKind::SOFTMAX: return "normalisation";
    case OpKind::CONCAT:
    case OpKind::SLICE:
    case OpKind::PERMUTE:
    case OpKind::RESHAPE:
    case OpKind::COPY:
    case OpKind::UPSAMPLE_NEAREST: return "copies/layout";
    default: return "elementwise";
  }
}

struct Agg {
  double ms = 0, flops = 0, bytes = 0;
  int nodes = 0;
};

// A node's role: its op and name without the block indices and the top-level container, e.g.
// "linear attn2.to_k" for output_blocks.5.1.transformer_blocks.1.attn2.to_k (fused nodes: the
// first name of the '+'-joined ones). Sums over roles find costs spread over many small nodes
// (SDXL's 140 context K/V projections were 1.4 ms at ~11 us each).
std::string node_role(const Node& n) {
  const std::string first = n.name.substr(0, n.name.find('+'));
  std::string role;
  size_t start = 0;
  for (int seg = 0; start <= first.size(); ++seg) {
    const size_t dot = std::min(first.find('.', start), first.size());
    const std::string part = first.substr(start, dot - start);
    const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    const bool container = seg == 0 || part == "transformer_blocks";
    if (!numeric && !container && !part.empty()) role += (role.empty() ? "" : ".") + part;
    start = dot + 1;
  }
  return std::string(op_name(n.kind)) + " " + (role.empty() ? first : role);
}

void print_roles(const Graph& g, const std::vector<double>& node_ms, int top) {
  std::map<std::string, Agg> roles;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    Agg& a = roles[node_role(g.nodes()[i])];
    a.ms += node_ms[i];
    a.nodes += 1;
  }
  std::vector<std::pair<std::string, Agg>> v(roles.begin(), roles.end());
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
  std::printf("\nby role (summed node time, nodes x mean per node):\n");
  for (int k = 0; k < top && k < int(v.size()); ++k) {
    const Agg& a = v[size_t(k)].second;
    std::printf("  %7.3f ms  %4d x %6.1f us  %s\n", a.ms, a.nodes, 1e3 * a.ms / a.nodes,
                v[size_t(k)].first.c_str());
  }
}

void profile(Backend& b, Allocator& alloc, const bench::Workload& w, const Ceilings& ceil,
             int steps, int top) {
  Executor ex(b, alloc, executor_policies_default(b));
  w.weights->bind(&b, &alloc);
  const HostInputs in = w.host_inputs();
  auto timed_runs = [&](int n) -> std::vector<double> {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto out = ex.run(w.graph, in, *w.weights);
      if (!out.ok()) {
        std::printf("%s: %s\n", w.name.c_str(), out.status().str().c_str());
        return {};
      }
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return ms;
  };
  if (timed_runs(3).empty()) return;  // warm-up: uploads, algorithm choice, capture
  alloc.reset_peak();
  const double step_ms = median(timed_runs(steps));
  const double alloc_peak = double(alloc.total().peak) / double(1ull << 30);
  ex.set_capture(false);
  timed_runs(1);
  const double plain_ms = median(timed_runs(std::max(3, steps / 2)));
  ex.set_capture(true);
  ex.set_node_timing(true);
  timed_runs(2);
  std::vector<double> node_ms = ex.node_ms();
  ex.set_node_timing(false);
  auto compiled = ex.compile(w.graph);
  if (!compiled.ok() || node_ms.size() != (*compiled)->graph.nodes().size()) {
    std::printf("%s: no node timings\n", w.name.c_str());
    return;
  }
  const Graph& g = (*compiled)->graph;

  std::map<std::string, Agg> by_class, by_kind;
  double total = 0;
  struct Top { double ms; size_t node; };
  std::vector<Top> tops;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if ((*compiled)->plan->nodes[i].view) continue;
    std::vector<TensorDesc> descs;
    double bytes = double(g.desc(n.output).bytes());
    for (ValueId x : n.inputs) {
      descs.push_back(g.desc(x));
      bytes += double(g.desc(x).bytes());
    }
    const double flops = op_flops(n.kind, n.params, descs, g.desc(n.output));
    for (Agg* a : {&by_class[op_class(g, n)], &by_kind[op_name(n.kind)]}) {
      a->ms += node_ms[i];
      a->flops += flops;
      a->bytes += bytes;
      a->nodes += 1;
    }
    total += node_ms[i];
    tops.push_back({node_ms[i], i});
  }
  std::printf("\n## %s\n\nstep %.2f ms as it runs (%s), %.2f ms without capture; %zu nodes after "
              "passes (%zu as built); allocator-level peak %.2f GiB; summed node time %.2f ms\n\n",
              w.name.c_str(), step_ms, b.capture_supported() ? "captured replay" : "plain",
              plain_ms, g.nodes().size(), w.graph.nodes().size(), alloc_peak, total);
  // Shares are of the summed node time: each timed node also carries its timing event, so the
  // sum can exceed the captured step; the step's launch gaps are what the sum does not cover.
  std::printf("| class | nodes | ms | share | TFLOP/s | of GEMM ceiling | GB/s | of copy ceiling |\n"
              "|---|---|---|---|---|---|---|---|\n");
  auto row = [&](const std::string& name, const Agg& a) {
    const double s = a.ms * 1e-3;
    const double tf = s > 0 ? a.flops / s / 1e12 : 0, gb = s > 0 ? a.bytes / s / 1e9 : 0;
    std::printf("| %s | %d | %.3f | %.1f%% | %s | %s | %.0f | %.0f%% |\n", name.c_str(), a.nodes,
                a.ms, 100.0 * a.ms / total, a.flops > 0 ? fmt::format("{:.1f}", tf).c_str() : "-",
                a.flops > 0 ? fmt::format("{:.0f}%", 100.0 * tf / ceil.gemm_tflops).c_str() : "-",
                gb, 100.0 * gb / ceil.copy_gbs);
  };
  std::vector<std::pair<std::string, Agg>> classes(by_class.begin(), by_class.end());
  std::sort(classes.begin(), classes.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
  for (auto& [k, a] : classes) row(k, a);
  std::printf("\nlaunch gaps: captured step - summed node time = %.3f ms (%s); without capture "
              "the host's launches add %.3f ms per step (%.1f%% of the uncaptured step).\n\n",
              step_ms - total,
              step_ms >= total ? "idle time between kernels"
                               : "negative: the per-node timing events cost more than the gaps",
              plain_ms - step_ms, 100.0 * (plain_ms - step_ms) / plain_ms);
  std::printf("by op: ");
  std::vector<std::pair<std::string, Agg>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
  for (auto& [k, a] : kinds) std::printf("%s %d x %.3f ms; ", k.c_str(), a.nodes, a.ms);
  std::printf("\n");
  print_roles(g, node_ms, std::max(top, 25));
  std::printf("\nslowest nodes:\n");
  std::sort(tops.begin(), tops.end(), [](const Top& a, const Top& b) { return a.ms > b.ms; });
  for (int k = 0; k < top && k < int(tops.size()); ++k) {
    const Node& n = g.nodes()[tops[size_t(k)].node];
    std::string shapes;
    for (ValueId x : n.inputs) shapes += (shapes.empty() ? "" : ", ") + g.desc(x).str();
    std::printf("  %.3f ms  %s %s [%s] (%s)\n", tops[size_t(k)].ms, op_name(n.kind),
                n.params.str(n.kind).c_str(), n.name.c_str(), shapes.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::args_parse(argc, argv, 10);
  const std::string& dtype_s = args.dtype;
  const std::string& only = args.only;
  const int steps = args.steps, top = args.top;
  std::unique_ptr<Backend> backend = bench::backend_for(args.device);
  if (!backend) return 0;
  const DType dt = *dtype_from_name(dtype_s);
  Allocator alloc(*backend, Allocator::kUnlimited, eviction_policy());
  auto ceil = measure_ceilings(*backend, alloc, dt, args.device != "cuda");
  if (!ceil.ok()) {
    std::printf("ceilings: %s\n", ceil.status().str().c_str());
    return 1;
  }
  std::printf("# profile on %s, %s\n\nceilings measured now: %s GEMM %.1f TFLOP/s; device copy "
              "%.0f GB/s (read + write)\n", backend->info().name.c_str(), dtype_s.c_str(),
              dtype_s.c_str(), ceil->gemm_tflops, ceil->copy_gbs);
  auto want = [&](const char* k) { return only.empty() || only.find(k) != std::string::npos; };
  auto run = [&](Result<bench::Workload> w) {
    if (!w.ok()) {
      std::printf("%s\n", w.status().str().c_str());
      return;
    }
    profile(*backend, alloc, *w, *ceil, steps, top);
    w->weights->release_device();
  };
  if (want("sd15")) run(bench::workload_sd15(dt));
  if (want("sdxl")) run(bench::workload_sdxl(dt));
  if (want("sdxl_fp8")) {  // "sdxl_fp8_fast": f16, fp8 (dequantize) and fp8 _fast, one run
    Result<bench::Workload> fp8 = bench::workload_sdxl_fp8(dt);
    if (!fp8.ok()) {
      std::printf("%s\n", fp8.status().str().c_str());
    } else {
      profile(*backend, alloc, *fp8, *ceil, steps, top);
      fp8->weights->release_device();
      if (want("sdxl_fp8_fast")) run(bench::workload_sdxl_fp8_fast(*fp8, dt));
    }
  }
  if (want("vae512")) run(bench::workload_vae(dt, 512, nullptr));
  if (want("vae1024")) run(bench::workload_vae(dt, 1024, nullptr));
  if (only.find("flux") != std::string::npos) run(bench::workload_flux(dt));  // only when asked
  return 0;
}
