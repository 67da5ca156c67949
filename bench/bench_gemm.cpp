// Benchmark of headroom's LINEAR (cuBLASLt, backend/cuda/cuda_gemm.cpp) at every GEMM shape of
// the SD1.5 512^2 and SDXL 1024^2 UNet steps (batch 2, f16) as the executor runs them: the shapes
// come from the UNet graphs after the graph passes (channels-last, fusion), and each unique shape
// runs through Backend::op_run with the bias and the residual addend where the graph has them.
// Per shape: the time as the executor's captured steps run it (one CUDA graph of many launches),
// the time of plain back-to-back launches (host work included), the addend's cost (the same GEMM
// without it) and, for the self-attention to_q/to_k/to_v triples, one GEMM of N = 3C against the
// three. `--json PATH` writes the shapes and times for bench/torch_gemm.py, which times PyTorch's
// F.linear on the same shapes (scripts/device.sh gemm runs both).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "graph/passes.h"
#include "models/make_model.h"
#include "models/sd/unet.h"

namespace hr {
namespace {

// The H200's f16 GEMM ceiling measured by bench_attention (cuBLAS 8192^3): the "at the ceiling"
// totals; the in-run 8192^3 LINEAR is printed next to it.
constexpr double kCeilingTflops = 761.0;
// Timed launches per measurement: enough for ~20 ms of GPU time, within these bounds.
constexpr double kTargetMs = 20.0;
constexpr int kMinReps = 10, kMaxReps = 2000;

// One unique LINEAR shape of a model's step: x [m, k], w [n, k], ?bias [n], ?addend [m, n].
struct LinearShape {
  std::string model;
  int64_t m = 0, n = 0, k = 0;
  bool bias = false, addend = false;
  int count = 0;            // nodes of this shape in one step
  int qkv_triples = 0;      // self-attention to_q/to_k/to_v triples among them (fusable, N = 3k)
  std::string example;      // the first node's name
  double us = 0;            // captured (as the executor's steps run)
  double us_stream = 0;     // back-to-back op_run calls, host work included
  double us_no_addend = 0;  // the same GEMM without the addend (0: no addend)
  double us_qkv_fused = 0;  // n = 3 * k (0: no triples)

  double flop() const { return 2.0 * double(m) * double(n) * double(k); }
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The LINEAR nodes of the UNet step graph after the passes the executor applies on the GPU
// (Note [graph passes] in graph/passes.h), grouped by shape in order of first appearance.
Result<std::vector<LinearShape>> linear_shapes(const std::string& model, const UNetConfig& cfg,
                                               int64_t latent) {
  HR_ASSIGN_OR_RETURN(Graph g0, unet_graph(cfg, 2, latent, latent, 77, DType::F16));
  PassOptions po;
  po.channels_last = true;
  po.fuse = true;
  HR_ASSIGN_OR_RETURN(Graph g, graph_passes(g0, po, nullptr));
  std::vector<LinearShape> out;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, size_t> index;
  for (const Node& nd : g.nodes()) {
    if (nd.kind != OpKind::LINEAR) continue;
    const bool add = nd.params.add_input;
    const TensorDesc& w = g.desc(nd.inputs[1]);
    LinearShape s;
    s.model = model;
    s.k = w.shape[1];
    s.n = w.shape[0];
    s.m = s.k ? g.desc(nd.inputs[0]).numel() / s.k : 0;
    s.bias = nd.inputs.size() - (add ? 1 : 0) > 2;
    s.addend = add;
    const auto key = std::make_tuple(s.m, s.n, s.k, s.bias, s.addend);
    auto it = index.find(key);
    if (it == index.end()) {
      s.example = nd.name;
      it = index.emplace(key, out.size()).first;
      out.push_back(s);
    }
    LinearShape& u = out[it->second];
    ++u.count;
    // to_q of a self-attention: its to_k and to_v have the same shape and input (unet.cpp).
    if (ends_with(nd.name, ".attn1.to_q") && !s.bias && !s.addend && s.n == s.k) ++u.qkv_triples;
  }
  return out;
}

// Device buffers of one LINEAR call with random f16 data (the output zeroed); freed with the
// backend.
class LinearBuffers {
 public:
  LinearBuffers(Backend& b, int64_t m, int64_t n, int64_t k, bool addend, std::mt19937& rng)
      : b_(b) {
    x_ = alloc_random(m * k, 1.0f, rng);
    w_ = alloc_random(n * k, 1.0f / std::sqrt(float(k)), rng);
    bias_ = alloc_random(n, 0.1f, rng);
    if (addend) addend_ = alloc_random(m * n, 1.0f, rng);
    out_ = alloc_random(m * n, 0.0f, rng);
  }
  ~LinearBuffers() {
    for (void* p : owned_) b_.device_free(p);
  }
  LinearBuffers(const LinearBuffers&) = delete;
  LinearBuffers& operator=(const LinearBuffers&) = delete;

