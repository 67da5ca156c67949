// Budget and residency policy from the command-line flags.
#include "memory/budget.h"

#include <unistd.h>

#include <cmath>

#include "core/bytes.h"

namespace hr {

// Note [budget flags]
// The budget is what the allocator will hold at most (allocator level), so a 4 GiB budget on
// a 140 GiB card behaves like a 4 GiB card. `--vram-budget` takes a size ("6GiB", "6144MiB")
// or a percentage of the device's total memory ("40%"). Without it the budget is the device's
// free memory at start (driver level, so other processes' usage is left alone) less the reserve:
// ComfyUI's `--reserve-vram` in GiB, 400 MiB by default on a GPU (ComfyUI's Linux default)
// and 1 GiB of host RAM on the CPU. ComfyUI's VRAM-state flags keep their meaning as residency
// policies over that budget: --lowvram streams weights beyond half the budget, --novram keeps
// no weight resident between uses, --highvram keeps models resident after their prompt, and
// --gpu-only keeps everything resident and never streams. They are mutually exclusive, as in
// ComfyUI.

const char* residency_mode_name(ResidencyMode m) {
  switch (m) {
    case ResidencyMode::AUTO: return "auto";
    case ResidencyMode::LOW: return "lowvram";
    case ResidencyMode::NONE: return "novram";
    case ResidencyMode::HIGH: return "highvram";
    case ResidencyMode::GPU_ONLY: return "gpu-only";
  }
  return "?";
}

namespace {

Result<uint64_t> budget_from_text(const std::string& text, uint64_t total,
                                  const char* flag = "--vram-budget") {
  if (!text.empty() && text.back() == '%') {
    double pct = 0;
    try {
      size_t used = 0;
      pct = std::stod(text.substr(0, text.size() - 1), &used);
      if (used != text.size() - 1) pct = -1;
    } catch (const std::exception&) {
      pct = -1;
    }
    if (!(pct > 0 && pct <= 100))
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "{} '{}': a percentage must be in (0, 100]", flag, text);
    return uint64_t(std::floor(double(total) * pct / 100.0));
  }
  Result<uint64_t> b = bytes_parse(text);
  if (!b.ok()) return b.status().with_context(flag);
  return *b;
}

// Physical RAM (0 when unknown).
uint64_t host_ram() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

// The fp8 storage flags: at most one per component.
Status fp8_flags_resolve(const MemoryArgs& args, MemoryPolicy& p) {
  if (args.fp8_e4m3fn_unet && args.fp8_e5m2_unet)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "--fp8_e4m3fn-unet and --fp8_e5m2-unet exclude each other");
  if (args.fp8_e4m3fn_text_enc && args.fp8_e5m2_text_enc)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "--fp8_e4m3fn-text-enc and --fp8_e5m2-text-enc exclude each other");
  if (args.fp8_e4m3fn_unet) p.unet_weights = DType::F8_E4M3;
  if (args.fp8_e5m2_unet) p.unet_weights = DType::F8_E5M2;
  if (args.fp8_e4m3fn_text_enc) p.text_encoder_weights = DType::F8_E4M3;
  if (args.fp8_e5m2_text_enc) p.text_encoder_weights = DType::F8_E5M2;
  return Status();
}

Result<MemoryPolicy> memory_policy_resolve(const MemoryArgs& args, const DeviceInfo& device) {
  MemoryPolicy p;
  int modes = int(args.lowvram) + int(args.novram) + int(args.highvram) + int(args.gpu_only);
  if (modes > 1)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "--lowvram, --novram, --highvram and --gpu-only exclude each other");
  if (args.lowvram) p.mode = ResidencyMode::LOW;
  if (args.novram) p.mode = ResidencyMode::NONE;
  if (args.highvram) p.mode = ResidencyMode::HIGH;
  if (args.gpu_only) p.mode = ResidencyMode::GPU_ONLY;

  if (args.reserve_vram && !(*args.reserve_vram >= 0 && std::isfinite(*args.reserve_vram)))
    return make_error(ErrorCode::INVALID_ARGUMENT, "--reserve-vram must be a number of GiB >= 0");
  const bool gpu = device.kind == "cuda";
  p.reserve = args.reserve_vram ? uint64_t(std::llround(std::ldexp(*args.reserve_vram, 30)))
                                : (gpu ? kDefaultReserveVRAM : (1ull << 30));

  if (!args.vram_budget.empty()) {
    HR_ASSIGN_OR_RETURN(p.budget, budget_from_text(args.vram_budget, device.memory_total));
    p.how = fmt::format("--vram-budget {}", args.vram_budget);
  } else if (device.memory_free > 0) {
    p.budget = device.memory_free > p.reserve ? device.memory_free - p.reserve : 0;
    p.how = fmt::format("{} free on {} at start less {} reserved", bytes_format(device.memory_free),
                        device.name, bytes_format(p.reserve));
  } else {
    p.how = "no free-memory figure for the device: unlimited";
  }
  if (p.budget == 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "the memory budget is zero ({})", p.how);

  if (p.mode == ResidencyMode::LOW) p.weights_cap = p.budget / 2;
  if (p.mode == ResidencyMode::NONE) p.weights_cap = 0;
  // Note [pinned budget] in backend/allocator.cpp: half the RAM unless told.
  const uint64_t ram = host_ram();
  if (!args.pinned_budget.empty()) {
    HR_ASSIGN_OR_RETURN(p.pinned_budget,
                        budget_from_text(args.pinned_budget, ram, "--pinned-budget"));
  } else if (ram > 0) {
    p.pinned_budget = ram / 2;
  }
  HR_TRY(fp8_flags_resolve(args, p));
  return p;
}

}  // namespace hr
