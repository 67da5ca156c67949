// The diffusion-model component of a loaded model (a UNet, later a DiT): its weights, what a
// call needs on the device, and one call on a batch of conditioning entries.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/executor.h"
#include "models/conditioning.h"
#include "models/family.h"
#include "memory/weight_set.h"

namespace hr {

class DiffusionModel {
 public:
  virtual ~DiffusionModel() = default;
  virtual const ModelFamily& family() const = 0;
  virtual WeightSet& weights() = 0;
  // How the sampler turns sigmas into timesteps and outputs into denoised latents.
  virtual ModelSamplingSpec sampling() const = 0;
  // The least device bytes one call on a latent of `latent` shape ([B, C, h, w]) with `tokens`
  // context tokens needs, its weights streamed (the plan's question: Executor::min_device_bytes).
  virtual Result<uint64_t> min_device_bytes(Executor& ex, const Shape& latent, int64_t tokens) = 0;
  // One call: x [N, C, h, w] (model space), timesteps [N]; the rows are split evenly over
  // `entries` in order. The model builds its network's inputs from each entry's context and
  // extras (cond_context_batch, a pooled vector, size embeddings...). It reads its weights from
  // `weights`: weights() itself, or a patched view of it (Note [patched weights]).
  virtual Result<HostTensor> run(Executor& ex, WeightSource& weights, const HostTensor& x,
                                 const HostTensor& timesteps,
                                 std::span<const CondEntry* const> entries) = 0;
};

}  // namespace hr
