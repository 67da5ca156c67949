// Executes a validated prompt: only what the output nodes need, in dependency order, with an
// output cache across prompts so that a re-run with one changed input re-executes only the
// nodes downstream of the change (ComfyUI's behaviour).
#pragma once

#include <any>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "workflow/node_def.h"
#include "workflow/prompt.h"

namespace hr {

class Backend;
class Allocator;
class Executor;
class ModelPaths;

// What a running prompt reports (the server turns these into WebSocket messages).
struct ExecEvent {
  // MEMORY: a memory decision a node took (tiling, streaming, eviction, OOM recovery), with
  // its reason in `message`, e.g. "VAE decode tiled 4x4 at 256 px: arena 1.3 GiB > 0.9 GiB left".
  // PREVIEW: a sampler step's preview picture (PNG bytes in `image`; ExecOptions::preview).
  enum class Kind { EXECUTING, PROGRESS, EXECUTED, CACHED, MEMORY, PREVIEW, WARNING } kind;
  std::string node_id;
  std::string class_type;
  int value = 0, max = 0;  // PROGRESS
  Json output;             // EXECUTED: the node's UI output
  std::vector<std::string> cached;  // CACHED
  std::string message;              // MEMORY, WARNING
  std::shared_ptr<const std::string> image;  // PREVIEW
};

struct ExecOptions {
  std::string models_dir = "models";  // also where the CLIP tokenizer search looks
  // Where loaders find model files (models/model_paths.h); null: ComfyUI's layout under models_dir.
  std::shared_ptr<const ModelPaths> model_paths;
  std::string output_dir = "output";
  std::string input_dir = "input";
  std::string temp_dir = "temp";
  std::string tokenizer_dir;  // CLIP vocabulary folder (empty: discover)
  Backend* backend = nullptr;
  DType compute_dtype = DType::F32;  // UNet/VAE/CLIP compute dtype on `backend`
  // compute_dtype came from --dtype auto: a family may prefer bf16 for its diffusion model
  // (Note [family compute dtype] in models/checkpoint.cpp).
  bool dtype_auto = false;
  // Stored in fp8 at load (MemoryPolicy's; UNETLoader's weight_dtype overrides the first).
  std::optional<DType> unet_weights, text_encoder_weights;
  Allocator* allocator = nullptr;
  Executor* executor = nullptr;
  std::function<void(const ExecEvent&)> on_event;
  // Samplers send a PREVIEW event per step when true (ComfyUI's --preview-method latent2rgb).
  bool preview = false;
  // Note [plan run] in workflow/workflow_plan.cpp: the prompt runs on a planning backend to
  // measure its memory; loaders hand out placeholder weights and nodes write no files.
  bool plan_run = false;
  const std::atomic<bool>* interrupt = nullptr;
  // Shared state that outlives one prompt (loaded models), keyed by the nodes that own it.
  std::map<std::string, std::shared_ptr<void>>* resources = nullptr;
};

struct ExecContext {
  const ExecOptions& opts;
  const Prompt& prompt;
  std::string node_id;
  Json ui = Json::object();  // the node's UI output ({"images": [...]})

  void progress(int value, int max) const;
  // Reports a preview picture (ExecEvent::Kind::PREVIEW) for this node.
  void preview(std::shared_ptr<const std::string> png) const;
  // Reports a memory decision (ExecEvent::Kind::MEMORY) for this node; a message equal to the
  // previous one of this node is not repeated (a sampler's steps decide the same each time).
  void memory_decision(const std::string& message) const;
  // Reports something the user should know that does not fail the node (ExecEvent::Kind::WARNING:
  // a LoRA's keys that matched no weight, as ComfyUI logs "lora key not loaded").
  void warn(const std::string& message) const;
  mutable std::string last_decision;
  bool interrupted() const { return opts.interrupt && opts.interrupt->load(); }
  Status check_interrupt() const;
};

struct ExecResult {
  std::map<std::string, Json> ui_outputs;  // node id -> UI output (output nodes)
  std::vector<std::string> executed;       // node ids run this time, in order
  std::vector<std::string> cached;         // node ids served from the cache
};

class PromptExecutor {
 public:
  PromptExecutor() = default;
  // Runs `prompt`. A failing node stops the prompt with a Status naming the node.
  Result<ExecResult> execute(const Prompt& prompt, const ExecOptions& opts);
  // Order in which the nodes needed by the outputs run (dependencies first).
  static std::vector<std::string> execution_order(const Prompt& prompt);
  void cache_clear() { cache_.clear(); }
  // Forgets one node's cached outputs, so that the next prompt runs it again (`headroom bench`
  // re-runs every node but the loaders for each image).
  void cache_erase(const std::string& node_id) { cache_.erase(node_id); }
  // What a node produced in the last prompt that ran or reused it (its output values in
  // ComfyUI's output order), or null; for tests and the server's inspection of a stage.
  const std::vector<std::any>* node_outputs(const std::string& node_id) const {
    auto it = cache_.find(node_id);
    return it == cache_.end() ? nullptr : &it->second.outputs;
  }

 private:
  struct CacheEntry {
    std::string signature;
    std::vector<std::any> outputs;
    Json ui;
  };
  std::map<std::string, CacheEntry> cache_;
};

}  // namespace hr
