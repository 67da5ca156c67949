// `headroom bench`: the control experiment of weight streaming (Note [bench modes]).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backend/allocator.h"
#include "backend/backend_open.h"
#include "cli/bench_progress.h"
#include "cli/commands.h"
#include "cli/run_setup.h"
#include "core/bytes.h"
#include "diagnose/bench_report.h"
#include "graph/executor.h"
#include "memory/budget.h"
#include "memory/device_profile_cache.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/telemetry.h"

namespace hr {

// Note [bench modes]
// One workflow, one resolution, one step count, one seed; only the memory mode changes:
// - resident: --gpu-only, and streaming is off (ResidencyOptions::stream): weights that do not
//   fit the budget are an out-of-memory error, not a reason to stream;
// - stream: --novram: no weight stays resident between uses, everything large streams;
// - auto: the default planner: resident while weights fit, the rest streamed.
// Each mode gets its own Allocator, Executor, Telemetry and PromptExecutor (loaded models), so
// nothing one mode left on the device counts against the next; the backend (and its CUDA
// context) is shared. A mode runs the workflow `runs` times; before each run every cached node
// but the loaders is forgotten, so that each image samples and decodes again with the models
// already loaded, and the loaders' time is left out of the time per image. The first failure
// ends a mode (an out-of-memory repeats itself). Driver-level figures on the CPU are the
// process's RSS, which keeps memory an earlier mode freed: compare them within a mode only.

namespace {

constexpr int kExitBenchInvalid = 2, kExitBenchFailed = 3;

struct BenchSetup {
  const BenchArgs& args;
  const RunInputs& inputs;
  Backend& backend;
  DType dtype;
  BenchProgress& progress;
  DeviceProfile profile;  // Note [device profile]
};

Result<std::vector<std::string>> modes_parse(const std::string& text) {
  std::vector<std::string> modes;
  std::stringstream ss(text);
  for (std::string m; std::getline(ss, m, ',');) {
    if (m != "resident" && m != "stream" && m != "auto")
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "--modes: '{}' is not one of resident, stream, auto", m);
    if (std::find(modes.begin(), modes.end(), m) != modes.end())
      return make_error(ErrorCode::INVALID_ARGUMENT, "--modes: '{}' given twice", m);
    modes.push_back(m);
  }
  if (modes.empty()) return Status(ErrorCode::INVALID_ARGUMENT, "--modes is empty");
  return modes;
}

MemoryArgs mode_memory(const std::string& mode, MemoryArgs m) {
  m.gpu_only = mode == "resident";
  m.novram = mode == "stream";
  return m;
}

bool is_loader(const std::string& class_type) {
  return class_type.find("Loader") != std::string::npos;
}

// The node running now and the seconds spent in loader nodes during one run.
struct RunClock {
  std::string node;
  bool in_loader = false;
  std::chrono::steady_clock::time_point since{};
  double loader_seconds = 0;

  void enter(const std::string& id, const std::string& class_type) {
    leave();
    node = id + " " + class_type;
    in_loader = is_loader(class_type);
    since = std::chrono::steady_clock::now();
  }
  void leave() {
    if (in_loader)
      loader_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    in_loader = false;
  }
};

size_t images_of(const ExecResult& r) {
  size_t n = 0;
  for (const auto& [id, ui] : r.ui_outputs)
    if (ui.contains("images")) n += ui["images"].size();
  return std::max<size_t>(n, 1);
}

class ModeBench {
 public:
  ModeBench(const BenchSetup& s, const std::string& mode, const MemoryPolicy& policy)
      : s_(s),
        alloc_(s.backend, policy.budget, eviction_policy()),
        ex_(s.backend, alloc_, executor_policies_default(s.backend)),
        tel_(alloc_, DriverLens::open(s.backend), telemetry_options()) {
    out_.outcome.mode = mode;
    alloc_.set_weights_cap(policy.weights_cap);
    alloc_.set_pinned_budget(policy.pinned_budget);
    ex_.set_device_profile(s.profile);
    if (mode == "resident") {
      ResidencyOptions ro = ex_.residency_options();
      ro.stream = false;
      ex_.set_residency_options(ro);
    }
  }

  BenchMode run() {
    tel_.start();
    for (int i = 1; i <= s_.args.runs; ++i)
      if (!image(i)) break;
    tel_.stop();
    peaks_collect();
    return std::move(out_);
  }

  std::string& how() { return out_.how; }
  const std::string& driver_source() const { return tel_.driver_source(); }

 private:
  static TelemetryOptions telemetry_options() {
    TelemetryOptions o;
    o.capacity = 200000;
    o.period_ms = 50;
    return o;
  }

  ExecOptions options(RunClock& clock) {
    ExecOptions o = run_exec_options(s_.args.run, s_.inputs, s_.backend, alloc_, ex_, s_.dtype);
    o.on_event = [this, &clock](const ExecEvent& e) {
      if (e.kind == ExecEvent::Kind::EXECUTING) {
        clock.enter(e.node_id, e.class_type);
        tel_.node_begin(clock.node, 0);
        s_.progress.node(clock.node);
      } else if (e.kind == ExecEvent::Kind::PROGRESS) {
        s_.progress.step(e.value, e.max);
      } else if (e.kind == ExecEvent::Kind::EXECUTED) {
        moved_observe();
      }
    };
    return o;
  }

  // Bytes of weights the last model call kept off the device (Note [bench verdict]).
  void moved_observe() {
    const ResidencyPlan& r = ex_.last_residency();
    out_.outcome.moved_bytes = std::max(out_.outcome.moved_bytes, r.streamed_bytes);
  }

