#include "server/compute_stack.h"

#include <omp.h>

#include <filesystem>

#include "backend/backend_open.h"
#include "memory/device_profile_cache.h"
#include "memory/driver_lens.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/model_paths.h"
#include "nodes/nodes.h"

namespace hr {

Status compute_stack_open(const ComputeChoice& c, ComputeStack& s) {
  HR_ASSIGN_OR_RETURN(s.backend, backend_open(c.device, c.threads));
  HR_ASSIGN_OR_RETURN(s.dtype, compute_dtype_pick(c.dtype, *s.backend));
  s.dtype_auto = c.dtype == "auto";
  HR_ASSIGN_OR_RETURN(s.preview, preview_method_parse(c.preview_method));
  HR_ASSIGN_OR_RETURN(s.policy, memory_policy_resolve(c.memory, s.backend->info()));
  s.allocator = std::make_unique<Allocator>(*s.backend, s.policy.budget, eviction_policy());
  s.allocator->set_weights_cap(s.policy.weights_cap);
  s.allocator->set_pinned_budget(s.policy.pinned_budget);
  s.executor = std::make_unique<Executor>(*s.backend, *s.allocator,
                                          executor_policies_default(*s.backend));
  s.executor->set_device_profile(device_profile_load(*s.backend));  // Note [device profile]
  s.telemetry = std::make_unique<Telemetry>(*s.allocator, DriverLens::open(*s.backend));
  return Status();
}

Status runtime_folders_prepare(const RuntimeFolders& folders,
                               const std::vector<std::string>& extra_model_paths,
                               std::shared_ptr<const ModelPaths>& model_paths,
                               NodeRegistry& registry) {
  for (const std::string& d : {folders.output_dir, folders.input_dir, folders.temp_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) return make_error(ErrorCode::IO, "cannot create folder {}: {}", d, ec.message());
  }
  HR_ASSIGN_OR_RETURN(ModelPaths mp,
                      ModelPaths::from_config(folders.models_dir, extra_model_paths));
  model_paths = std::make_shared<const ModelPaths>(std::move(mp));
  nodes_register(registry, NodeEnv{folders.models_dir, folders.input_dir, model_paths});
  return Status();
}

JobRuntime compute_runtime(ComputeStack& s, const NodeRegistry& registry,
                           std::shared_ptr<const ModelPaths> model_paths,
                           const RuntimeFolders& folders, int threads) {
  JobRuntime rt;
  rt.registry = &registry;
  rt.exec.models_dir = folders.models_dir;
  rt.exec.model_paths = model_paths;
  rt.exec.output_dir = folders.output_dir;
  rt.exec.input_dir = folders.input_dir;
  rt.exec.temp_dir = folders.temp_dir;
  rt.exec.backend = s.backend.get();
  rt.exec.compute_dtype = s.dtype;
  rt.exec.dtype_auto = s.dtype_auto;
  rt.exec.unet_weights = s.policy.unet_weights;
  rt.exec.text_encoder_weights = s.policy.text_encoder_weights;
  rt.exec.allocator = s.allocator.get();
  rt.exec.executor = s.executor.get();
  rt.exec.preview = s.preview == PreviewMethod::LATENT2RGB;
  rt.plan.backend = s.backend.get();
  rt.plan.compute_dtype = s.dtype;
  rt.plan.dtype_auto = s.dtype_auto;
  rt.plan.unet_weights = s.policy.unet_weights;
  rt.plan.text_encoder_weights = s.policy.text_encoder_weights;
  rt.plan.models_dir = folders.models_dir;
  rt.plan.input_dir = folders.input_dir;
  rt.plan.device_profile = s.executor->device_profile();  // the run's clock
  rt.plan.model_paths = std::move(model_paths);
  rt.telemetry = s.telemetry.get();
  rt.levels = &s.levels;
  // Note [worker thread settings]: the CPU backend sets OpenMP's thread count with
  // omp_set_num_threads, which holds for the calling thread only; the worker thread that runs
  // the ops would use every core (and, with --threads below the core count, OpenMP teams spin
  // against each other on a shared machine). The worker applies --threads itself.
  if (threads > 0) rt.on_thread_start = [threads] { omp_set_num_threads(threads); };
  return rt;
}

}  // namespace hr