  const Status& status() const { return status_; }
  void *x_ = nullptr, *w_ = nullptr, *bias_ = nullptr, *addend_ = nullptr, *out_ = nullptr;

 private:
  // n values uniform in [-scale, scale) as f16 (zeros for scale 0).
  void* alloc_random(int64_t n, float scale, std::mt19937& rng) {
    if (!status_.ok()) return nullptr;
    Result<void*> p = b_.device_alloc(size_t(n) * 2);
    if (!p.ok()) {
      status_ = p.status();
      return nullptr;
    }
    owned_.push_back(*p);
    if (scale == 0.0f) {
      status_ = b_.memset_zero(*p, size_t(n) * 2, nullptr);
      return *p;
    }
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (auto& v : h) v = f32_to_f16(u(rng));
    status_ = b_.copy_h2d(*p, h.data(), h.size() * 2, nullptr);
    if (status_.ok()) status_ = b_.stream_sync(nullptr);
    return *p;
  }

  Backend& b_;
  Status status_;
  std::vector<void*> owned_;
};

struct Times {
  double us = 0, us_stream = 0;
};

// Times LINEAR [m, k] x [n, k]^T on the backend's default stream: warm-up runs (the first
// autotunes, Note [autotuning] in cuda/cuda_ops.h), back-to-back op_run calls, then the same calls
// captured into one CUDA graph and replayed, as the executor's captured steps run them.
class LinearTimer {
 public:
  explicit LinearTimer(Backend& b) : b_(b) {}

  Status init() {
    HR_ASSIGN_OR_RETURN(e0_, b_.timing_event_create());
    HR_ASSIGN_OR_RETURN(e1_, b_.timing_event_create());
    return Status();
  }

  Result<Times> time(int64_t m, int64_t n, int64_t k, bool bias, bool addend, std::mt19937& rng) {
    LinearBuffers buf(b_, m, n, k, addend, rng);
    HR_TRY(buf.status());
    OpParams p;
    p.add_input = addend;
    std::vector<TensorRef> in = {{{DType::F16, Shape{m, k}}, buf.x_},
                                 {{DType::F16, Shape{n, k}}, buf.w_}};
    if (bias) in.push_back({{DType::F16, Shape{n}}, buf.bias_});
    if (addend) in.push_back({{DType::F16, Shape{m, n}}, buf.addend_});
    const TensorRef out{{DType::F16, Shape{m, n}}, buf.out_};
    std::vector<TensorDesc> in_desc;
    for (const TensorRef& t : in) in_desc.push_back(t.desc);
    const size_t ws_bytes = b_.op_workspace(OpKind::LINEAR, p, in_desc, out.desc);
    void* ws = nullptr;
    if (ws_bytes) {
      HR_ASSIGN_OR_RETURN(ws, b_.device_alloc(ws_bytes));
    }
    Result<Times> t = time_call(OpCall{OpKind::LINEAR, &p, in, out, ws, ws_bytes});
    if (ws) b_.device_free(ws);
    return t;
  }

 private:
  Result<double> elapsed_ms(const std::function<Status()>& fn, int reps) {
    Stream* s = b_.default_stream();
    HR_TRY(b_.event_record(e0_.get(), s));
    for (int i = 0; i < reps; ++i) HR_TRY(fn());
    HR_TRY(b_.event_record(e1_.get(), s));
    HR_TRY(b_.event_sync(e1_.get()));
    return b_.event_elapsed_ms(e0_.get(), e1_.get());
  }

  Result<Times> time_call(const OpCall& call) {
    Stream* s = b_.default_stream();
    auto run = [&] { return b_.op_run(call, s); };
    for (int i = 0; i < 3; ++i) HR_TRY(run());
    HR_TRY(b_.stream_sync(s));
    HR_ASSIGN_OR_RETURN(double one, elapsed_ms(run, 1));
    const int reps = std::clamp(int(kTargetMs / std::max(one, 1e-3)), kMinReps, kMaxReps);
    Times t;
    HR_ASSIGN_OR_RETURN(double ms, elapsed_ms(run, reps));
    t.us_stream = ms * 1e3 / reps;

    // Note [captured steps] in graph/executor.h: the step's kernels replay from one launch.
    HR_TRY(b_.capture_begin(s));
    Status st;
    for (int i = 0; i < reps && st.ok(); ++i) st = run();
    Result<std::unique_ptr<CapturedWork>> work = b_.capture_end(s);
    HR_TRY(st);
    if (!work.ok()) return work.status();
    auto replay = [&] { return b_.captured_launch(work->get(), s); };
    HR_TRY(replay());
    HR_ASSIGN_OR_RETURN(ms, elapsed_ms(replay, 3));
    t.us = ms * 1e3 / (3.0 * reps);
    return t;
  }

