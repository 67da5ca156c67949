// Random-weight checkpoints in the real single-file key layout (`headroom make-model`): the
// tensor list comes from the model graphs themselves, so every name and shape is one the
// loader reads. They name headroom's byte tokenizer in their metadata (no CLIP vocabulary needed).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "core/status.h"
#include "models/sd/clip_text.h"
#include "models/sd/unet.h"
#include "models/sd/vae.h"
#include "memory/weight_set.h"

namespace hr {

enum class ModelSize : uint8_t { TINY, FULL };

struct MakeModelSpec {
  std::string arch = "sd1";  // "sd1", "sd2" or "sdxl"
  ModelSize size = ModelSize::TINY;
  uint64_t seed = 0;
  DType dtype = DType::F16;  // storage dtype
};

struct MakeModelConfig {
  UNetConfig unet;
  VAEConfig vae;
  CLIPTextConfig clip;   // SD1: CLIP-L; SD2: OpenCLIP-H; SDXL: CLIP-L
  bool has_clip1 = true;   // false: the SDXL refiner, whose only encoder is clip2
  bool has_clip2 = false;  // SDXL: OpenCLIP bigG
  CLIPTextConfig clip2;
};

Result<MakeModelConfig> make_model_config(const MakeModelSpec& spec);

// Fills `out` with random weights (Note [random init]) for every WEIGHT value of `g` that it
// does not hold yet, in the dtype the graph declares (benchmarks use this without a file).
void make_model_random_weights(const Graph& g, uint64_t seed, WeightSet& out);

// Draw i of the standard-normal-like stream `seed` (Note [flux random init] in
// models/make_model_files.cpp): counter-based, so a tensor's chunks are drawn in parallel.
float make_model_normal_at(uint64_t seed, uint64_t i);

// One tensor's random values by its name and shape (Note [random init]), from one seed drawn
// from `rng` (the values in parallel, make_model_normal_at); `t` is f32. For writers of other layouts (models/flux/flux_vae_make.h).
void make_model_random_fill(const std::string& name, HostTensor& t, std::mt19937_64& rng);

// Writes the checkpoint; returns the number of parameters written.
Result<uint64_t> make_model_write(const MakeModelSpec& spec, const std::string& path);

}  // namespace hr