  bool image(int index) {
    s_.progress.image_begin(index, s_.args.runs);
    RunClock clock;
    ExecOptions opts = options(clock);
    const uint64_t streamed0 = ex_.streamed_total();
    const auto t0 = std::chrono::steady_clock::now();
    Result<ExecResult> r = Status(ErrorCode::INTERNAL, "not run");
    try {
      r = pe_.execute(s_.inputs.prompt, opts);
    } catch (const std::exception& e) {  // Note [worker never throws]: a bench never dies either
      r = Status(ErrorCode::INTERNAL, std::string("exception: ") + e.what());
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    clock.leave();
    tel_.node_end();
    moved_observe();
    if (!r.ok()) return failed(r.status(), clock.node);
    const size_t images = images_of(*r);
    const double per_image = (secs - clock.loader_seconds) / double(images);
    out_.outcome.image_seconds.push_back(per_image);
    out_.outcome.streamed_per_image =
        std::max(out_.outcome.streamed_per_image, (ex_.streamed_total() - streamed0) / images);
    for (const auto& [id, node] : s_.inputs.prompt.nodes)
      if (!is_loader(node.class_type)) pe_.cache_erase(id);
    s_.progress.image_end(per_image);
    return true;
  }

  bool failed(const Status& st, const std::string& node) {
    out_.outcome.oom = st.code() == ErrorCode::OUT_OF_MEMORY;
    out_.outcome.oom_node = out_.outcome.oom ? node : std::string();
    out_.outcome.error = st.message();
    s_.progress.image_failed(st.message());
    return false;
  }

  void peaks_collect() {
    ModeOutcome& o = out_.outcome;
    const TelemetryPeaks peaks = tel_.peaks();
    o.allocator_peak = peaks.allocator.total;
    o.driver_per_process = peaks.driver.per_process;
    o.driver_peak = o.driver_per_process ? 0 : peaks.driver.used;
    for (const TelemetrySample& t : tel_.snapshot()) {
      const uint64_t drv = o.driver_per_process ? t.driver.this_process : t.driver.used;
      if (o.driver_per_process) o.driver_peak = std::max(o.driver_peak, drv);
      out_.allocator_held.emplace_back(t.time_ms / 1000.0, t.allocator.total);
      out_.driver_used.emplace_back(t.time_ms / 1000.0, drv);
    }
  }

  const BenchSetup& s_;
  Allocator alloc_;
  Executor ex_;
  Telemetry tel_;
  PromptExecutor pe_;  // destroyed first: the models it caches free into alloc_
  BenchMode out_;
};

std::string policy_words(const std::string& mode, const MemoryPolicy& p) {
  const char* what = mode == "resident" ? "--gpu-only, streaming off: weights stay resident"
                     : mode == "stream" ? "--novram: no weight resident between uses"
                                        : "default planner: resident while weights fit";
  return fmt::format("{}; budget {} ({})", what, bytes_format(p.budget), p.how);
}

bool file_write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return bool(f);
}

int report_write(const BenchArgs& a, const BenchReport& report) {
  if (a.json) {
    std::printf("%s\n", bench_json(report).dump(2).c_str());
  } else {
    std::printf("%s", bench_format(report).c_str());
  }
  if (a.plot.empty()) return kExitOk;
  if (!file_write(a.plot, bench_plot(report))) {
    std::fprintf(stderr, "headroom bench: cannot write %s\n", a.plot.c_str());
    return kExitBenchFailed;
  }
  if (!a.json) std::printf("chart written to %s\n", a.plot.c_str());
  return kExitOk;
}

}  // namespace

int cmd_bench(const BenchArgs& a) {
  auto fail = [](int code, const Status& s) {
    std::fprintf(stderr, "headroom bench: %s\n", s.message().c_str());
    return code;
  };
  Result<std::vector<std::string>> modes = modes_parse(a.modes);
  if (!modes.ok()) return fail(kExitBenchInvalid, modes.status());
  if (a.runs < 1)
    return fail(kExitBenchInvalid, Status(ErrorCode::INVALID_ARGUMENT, "--runs must be >= 1"));
  Result<RunInputs> in = run_inputs_load(a.run);
  if (!in.ok()) return fail(kExitBenchInvalid, in.status());
  Result<std::unique_ptr<Backend>> backend = backend_open(a.run.device, a.run.threads);
  if (!backend.ok()) return fail(kExitBenchFailed, backend.status());
  Result<DType> dtype = compute_dtype_pick(a.run.dtype, **backend);
  if (!dtype.ok()) return fail(kExitBenchFailed, dtype.status());

  BenchProgress progress(isatty(STDERR_FILENO), a.runs * int(modes->size()));
  BenchSetup setup{a, *in, **backend, *dtype, progress, device_profile_load(**backend)};
  BenchReport report;
  report.workflow = a.run.workflow;
  report.device = (*backend)->info().name;
  report.dtype = dtype_name(*dtype);
  report.runs = a.runs;
  for (const std::string& mode : *modes) {
    Result<MemoryPolicy> policy =
        memory_policy_resolve(mode_memory(mode, a.run.memory), (*backend)->info());
    if (!policy.ok()) return fail(kExitBenchInvalid, policy.status());
    report.budget = policy->budget;
    ModeBench bench(setup, mode, *policy);
    bench.how() = policy_words(mode, *policy);
    report.driver_source = bench.driver_source();
    progress.mode_begin(mode, bench.how());
    report.modes.push_back(bench.run());
  }
  progress.finish();
  bench_judge(report);
  return report_write(a, report);
}

}  // namespace hr
