// LoRA benchmark (issue 37 item 5): full-size SDXL (random f16 weights of the real shapes) with a
// rank-64 kohya LoRA on every attention and feed-forward weight, all measured in this run:
//  1. reading the LoRA file and patching every target on the device (PatchedWeights);
//  2. the UNet step at 1024x1024 with the patched weights against the step without;
//  3. the streamed step at 50 % and 25 % of the weights resident, with against without;
//  4. a queue of SDXL jobs (CheckpointLoaderSimple -> LoraLoader -> ... -> SaveImage, run as a job
//     runs them, in-process) alternating two LoRA sets, against the same queue without LoRAs, with
//     the host RSS after each job.
//
//   bench_lora [--device cuda] [--steps 10] [--only patch|queue] [--models DIR]
// --models DIR (for the queue): a models folder whose checkpoints/ holds sdxl.safetensors (a
// full-size SDXL from `headroom make-model --arch sdxl --size full`); the LoRA files are written
// into DIR/loras.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "bench_common.h"
#include "core/bytes.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/patched_weights.h"
#include "models/lora_file.h"
#include "models/sd/unet_diffusers_names.h"
#include "nodes/nodes.h"
#include "workflow/execute.h"

namespace hr {
namespace {

namespace fs = std::filesystem;
using bench::Clock;
using bench::median;
using bench::ms_since;
using Json = nlohmann::json;

constexpr int64_t kRank = 64;



uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

bool lora_target(const std::string& ldm) {
  for (const char* s : {"attn1.to_q.weight", "attn1.to_k.weight", "attn1.to_v.weight",
                        "attn1.to_out.0.weight", "attn2.to_q.weight", "attn2.to_k.weight",
                        "attn2.to_v.weight", "attn2.to_out.0.weight", "ff.net.0.proj.weight",
                        "ff.net.2.weight"})
    if (ldm.ends_with(s)) return true;
  return false;
}

std::string kohya_stem(const std::string& diffusers) {
  std::string s = diffusers.substr(0, diffusers.size() - std::string(".weight").size());
  std::replace(s.begin(), s.end(), '.', '_');
  return "lora_unet_" + s;
}

// A rank-64 kohya LoRA on every attention and FF weight of `shapes` (LDM name -> shape), f16.
Status lora_file_write(const std::string& path, const std::map<std::string, Shape>& shapes,
                       uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  std::vector<std::pair<std::string, HostTensor>> owned;
  for (const UNetNamePair& p : unet_diffusers_names(unet_config_sdxl())) {
    auto it = shapes.find(p.ldm);
    if (it == shapes.end() || !lora_target(p.ldm)) continue;
    const int64_t out = it->second[0], in = it->second.numel() / out;
    HostTensor up(DType::F32, Shape{out, kRank}), down(DType::F32, Shape{kRank, in});
    for (int64_t i = 0; i < up.numel(); ++i) up.f32()[i] = n(rng);
    for (int64_t i = 0; i < down.numel(); ++i) down.f32()[i] = n(rng);
    HostTensor alpha(DType::F32, Shape{});
    alpha.f32()[0] = float(kRank);
    const std::string stem = kohya_stem(p.diffusers);
    owned.emplace_back(stem + ".lora_up.weight", up.to(DType::F16));
    owned.emplace_back(stem + ".lora_down.weight", down.to(DType::F16));
    owned.emplace_back(stem + ".alpha", std::move(alpha));
  }
  std::vector<std::pair<std::string, const HostTensor*>> refs;
  for (const auto& [k, t] : owned) refs.emplace_back(k, &t);
  return safetensors_write(path, refs);
}

// The kohya stems of the SDXL UNet (the LoRA file's keys) -> the LDM weights.
LoraKeyMap sdxl_kohya_map() {
  LoraKeyMap m;
  for (const UNetNamePair& p : unet_diffusers_names(unet_config_sdxl()))
    m[kohya_stem(p.diffusers)] = LoraTarget{LoraComponent::DIFFUSION, 0, p.ldm};
  return m;
}

struct Steps {
  double ms = 0;
  std::string residency;
  uint64_t alloc_peak = 0;
  bool ok = false;
};

// Median ms of `steps` runs of w on `source` within `budget`, after 3 warm-up runs.
Steps steps_time(Backend& b, bench::Workload& w, WeightSource& source, uint64_t budget,
                 int steps) {
  Steps s;
  Allocator alloc(b, budget, eviction_policy());
  Executor ex(b, alloc, executor_policies_default(b));
  source.bind(&b, &alloc);
  for (int i = 0; i < 3; ++i)
    if (auto r = ex.run(w.graph, w.host_inputs(), source); !r.ok()) {
      s.residency = "failed: " + r.status().str();
      source.bind(nullptr, nullptr);
      return s;
    }
  alloc.reset_peak();
  auto* view = dynamic_cast<PatchedWeights*>(&source);
  const uint64_t made0 = view ? view->patches_made() : 0, rec0 = ex.recoveries();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    (void)ex.run(w.graph, w.host_inputs(), source);
    ms.push_back(ms_since(t0));
  }
  s.ms = median(ms);
  s.residency = ex.last_residency_text();
  s.residency += fmt::format(" [timed runs: {} recoveries, {} resident patches made]",
                             ex.recoveries() - rec0, view ? view->patches_made() - made0 : 0);
  s.alloc_peak = alloc.total().peak;
  s.ok = true;
  source.bind(nullptr, nullptr);
  return s;
}

// Every patched weight of w made on the device from resident originals: ms.
double patch_time(Backend& b, bench::Workload& w, PatchedWeights& view, int* made) {
  Allocator alloc(b, Allocator::kUnlimited, eviction_policy());
  Executor ex(b, alloc, executor_policies_default(b));
  view.bind(&b, &alloc);
  auto c = ex.compile(w.graph);
  if (!c.ok()) return -1;
  for (const WeightUse& u : (*c)->weights) {  // the originals resident first
    const Value& v = (*c)->graph.values()[size_t(u.value)];
    (void)view.base().weight_get(v.name, v.desc, v.layout);
  }
  (void)b.stream_sync(nullptr);
  const auto t0 = Clock::now();
  for (const WeightUse& u : (*c)->weights) {
    const Value& v = (*c)->graph.values()[size_t(u.value)];
    if (!view.weight_patched(v.name, v.layout)) continue;
    if (auto r = view.weight_get(v.name, v.desc, v.layout); !r.ok())
      std::printf("patch failed: %s\n", r.status().str().c_str());
    ++*made;
  }
  (void)b.stream_sync(nullptr);
  const double ms = ms_since(t0);
  view.bind(nullptr, nullptr);
  return ms;
}

void patch_rows(Backend& b, int steps, const std::string& dir) {
  auto w = bench::workload_sdxl(DType::F16);
  if (!w.ok()) return;
  std::map<std::string, Shape> shapes;
  for (const std::string& n : w->weights->names()) shapes[n] = w->weights->find(n)->shape();
  const std::string path = dir + "/bench_lora_a.safetensors";
  auto t0 = Clock::now();
  if (Status s = lora_file_write(path, shapes, 1); !s.ok()) {
    std::printf("writing the LoRA: %s\n", s.str().c_str());
    return;
  }
  const double write_ms = ms_since(t0);
  t0 = Clock::now();
  auto file = SafetensorsFile::open(path);
  auto patches = file.ok() ? lora_patches_read(**file, sdxl_kohya_map(), {1.0f, 0.0f})
                           : Result<LoraPatches>(file.status());
  if (!patches.ok()) {
    std::printf("reading the LoRA: %s\n", patches.status().str().c_str());
    return;
  }
  const double read_ms = ms_since(t0);
  auto set = std::make_shared<PatchSet>();
  for (auto& [k, v] : patches->diffusion) set->by_weight[k] = std::move(v);
  set->id = path;
  PatchedWeights view(w->weights, set);
  std::printf("%s, LoRA rank %lld on %zu weights (attention + FF): file %s (written in %.0f ms), "
              "read in %.0f ms, factors %s (float32 on the host); %zu keys not loaded\n",
              w->name.c_str(), (long long)kRank, patches->targets,
              bytes_format(fs::file_size(path)).c_str(), write_ms, read_ms,
              bytes_format(patches->factor_bytes).c_str(), patches->not_loaded.size());
  int made = 0;
  const double patch_ms = patch_time(b, *w, view, &made);
  std::printf("patching %d weights on the device from resident originals: %.1f ms\n\n", made,
              patch_ms);

  Allocator a(b, Allocator::kUnlimited, eviction_policy());
  Executor probe(b, a, executor_policies_default(b));
  auto c = probe.compile(w->graph);
  if (!c.ok()) return;
  const uint64_t arena = (*c)->plan->arena_bytes, weights = (*c)->weight_bytes;
  uint64_t largest = 0;
  for (const WeightUse& u : (*c)->weights) largest = std::max(largest, u.bytes);
  const uint64_t ring = ResidencyOptions().depth * largest;
  std::printf("| budget | without LoRA ms | with LoRA ms | with / without | residency without "
              "| residency with | allocator-level peak with |\n|---|---|---|---|---|---|---|\n");
  for (int pct : {100, 50, 25}) {
    const uint64_t budget =
        pct == 100 ? Allocator::kUnlimited
                   : arena + uint64_t(double(weights) * pct / 100.0) + ring;
    const Steps plain = steps_time(b, *w, *w->weights, budget, steps);
    w->weights->release_device();
    const Steps lora = steps_time(b, *w, view, budget, steps);
    std::printf("| %s | %.2f | %.2f | %.3fx | %s | %s | %s |\n",
                pct == 100 ? "none (resident)" : fmt::format("{} % resident ({})", pct,
                                                             bytes_format(budget)).c_str(),
                plain.ms, lora.ms, plain.ms > 0 ? lora.ms / plain.ms : 0.0,
                plain.residency.c_str(), lora.residency.c_str(),
                bytes_format(lora.alloc_peak).c_str());
    std::fflush(stdout);
    w->weights->release_device();
  }
}

// The queue: in-process, as a job runs (PromptExecutor over the registered nodes).
struct Queue {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Allocator> allocator;
  std::unique_ptr<Executor> executor;
  NodeRegistry registry;
  PromptExecutor prompts;
  std::map<std::string, std::shared_ptr<void>> resources;
  ExecOptions opts;

