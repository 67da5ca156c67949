// `headroom plan`: the memory plan of a workflow (workflow/workflow_plan.h), or of a model's
// graphs for given shapes (--arch), without running anything.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backend/backend.h"
#include "backend/backend_open.h"
#include "cli/commands.h"
#include "diagnose/plan_explain.h"
#include "graph/passes.h"
#include "graph/planner.h"
#include "memory/driver_lens.h"
#include "models/sd/clip_text.h"
#include "models/make_model.h"
#include "models/sd/unet.h"
#include "models/sd/vae.h"
#include "models/model_paths.h"
#include "nodes/nodes.h"
#include "workflow/workflow_plan.h"

namespace hr {
namespace {

struct Planned {
  std::string name;
  Graph graph;
};

CLIPTextConfig clip_bigg() {
  CLIPTextConfig c;
  c.layout = CLIPLayout::OPEN_CLIP;
  c.width = 1280;
  c.layers = 32;
  c.heads = 20;
  c.mlp = 5120;
  c.activation = CLIPActivation::GELU;
  c.has_projection = true;
  c.projection_dim = 1280;
  return c;
}

// `--explain`: the segments per node, and the context outside the allocator where the driver
// level measures it per process (the CUDA context this process holds; none where device memory
// is host memory, Note [device properties] in backend/device.h).
void explain_print(const PlanArgs& a, const WorkflowPlan& plan, const BackendDevice& device) {
  std::vector<NodeExplanation> nodes = plan_explain(plan);
  uint64_t context = 0;
  std::string source;
  if (!device.memory_is_host()) {
    std::unique_ptr<DriverLens> lens = DriverLens::open(device);
    DriverSample d = lens->sample();
    if (d.per_process) context = d.this_process;
    source = d.source;
  }
  if (a.json) {
    Json j = workflow_plan_json(plan);
    j["explain"] = plan_explain_json(nodes);
    j["context_bytes"] = context ? Json(context) : Json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", plan_explain_format(plan, nodes, context, source).c_str());
  }
}

// Exit codes of `headroom plan WORKFLOW`.
constexpr int kPlanFits = 0, kPlanCannotFit = 1, kPlanInvalid = 2;

int plan_workflow(const PlanArgs& a) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "headroom plan: %s\n", m.c_str());
    return kPlanInvalid;
  };
  std::stringstream text;
  if (a.workflow == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream f(a.workflow);
    if (!f) return fail("cannot read " + a.workflow);
    text << f.rdbuf();
  }
  Result<ModelPaths> paths = ModelPaths::from_config(a.models_dir, a.extra_model_paths);
  if (!paths.ok()) return fail(paths.status().message());
  auto model_paths = std::make_shared<const ModelPaths>(std::move(paths).value());
  NodeRegistry registry;
  nodes_register(registry, NodeEnv{a.models_dir, a.input_dir, model_paths});
  PromptValidation v = prompt_validate_text(text.str(), registry);
  if (!v.ok) return fail("invalid workflow:\n" + v.summary());
  // As run opens it (backend/backend_open.h): the same device, threads and dtype.
  Result<std::unique_ptr<Backend>> opened = backend_open(a.device, a.threads);
  if (!opened.ok()) return fail(opened.status().message());
  std::unique_ptr<Backend> backend = std::move(opened).value();
  Result<DType> dtype = compute_dtype_pick(a.dtype, *backend);
  if (!dtype.ok()) return fail(dtype.status().message());
  Result<MemoryPolicy> policy = memory_policy_resolve(a.memory, backend->info());
  if (!policy.ok()) return fail(policy.status().message());
  WorkflowPlanOptions o;
  o.backend = backend.get();
  o.compute_dtype = *dtype;
  o.dtype_auto = a.dtype == "auto";
  o.unet_weights = policy->unet_weights;
  o.text_encoder_weights = policy->text_encoder_weights;
  o.budget = policy->budget;
  o.weights_cap = policy->weights_cap;
  o.models_dir = a.models_dir;
  o.model_paths = model_paths;
  o.input_dir = a.input_dir;
  o.tokenizer_dir = a.clip_tokenizer;
  Result<WorkflowPlan> plan = workflow_plan(v.prompt, o);
  if (!plan.ok()) return fail(plan.status().str());
  if (a.explain) {
    explain_print(a, *plan, *backend);
  } else if (a.json) {
    std::printf("%s\n", workflow_plan_json(*plan).dump(2).c_str());
  } else {
    std::printf("%s", workflow_plan_format(*plan).c_str());
  }
  return plan->fits ? kPlanFits : kPlanCannotFit;
}

}  // namespace

