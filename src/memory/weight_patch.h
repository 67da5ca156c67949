// Weight patches (LoRA and its relatives): what one adapter adds to one stored weight, and the
// ops that apply a weight's patches to a copy of it on any backend (Note [weight patches]).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// Note [weight patches]
// A patch adds a difference to a weight, ComfyUI's calculate_weight: the weight is taken in
// float32, every patch of it is added in order, and the sum is rounded once to the stored dtype.
// The differences, as their factors describe them (all float32 on the host, each shaped for the
// ops that expand it):
//   LOW_RANK   up [o, r] @ down [r, n]  (LoRA, LoCon: a mid factor is folded into down)
//   HADAMARD   (a1 [o, r] @ b1 [r, n]) * (a2 [o, r2] @ b2 [r2, n])  (LoHa)
//   KRONECKER  kron(w1 [a1, a2], w2 [b1, b2, k...])  (LoKr; factored w1/w2 multiplied already)
//   DIFF       d, the weight's shape  (full diffs, .diff / .diff_b)
// The scale (strength * alpha / rank) is folded into the first factor when the patch is made, so
// applying one is an expansion and an add. A DoRA patch (dora_scale set) keeps the strength
// apart: weight_calc = (W + scale * diff) * dora_scale / (|W| + eps) along the scale's axis, and
// W += strength * (weight_calc - W). Its multiplier dora_scale / (|W| + eps) depends on the
// weight the patch is applied to, so it is computed once on the host (dora_multiplier) from the
// unpatched host copy and the patches before it, and the ops only multiply by it.
// A patch may cover rows [row_offset, row_offset + rows) of its weight (dim 0): a q, k or v
// projection inside a fused in_proj.
enum class PatchKind : uint8_t { LOW_RANK, HADAMARD, KRONECKER, DIFF };
const char* patch_kind_name(PatchKind kind);

struct WeightPatch {
  PatchKind kind = PatchKind::LOW_RANK;
  std::vector<HostTensor> factors;  // float32, as Note [weight patches] lists them
  HostTensor dora_scale;            // float32; empty unless DoRA
  float strength = 1.0f;            // DoRA only (folded into factors[0] otherwise)
  int64_t row_offset = 0;
  int64_t rows = -1;  // -1: every row
  std::string source;  // the LoRA key stem it came from (errors, plans)

  uint64_t factor_bytes() const;
  WeightPatch clone() const;
  // The shape of the difference for a target of `stored` shape (the covered rows).
  Shape region_shape(const Shape& stored) const;
};

// One component's patches by weight name (as stored, Note [weight keys]), in the order they are
// applied, and the identity of the set (LoRA files and strengths) that caches key on.
struct PatchSet {
  std::map<std::string, std::vector<WeightPatch>, std::less<>> by_weight;
  std::string id;
  // ComfyUI's model key of a weight is this prefix and its name ("diffusion_model." for the
  // diffusion model); the seed of its stochastic rounding to fp8 (Note [fp8 patches]). Empty:
  // not known, and fp8 weights are not patched.
  std::string comfy_prefix;

  const std::vector<WeightPatch>* find(std::string_view weight) const;
  uint64_t factor_bytes() const;
};

// Checks that every patch of `weight` fits a target of shape `stored`; the error names the
// weight and the patch's source key.
Status patches_check(const std::string& weight, const Shape& stored,
                     const std::vector<WeightPatch>& patches);

// out [o, n] = a [o, r] @ b [r, n], float32 on the host (shapes already checked).
void matmul_host(const HostTensor& a, const HostTensor& b, float* out);
// The float32 difference of one patch (its covered rows), on the host: the reference the ops
// are checked against and what dora_multiplier needs.
Result<HostTensor> patch_diff_host(const WeightPatch& p, const Shape& region);
// Applies `patches` in order to `w` (float32, stored shape) on the host, DoRA included.
Status patches_apply_host(HostTensor& w, std::span<const WeightPatch> patches,
                          std::span<const HostTensor> dora_multipliers);
// DoRA's multiplier for patch `index` of `patches` on weight `w` (float32, stored shape, before
// any patch): dora_scale / (norm + eps), shaped to broadcast over the covered rows.
Result<HostTensor> dora_multiplier(const HostTensor& w, std::span<const WeightPatch> patches,
                                   size_t index);