  Backend& b_;
  std::unique_ptr<Event> e0_, e1_;
};

double tflops(double flop, double us) { return us > 0 ? flop / (us * 1e6) : 0.0; }

std::string flags(const LinearShape& s) {
  std::string f = s.bias ? "bias" : "-";
  if (s.addend) f += "+add";
  return f;
}

// Times every shape of `shapes` (and its variants) and prints the model's table.
Status model_run(LinearTimer& timer, std::vector<LinearShape>& shapes, double ceiling_in_run,
                 std::mt19937& rng) {
  const std::string& model = shapes.front().model;
  std::printf(
      "\n%s: %zu LINEAR shapes | us = captured replay (as the executor's steps run), "
      "stream = back-to-back op_run; no-add = the same GEMM without the addend\n",
      model.c_str(), shapes.size());
  std::printf("%5s %6s %6s %6s %-9s %9s %7s %9s %10s %9s  %s\n", "count", "M", "N", "K", "flags",
              "us", "TF/s", "stream", "count*us", "no-add", "first node");
  double total_us = 0, total_stream = 0, total_flop = 0, addend_cost = 0;
  int nodes = 0;
  for (LinearShape& s : shapes) {
    HR_ASSIGN_OR_RETURN(Times t, timer.time(s.m, s.n, s.k, s.bias, s.addend, rng));
    s.us = t.us;
    s.us_stream = t.us_stream;
    if (s.addend) {
      HR_ASSIGN_OR_RETURN(Times na, timer.time(s.m, s.n, s.k, s.bias, false, rng));
      s.us_no_addend = na.us;
      addend_cost += s.count * (s.us - s.us_no_addend);
    }
    if (s.qkv_triples > 0) {
      HR_ASSIGN_OR_RETURN(Times f, timer.time(s.m, 3 * s.n, s.k, false, false, rng));
      s.us_qkv_fused = f.us;
    }
    std::printf("%5d %6lld %6lld %6lld %-9s %9.2f %7.1f %9.2f %10.1f ", s.count,
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), flags(s).c_str(), s.us, tflops(s.flop(), s.us),
                s.us_stream, s.count * s.us);
    if (s.addend)
      std::printf("%9.2f", s.us_no_addend);
    else
      std::printf("%9s", "");
    std::printf("  %s\n", s.example.c_str());
    total_us += s.count * s.us;
    total_stream += s.count * s.us_stream;
    total_flop += s.count * s.flop();
    nodes += s.count;
  }
  std::printf(
      "%s total: %d LINEAR nodes, %.1f GFLOP: %.3f ms captured (%.0f TF/s), %.3f ms "
      "back-to-back; at %.0f TF/s %.3f ms (%.0f%% of it), at the in-run 8192^3 LINEAR's "
      "%.0f TF/s %.3f ms\n",
      model.c_str(), nodes, total_flop / 1e9, total_us / 1e3, tflops(total_flop, total_us),
      total_stream / 1e3, kCeilingTflops, total_flop / (kCeilingTflops * 1e9),
      100.0 * total_flop / (kCeilingTflops * 1e9) / (total_us / 1e3), ceiling_in_run,
      ceiling_in_run > 0 ? total_flop / (ceiling_in_run * 1e9) : 0.0);
  std::printf("%s addends: their GEMMs take %.3f ms more than without them (count-weighted)\n",
              model.c_str(), addend_cost / 1e3);
  double sep = 0, fused = 0;
  for (const LinearShape& s : shapes) {
    if (s.qkv_triples == 0) continue;
    std::printf(
        "%s qkv M=%lld C=%lld: %d triples, 3 x %.2f = %.2f us separate, %.2f us fused "
        "(N=%lld): fused / 3 separate = %.2f\n",
        model.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.k), s.qkv_triples,
        s.us, 3 * s.us, s.us_qkv_fused, static_cast<long long>(3 * s.n),
        s.us_qkv_fused / (3 * s.us));
    sep += s.qkv_triples * 3 * s.us;
    fused += s.qkv_triples * s.us_qkv_fused;
  }
  if (sep > 0)
    std::printf("%s qkv per step: %.3f ms separate, %.3f ms fused (saves %.3f ms)\n", model.c_str(),
                sep / 1e3, fused / 1e3, (sep - fused) / 1e3);
  else
    std::printf("%s qkv: no self-attention to_q/to_k/to_v triples found by name\n", model.c_str());
  return Status();
}

nlohmann::json shapes_json(const std::vector<LinearShape>& all, const std::string& device,
                           double ceiling_in_run) {
  nlohmann::json rows = nlohmann::json::array();
  for (const LinearShape& s : all)
    rows.push_back({{"model", s.model},
                    {"m", s.m},
                    {"n", s.n},
                    {"k", s.k},
                    {"bias", s.bias},
                    {"addend", s.addend},
                    {"count", s.count},
                    {"us", s.us},
                    {"us_stream", s.us_stream},
                    {"us_no_addend", s.us_no_addend},
                    {"qkv_triples", s.qkv_triples},
                    {"us_qkv_fused", s.us_qkv_fused},
                    {"example", s.example}});
  return {{"device", device},
          {"dtype", "f16"},
          {"timing", "us: captured replay of back-to-back launches; us_stream: uncaptured"},
          {"ceiling_tflops_in_run", ceiling_in_run},
          {"shapes", rows}};
}

int gemm_main(int argc, char** argv) {
  std::string json_path;
  bool list_only = false;  // --list: the shapes alone, no GPU needed
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--list")
      list_only = true;
  }

