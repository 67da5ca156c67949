// The memory plan of a whole workflow without computing it (`headroom plan WORKFLOW.json`): the
// prompt run by its own nodes on a planning backend, with checkpoint headers only (no weights
// read), so that the allocator-level bytes it would hold in each node are those of the run, and
// the server can admit a job the same way later (Note [plan run] in workflow_plan.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "graph/device_profile.h"
#include "workflow/prompt.h"

namespace hr {

class Backend;
class ModelPaths;

struct WorkflowPlanOptions {
  Backend* backend = nullptr;        // whose op workspaces and weight placement to plan for
  DType compute_dtype = DType::F32;  // as ExecOptions::compute_dtype
  bool dtype_auto = false;           // as ExecOptions::dtype_auto
  std::optional<DType> unet_weights, text_encoder_weights;  // as ExecOptions'
  uint64_t budget = UINT64_MAX;      // allocator-level budget (UINT64_MAX: none)
  uint64_t weights_cap = UINT64_MAX;  // as Allocator::set_weights_cap (--lowvram, --novram)
  // The clock the run's Executor plans residency with (Executor::set_device_profile); empty:
  // device_profile_load(*backend), as run and serve do.
  std::optional<DeviceProfile> device_profile;
  // Find WorkflowPlan::smallest_budget (a bisection of about log2(peak / 256) plan runs).
  bool find_smallest_budget = true;
  // The folders a run reads, as ExecOptions has them (LoadImage reads its image for the shape).
  std::string models_dir = "models";
  std::shared_ptr<const ModelPaths> model_paths;  // null: ComfyUI's layout under models_dir
  std::string input_dir = "input";
  std::string tokenizer_dir;
};

// One executed node.
struct NodePlan {
  std::string node_id;
  std::string class_type;
  uint64_t weight_bytes = 0;     // weights its graphs read, in the compute dtype (host or device)
  uint64_t resident_bytes = 0;   // of those, device copies the allocator holds (0 on the CPU)
  uint64_t streamed_bytes = 0;   // weights streamed through the staging ring on each call
  uint64_t ring_bytes = 0;       // the staging ring (Pool::STAGING) when streaming
  std::string residency;         // residency_describe() when streaming, else empty
  uint64_t arena_bytes = 0;      // largest activation arena among its graphs (workspaces inside)
  uint64_t workspace_bytes = 0;  // largest single op workspace among its graphs
  // Weight patches (LoRA, Note [patched weights]): where they are applied, and the device bytes
  // their factors and scratch take beside the weights.
  std::string patching;
  uint64_t patch_bytes = 0;
  int graph_runs = 0;            // model calls: sampler steps; VAE: images or tiles per image
  std::string decision;          // "whole", "UNet batch 2 (cond+uncond) x 20 steps", VAE tiling
  uint64_t total_after = 0;      // allocator-level bytes held after the node
  uint64_t peak = 0;             // allocator-level peak while it runs
  bool fits = true;              // false: the node cannot run within the budget
  bool reached = true;           // false: an earlier node did not fit, so it was not planned
};

struct WorkflowPlan {
  std::string device;      // backend name
  DType compute_dtype = DType::F32;
  uint64_t budget = UINT64_MAX;
  std::vector<NodePlan> nodes;  // in execution order
  uint64_t peak = 0;            // predicted allocator-level peak of the whole run
  bool fits = true;
  std::string why_not;               // when !fits: the first node that cannot run and why
  uint64_t smallest_budget = 0;      // the smallest budget at which the workflow fits
  bool weights_counted = false;      // device weights count against the budget (!memory_is_host)
};

// Plans `prompt` (validated): every node that can run can be planned. A node's error other than
// running out of memory (a file that cannot be read, a bad input) is returned with the node
// named, as the run would report it. Not fitting is not an error: see fits.
Result<WorkflowPlan> workflow_plan(const Prompt& prompt, const WorkflowPlanOptions& options);

// The plan as JSON ({"fits", "peak", "smallest_budget", "nodes": [...]}) and as a table.
Json workflow_plan_json(const WorkflowPlan& plan);
std::string workflow_plan_format(const WorkflowPlan& plan);

}  // namespace hr