int cmd_plan(const PlanArgs& a) {
  if (!a.workflow.empty()) return plan_workflow(a);
  Result<std::unique_ptr<Backend>> opened = backend_open(a.device, a.threads);
  if (!opened.ok()) {
    std::fprintf(stderr, "headroom plan: %s\n", opened.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = std::move(opened).value();
  DType dt = *dtype_from_name(a.dtype == "auto" ? "f16" : a.dtype);
  if (a.width % 8 || a.height % 8 || a.width < 64 || a.height < 64 || a.batch < 1) {
    std::fprintf(stderr, "headroom plan: width/height must be multiples of 8 and >= 64, batch >= 1\n");
    return 2;
  }
  UNetConfig unet;
  VAEConfig vae = vae_config_sd();
  std::vector<std::pair<std::string, CLIPTextConfig>> clips;
  if (a.arch == "sdxl") {
    unet = unet_config_sdxl();
    clips = {{"CLIP-L", CLIPTextConfig{}}, {"OpenCLIP bigG", clip_bigg()}};
  } else {
    MakeModelSpec spec;
    spec.arch = a.arch;
    spec.size = a.size == "tiny" ? ModelSize::TINY : ModelSize::FULL;
    auto cfg = make_model_config(spec);
    if (!cfg.ok()) {
      std::fprintf(stderr, "headroom plan: %s\n", cfg.status().str().c_str());
      return 2;
    }
    unet = cfg->unet;
    vae = cfg->vae;
    clips = {{"text encoder", cfg->clip}};
  }
  int64_t h = a.height / 8, w = a.width / 8;
  std::vector<Planned> graphs;
  auto add = [&](const std::string& name, Result<Graph> g) {
    if (!g.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), g.status().str().c_str());
      return;
    }
    graphs.push_back({name, std::move(g).value()});
  };
  for (auto& [name, c] : clips) {
    c.dtype = dt;
    CLIPTextGraphOptions o;
    o.batch = 2;
    o.layer = a.arch == "sd1" ? -1 : -2;
    o.last_hidden_state = true;
    auto g = clip_text_graph(c, o);
    if (g.ok()) graphs.push_back({name + " (2 rows of 77 tokens)", std::move(g->graph)});
  }
  add(fmt::format("UNet step (batch {} = cond+uncond of {})", a.batch * 2, a.batch),
      unet_graph(unet, a.batch * 2, h, w, 77, dt));
  add(fmt::format("VAE decode (batch {})", a.batch), vae_decode_graph(vae, a.batch, h, w, dt));
  add(fmt::format("VAE encode (batch {})", a.batch), vae_encode_graph(vae, a.batch, a.height, a.width, dt));

  std::printf("plan: %s %s, %dx%d, batch %d, %s, workspaces of %s (allocator level)\n\n",
              a.arch.c_str(), a.size.c_str(), a.width, a.height, a.batch, dtype_name(dt),
              backend->info().name.c_str());
  std::printf("| graph | nodes | weights | activation arena | lower bound | arena / bound | largest workspace |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (Planned& p : graphs) {
    // What the executor runs: the graph after the passes for this backend (graph/passes.h).
    auto passed = graph_passes(p.graph, *backend);
    if (!passed.ok()) {
      std::printf("| %s | graph passes failed: %s |\n", p.name.c_str(), passed.status().str().c_str());
      continue;
    }
    p.graph = std::move(passed).value();
    auto plan = arena_plan(p.graph, *backend);
    if (!plan.ok()) {
      std::printf("| %s | plan failed: %s |\n", p.name.c_str(), plan.status().str().c_str());
      continue;
    }
    std::printf("| %s | %zu | %s | %s | %s | %.4f | %s |\n", p.name.c_str(), p.graph.nodes().size(),
                bytes_format(plan->weight_bytes).c_str(), bytes_format(plan->arena_bytes).c_str(),
                bytes_format(plan->lower_bound).c_str(), plan->ratio(),
                bytes_format(plan->workspace_peak).c_str());
    if (a.verbose) std::printf("\n%s\n", plan_format(p.graph, *plan).c_str());
  }
  return 0;
}

}  // namespace hr
