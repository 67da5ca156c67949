// The memory budget and residency policy of a run, from the user's flags: `--vram-budget`,
// `--reserve-vram`, and ComfyUI's `--lowvram`, `--novram`, `--highvram`, `--gpu-only`
// (Note [budget flags]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "core/status.h"

namespace hr {

// How weights may be placed; ComfyUI's VRAM states under headroom's own names.
enum class ResidencyMode : uint8_t {
  AUTO = 0,   // weights resident while they fit the budget, the rest streamed
  LOW,        // --lowvram: weights take at most half the budget; the rest is streamed
  NONE,       // --novram: no weight stays resident between uses; everything is streamed
  HIGH,       // --highvram: models stay resident after their prompt (evicted only for room)
  GPU_ONLY,   // --gpu-only: every weight resident, text encoders too; never streamed
};
const char* residency_mode_name(ResidencyMode m);  // "auto", "lowvram", "novram", ...

// The flags as given.
struct MemoryArgs {
  std::string vram_budget;             // "6GiB", "6144MiB", "40%", "" = default
  std::optional<double> reserve_vram;  // GiB kept free for others (ComfyUI's --reserve-vram)
  bool lowvram = false, novram = false, highvram = false, gpu_only = false;
  std::string pinned_budget;  // page-locked host memory: "8GiB", "25%" of RAM, "" = half of RAM
  // ComfyUI's --fp8_e4m3fn-unet, --fp8_e5m2-unet, --fp8_e4m3fn-text-enc, --fp8_e5m2-text-enc.
  bool fp8_e4m3fn_unet = false, fp8_e5m2_unet = false;
  bool fp8_e4m3fn_text_enc = false, fp8_e5m2_text_enc = false;
};

struct MemoryPolicy {
  uint64_t budget = UINT64_MAX;  // allocator-level bytes headroom may hold (UINT64_MAX: none)
  uint64_t reserve = 0;          // bytes left for others when the budget was derived
  ResidencyMode mode = ResidencyMode::AUTO;
  // The most bytes of weights that may stay resident (LOW: half the budget, NONE: 0).
  uint64_t weights_cap = UINT64_MAX;
  std::string how;  // one line: where the budget came from
  uint64_t pinned_budget = UINT64_MAX;  // page-locked host bytes (Allocator::set_pinned_budget)
  // Models stored in fp8 at load (Note [fp8 at load] in models/weight_format.cpp); none: as the
  // file stores them, converted to the compute dtype.
  std::optional<DType> unet_weights, text_encoder_weights;
};

// Default reserve on a GPU when --reserve-vram is not given (ComfyUI's Linux default).
constexpr uint64_t kDefaultReserveVRAM = 400ull << 20;

// Resolves the flags against the device the run uses (its total and free memory at start,
// driver level). INVALID_ARGUMENT for a malformed size, a percentage outside (0, 100], a
// negative reserve, more than one of the four ComfyUI flags, or a budget of zero.
Result<MemoryPolicy> memory_policy_resolve(const MemoryArgs& args, const DeviceInfo& device);

}  // namespace hr