  Queue(std::unique_ptr<Backend> b, const std::string& models) : backend(std::move(b)) {
    allocator = std::make_unique<Allocator>(*backend, Allocator::kUnlimited, eviction_policy());
    executor = std::make_unique<Executor>(*backend, *allocator, executor_policies_default(*backend));
    NodeEnv env{models, models + "/input", nullptr};
    nodes_register(registry, env);
    opts.models_dir = models;
    opts.output_dir = models + "/output";
    opts.input_dir = env.input_dir;
    opts.temp_dir = models + "/temp";
    opts.backend = backend.get();
    opts.allocator = allocator.get();
    opts.executor = executor.get();
    opts.resources = &resources;
    opts.compute_dtype = DType::F16;
    for (const std::string& d : {opts.output_dir, opts.input_dir, opts.temp_dir})
      fs::create_directories(d);
  }
  double run(const Json& wf) {
    const auto t = Clock::now();
    PromptValidation v = prompt_validate(wf, registry);
    if (!v.ok) std::printf("invalid: %s\n", v.summary().c_str());
    Result<ExecResult> r = prompts.execute(v.prompt, opts);
    if (!r.ok()) std::printf("job failed: %s\n", r.status().str().c_str());
    return ms_since(t);
  }
};

Json workflow(const std::string& lora, int steps, int seed) {
  const Json model = lora.empty() ? Json::array({"4", 0}) : Json::array({"10", 0});
  Json wf = {
      {"4", {{"class_type", "CheckpointLoaderSimple"}, {"inputs", {{"ckpt_name", "sdxl.safetensors"}}}}},
      {"6", {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", "a red circle"}, {"clip", {"4", 1}}}}}},
      {"7", {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", ""}, {"clip", {"4", 1}}}}}},
      {"5", {{"class_type", "EmptyLatentImage"}, {"inputs", {{"width", 1024}, {"height", 1024}, {"batch_size", 1}}}}},
      {"3", {{"class_type", "KSampler"},
             {"inputs", {{"model", model}, {"positive", {"6", 0}}, {"negative", {"7", 0}},
                         {"latent_image", {"5", 0}}, {"seed", seed}, {"steps", steps},
                         {"cfg", 7.0}, {"sampler_name", "euler"}, {"scheduler", "normal"},
                         {"denoise", 1.0}}}}},
      {"8", {{"class_type", "VAEDecode"}, {"inputs", {{"samples", {"3", 0}}, {"vae", {"4", 2}}}}}},
      {"9", {{"class_type", "SaveImage"}, {"inputs", {{"images", {"8", 0}}, {"filename_prefix", "lora"}}}}}};
  if (!lora.empty())
    wf["10"] = {{"class_type", "LoraLoaderModelOnly"},
                {"inputs", {{"model", {"4", 0}}, {"lora_name", lora}, {"strength_model", 0.9}}}};
  return wf;
}

void queue_rows(const std::string& device, const std::string& models, int steps, int jobs) {
  const std::string ckpt = models + "/checkpoints/sdxl.safetensors";
  if (!fs::exists(ckpt)) {
    std::printf("queue: %s is missing (headroom make-model --arch sdxl --size full)\n", ckpt.c_str());
    return;
  }
  fs::create_directories(models + "/loras");
  auto w = bench::workload_sdxl(DType::F16);  // for the shapes only
  std::map<std::string, Shape> shapes;
  for (const std::string& n : w->weights->names()) shapes[n] = w->weights->find(n)->shape();
  w->weights.reset();
  for (int i : {1, 2})
    (void)lora_file_write(fmt::format("{}/loras/set{}.safetensors", models, i), shapes, uint32_t(i));
  std::printf("\nqueue of %d SDXL 1024x1024 jobs (%d steps, euler, cfg 7; one process, jobs run as "
              "the server runs them), host RSS after each job:\n\n", jobs, steps);
  std::printf("| queue | job ms (median of jobs 2..%d) | first job ms | RSS after job 2 | RSS after "
              "last | per-job ms list |\n|---|---|---|---|---|---|\n", jobs);
  for (int with = 0; with < 2; ++with) {
    Queue q(bench::backend_for(device), models);
    std::vector<double> ms;
    std::vector<uint64_t> rss;
    for (int j = 0; j < jobs; ++j) {
      const std::string lora = with ? fmt::format("set{}.safetensors", 1 + j % 2) : "";
      ms.push_back(q.run(workflow(lora, steps, j)));
      rss.push_back(rss_bytes());
    }
    std::string list;
    for (double m : ms) list += fmt::format("{:.0f} ", m);
    std::printf("| %s | %.0f | %.0f | %s | %s | %s|\n",
                with ? "alternating LoRA sets A, B" : "no LoRA", median({ms.begin() + 1, ms.end()}),
                ms[0], bytes_format(rss.size() > 1 ? rss[1] : 0).c_str(),
                bytes_format(rss.back()).c_str(), list.c_str());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace hr

int main(int argc, char** argv) {
  using namespace hr;
  const bench::Args args = bench::args_parse(argc, argv, 10);
  std::string models = "/tmp/bench_lora_models";
  int jobs = 10;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--models") models = argv[i + 1];
    if (std::string(argv[i]) == "--jobs") jobs = std::atoi(argv[i + 1]);
  }
  fs::create_directories(models);
  if (args.only.empty() || args.only == "patch") {
    std::unique_ptr<Backend> backend = bench::backend_for(args.device);
    if (!backend) return 0;
    std::printf("device %s, f16, %d timed steps (median, after 3 warm-up runs)\n\n",
                backend->info().name.c_str(), args.steps);
    patch_rows(*backend, args.steps, models);
  }
  if (args.only.empty() || args.only == "queue") queue_rows(args.device, models, 10, jobs);
  return 0;
}