// Device memory for applying patches: the float32 scratch, and each patch's factors (and DoRA
// multiplier) where the ops read them.
struct PatchFactorsOnDevice {
  std::vector<TensorRef> factors;
  TensorRef multiplier;  // DoRA only
};
struct PatchScratch {
  float* acc = nullptr;   // each at least patch_scratch_elems floats
  float* diff = nullptr;
  float* calc = nullptr;
  void* workspace = nullptr;  // patch_workspace_bytes
};
// Floats each scratch buffer needs for a weight whose parts have these stored shapes.
int64_t patch_scratch_elems(std::span<const Shape> parts);
// Workspace bytes the backend's ops need for `patches` (their factor products).
size_t patch_workspace_bytes(const BackendKernels& b, std::span<const WeightPatch> patches);

// One part of a target weight as it lies in device memory: `data` receives the patched tensor
// of shape `stored` in `dtype`, channels-last ([O, KH, KW, C]) when `ohwi`.
struct PatchTarget {
  void* data = nullptr;
  const void* source = nullptr;  // where the unpatched tensor is read from (null: data)
  DType dtype = DType::F32;
  Shape stored;
  bool ohwi = false;
};

// Issues on stream `s` the ops that apply `patches` (their factors at `dev`, one entry each) to
// `t` in place: cast to float32, add each difference, round back once.
Status patches_issue(Backend& b, Stream* s, const PatchTarget& t,
                     std::span<const WeightPatch> patches,
                     std::span<const PatchFactorsOnDevice> dev, const PatchScratch& scratch);

// Note [fused low-rank patches]
// The common case, plain LoRAs on a linear weight stored in f16 or bf16, has a cheaper form on a
// GPU: every patch's up (scale folded in) side by side and every down transposed, in the
// weight's dtype, make one GEMM whose epilogue adds the weight: W' = round(W + up_cat down_cat)
// with float32 accumulation and one rounding, as ComfyUI does. It reads and writes the weight
// once (4 bytes a parameter in f16, against some 28 for the float32 ops) and needs no float32
// scratch, which is what keeps a streamed step with a LoRA near the streamed step without. The
// factors must be in the weight's dtype, but ComfyUI multiplies them in float32 with the scale
// applied; rounding the scaled up to f16 flipped the last bit of ~5 % of a test weight's elements.
// So each up (the scale folded in) is split in two, its value rounded to the dtype and what that
// rounding left out, both against the same down: the product then carries the scaled factor to
// about twice the dtype's precision, and the sum is ComfyUI's but for the order of its terms. When
// every scaled up is exact in the dtype already (an f16 file with alpha = rank), the low parts
// are zero and are left out: half the factors' bytes and half the GEMM's depth. The
// downs are exact where the file stores them in the weight's dtype, as LoRA files do. Patches on
// different row slices (q, k and v inside a fused in_proj) make one group each.
struct FusedLowRank {
  HostTensor up;      // [rows, PR] in the weight's dtype: the scaled ups' high (and low) parts
  HostTensor down_t;  // [n, PR], n = the weight's elements per row: the downs P times (P = 1, 2)
  int64_t row_offset = 0;
  int64_t rows = 0;
};
// Whether `patches` on a weight of `dtype` (channels-last when `ohwi`) take the fused form.
bool patches_fusable(std::span<const WeightPatch> patches, DType dtype, bool ohwi);
// The fused groups of fusable `patches` on a weight of shape `stored`.
std::vector<FusedLowRank> patches_fuse(std::span<const WeightPatch> patches, const Shape& stored,
                                       DType dtype);
// Bytes of the fused factors (what they take on the device).
uint64_t fused_bytes(std::span<const WeightPatch> patches, DType dtype);
// One group on the device: its factors' addresses.
struct FusedOnDevice {
  TensorRef up, down_t;
  int64_t row_offset = 0, rows = 0;
};
// Workspace bytes the fused GEMM of a group needs.
size_t fused_workspace_bytes(const BackendKernels& b, const FusedOnDevice& f, const Shape& stored,
                             DType dtype);
// The most workspace the fused GEMMs of `patches` on a weight of `stored` shape ask for, from
// their shapes alone (before the factors are fused).
size_t fused_workspace_most(const BackendKernels& b, std::span<const WeightPatch> patches,
                            const Shape& stored, DType dtype);
// Issues the fused GEMMs: t.data = t.source + up_cat down_cat, group by group.
Status fused_issue(Backend& b, Stream* s, const PatchTarget& t,
                   std::span<const FusedOnDevice> groups, void* workspace, size_t workspace_bytes);

}  // namespace hr