  MakeModelSpec spec;
  spec.arch = "sd1";
  spec.size = ModelSize::FULL;
  Result<MakeModelConfig> sd1 = make_model_config(spec);
  if (!sd1.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", sd1.status().message().c_str());
    return 1;
  }
  std::vector<std::vector<LinearShape>> models;
  for (auto [name, cfg, latent] : {std::tuple{"sd15", sd1->unet, int64_t(64)},
                                   std::tuple{"sdxl", unet_config_sdxl(), int64_t(128)}}) {
    Result<std::vector<LinearShape>> s = linear_shapes(name, cfg, latent);
    if (!s.ok() || s->empty()) {
      std::fprintf(stderr, "bench_gemm: %s graph: %s\n", name,
                   s.ok() ? "no LINEAR nodes" : s.status().message().c_str());
      return 1;
    }
    models.push_back(std::move(*s));
  }

  if (list_only) {
    for (const auto& shapes : models) {
      int nodes = 0, addends = 0, triples = 0;
      for (const LinearShape& s : shapes) {
        std::printf("%s %5d x M=%-6lld N=%-6lld K=%-6lld %-9s qkv=%d  %s\n", s.model.c_str(),
                    s.count, static_cast<long long>(s.m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), flags(s).c_str(), s.qkv_triples,
                    s.example.c_str());
        nodes += s.count;
        addends += s.addend ? s.count : 0;
        triples += s.qkv_triples;
      }
      std::printf("%s: %d LINEAR nodes in %zu shapes, %d with an addend, %d q/k/v triples\n",
                  shapes.front().model.c_str(), nodes, shapes.size(), addends, triples);
    }
    return 0;
  }

  Result<std::unique_ptr<Backend>> backend = cuda_backend_create(0);
  if (!backend.ok()) {
    std::printf("bench_gemm: no CUDA backend (%s)\n", backend.status().message().c_str());
    return 0;
  }
  Backend& b = **backend;
  if (!b.capture_supported()) {
    std::printf("bench_gemm: the backend cannot capture work\n");
    return 1;
  }
  const std::string device = b.info().name;

  LinearTimer timer(b);
  Status st = timer.init();
  std::mt19937 rng(1234);
  double ceiling = 0;
  if (st.ok()) {
    Result<Times> c = timer.time(8192, 8192, 8192, false, false, rng);
    if (c.ok())
      ceiling = tflops(2.0 * 8192.0 * 8192.0 * 8192.0, c->us);
    else
      st = c.status();
  }
  std::printf(
      "%s; f16 LINEAR 8192^3 through op_run: %.0f TF/s (the ceiling figure used offline: "
      "%.0f TF/s)\n",
      device.c_str(), ceiling, kCeilingTflops);
  for (auto& shapes : models) {
    if (!st.ok()) break;
    st = model_run(timer, shapes, ceiling, rng);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", st.message().c_str());
    return 1;
  }

  if (!json_path.empty()) {
    std::vector<LinearShape> all;
    for (const auto& shapes : models) all.insert(all.end(), shapes.begin(), shapes.end());
    std::ofstream f(json_path);
    f << shapes_json(all, device, ceiling).dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench_gemm: cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace hr

int main(int argc, char** argv) { return hr::gemm_main(argc, argv); }
