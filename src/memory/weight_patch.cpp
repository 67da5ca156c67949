// Weight patches: their shapes, the host reference, and the ops that apply them on a backend.
#include "memory/weight_patch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace hr {

const char* patch_kind_name(PatchKind kind) {
  switch (kind) {
    case PatchKind::LOW_RANK: return "lora";
    case PatchKind::HADAMARD: return "loha";
    case PatchKind::KRONECKER: return "lokr";
    case PatchKind::DIFF: return "diff";
  }
  return "?";
}

uint64_t WeightPatch::factor_bytes() const {
  uint64_t n = dora_scale.bytes();
  for (const HostTensor& f : factors) n += f.bytes();
  return n;
}

WeightPatch WeightPatch::clone() const {
  WeightPatch p;
  p.kind = kind;
  for (const HostTensor& f : factors) p.factors.push_back(f.clone());
  p.dora_scale = dora_scale.empty() ? HostTensor() : dora_scale.clone();
  p.strength = strength;
  p.row_offset = row_offset;
  p.rows = rows;
  p.source = source;
  return p;
}

Shape WeightPatch::region_shape(const Shape& stored) const {
  Shape s = stored;
  if (rows >= 0) s.dims[0] = rows;
  return s;
}

const std::vector<WeightPatch>* PatchSet::find(std::string_view weight) const {
  auto it = by_weight.find(weight);
  return it == by_weight.end() ? nullptr : &it->second;
}

uint64_t PatchSet::factor_bytes() const {
  uint64_t n = 0;
  for (const auto& [w, ps] : by_weight)
    for (const WeightPatch& p : ps) n += p.factor_bytes();
  return n;
}

namespace {

// The difference's numel as its factors give it.
int64_t diff_numel(const WeightPatch& p) {
  const std::vector<HostTensor>& f = p.factors;
  switch (p.kind) {
    case PatchKind::LOW_RANK:
    case PatchKind::HADAMARD: return f[0].shape()[0] * f[1].shape()[1];
    case PatchKind::KRONECKER: return f[0].numel() * f[1].numel();
    case PatchKind::DIFF: return f[0].numel();
  }
  return 0;
}

size_t factors_expected(PatchKind kind) {
  switch (kind) {
    case PatchKind::LOW_RANK: return 2;
    case PatchKind::HADAMARD: return 4;
    case PatchKind::KRONECKER: return 2;
    case PatchKind::DIFF: return 1;
  }
  return 0;
}

// Whether the product factors chain: [o, r] @ [r, n].
bool chains(const HostTensor& a, const HostTensor& b) {
  return a.shape().rank == 2 && b.shape().rank == 2 && a.shape()[1] == b.shape()[0];
}

Status patch_check(const std::string& weight, const Shape& stored, const WeightPatch& p) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}' ({}) does not fit weight '{}' {}: {}",
                      p.source, patch_kind_name(p.kind), weight, stored.str(), why);
  };
  if (p.factors.size() != factors_expected(p.kind)) return bad("wrong number of factors");
  for (const HostTensor& f : p.factors)
    if (f.dtype() != DType::F32) return bad("factors must be float32");
  if (stored.rank < 1) return bad("a scalar weight");
  if (p.rows >= 0 && (p.row_offset < 0 || p.row_offset + p.rows > stored[0]))
    return bad(fmt::format("rows {}..{} outside the weight", p.row_offset, p.row_offset + p.rows));
  const Shape region = p.region_shape(stored);
  if (p.kind == PatchKind::LOW_RANK && !chains(p.factors[0], p.factors[1]))
    return bad(fmt::format("up {} and down {} do not chain", p.factors[0].shape().str(),
                           p.factors[1].shape().str()));
  if (p.kind == PatchKind::HADAMARD &&
      (!chains(p.factors[0], p.factors[1]) || !chains(p.factors[2], p.factors[3]) ||
       p.factors[0].shape()[0] != p.factors[2].shape()[0] ||
       p.factors[1].shape()[1] != p.factors[3].shape()[1]))
    return bad("the two products differ in shape");
  if (p.kind == PatchKind::KRONECKER &&
      (p.factors[0].shape().rank != 2 || p.factors[1].shape().rank < 2 ||
       p.factors[1].shape().rank + 2 > kMaxDims ||
       p.factors[0].shape()[0] * p.factors[1].shape()[0] != region[0]))
    return bad(fmt::format("kron of {} and {}", p.factors[0].shape().str(),
                           p.factors[1].shape().str()));
  if (diff_numel(p) != region.numel())
    return bad(fmt::format("the difference has {} elements, the weight {}", diff_numel(p),
                           region.numel()));
  if (p.kind == PatchKind::LOW_RANK && p.factors[0].shape()[0] != region[0])
    return bad(fmt::format("up has {} rows", p.factors[0].shape()[0]));
  const bool dora_fits = p.dora_scale.shape().rank > 0 && p.dora_scale.shape()[0] == region[0]
                            ? p.dora_scale.numel() == region[0]
                            : region.rank >= 2 && p.dora_scale.numel() == region[1];
  if (!p.dora_scale.empty() && !dora_fits)
    return bad(fmt::format("dora_scale {} fits neither axis", p.dora_scale.shape().str()));
  return Status();
}

}  // namespace

Status patches_check(const std::string& weight, const Shape& stored,
                     const std::vector<WeightPatch>& patches) {
  for (const WeightPatch& p : patches) HR_TRY(patch_check(weight, stored, p));
  return Status();
}

// ---- host reference ----

void matmul_host(const HostTensor& a, const HostTensor& b, float* out) {
  const int64_t o = a.shape()[0], r = a.shape()[1], n = b.shape()[1];
  std::memset(out, 0, size_t(o * n) * sizeof(float));
  for (int64_t i = 0; i < o; ++i)
    for (int64_t k = 0; k < r; ++k) {
      const float av = a.f32()[i * r + k];
      const float* brow = b.f32() + k * n;
      float* orow = out + i * n;
      for (int64_t j = 0; j < n; ++j) orow[j] += av * brow[j];
    }
}

namespace {

void kron_host(const HostTensor& w1, const HostTensor& w2, float* out) {
  const int64_t a1 = w1.shape()[0], a2 = w1.shape()[1];
  const int64_t b1 = w2.shape()[0], b2 = w2.shape()[1], k = w2.numel() / (b1 * b2);
  for (int64_t i = 0; i < a1; ++i)
    for (int64_t p = 0; p < b1; ++p)
      for (int64_t j = 0; j < a2; ++j)
        for (int64_t q = 0; q < b2; ++q) {
          const float s = w1.f32()[i * a2 + j];
          const float* src = w2.f32() + (p * b2 + q) * k;
          float* dst = out + (((i * b1 + p) * a2 + j) * b2 + q) * k;
          for (int64_t e = 0; e < k; ++e) dst[e] = s * src[e];
        }
}

}  // namespace

Result<HostTensor> patch_diff_host(const WeightPatch& p, const Shape& region) {
  HostTensor d(DType::F32, region);
  const std::vector<HostTensor>& f = p.factors;
  switch (p.kind) {
    case PatchKind::LOW_RANK: matmul_host(f[0], f[1], d.f32()); break;
    case PatchKind::HADAMARD: {
      HostTensor t(DType::F32, region);
      matmul_host(f[0], f[1], d.f32());
      matmul_host(f[2], f[3], t.f32());
      for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] *= t.f32()[i];
      break;
    }
    case PatchKind::KRONECKER: kron_host(f[0], f[1], d.f32()); break;
    case PatchKind::DIFF: std::memcpy(d.data(), f[0].data(), d.bytes()); break;
  }
  return d;
}

namespace {

// ComfyUI's weight_decompose: the scale is per output row when its first dim is the weight's.
bool dora_out_axis(const WeightPatch& p, const Shape& region) {
  return p.dora_scale.shape().rank > 0 && p.dora_scale.shape()[0] == region[0];
}

// ComfyUI's weight_decompose norm: per row of the region (output axis), or per column over the
// region plus the difference (input axis); + float32's epsilon.
HostTensor dora_norm_multiplier(const WeightPatch& p, const float* region, const float* diff,
                                const Shape& shape) {
  const int64_t rows = shape[0], cols = shape.rank > 1 ? shape[1] : 1;
  const int64_t inner = shape.numel() / (rows * cols);
  const bool out_axis = dora_out_axis(p, shape);
  const int64_t n = out_axis ? rows : cols;
  std::vector<double> sq(size_t(n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t e = 0; e < inner; ++e) {
        const int64_t i = (r * cols + c) * inner + e;
        const double v = out_axis ? region[i] : double(region[i] + diff[i]);
        sq[size_t(out_axis ? r : c)] += v * v;
      }
  Shape ms;
  ms.rank = shape.rank;
  for (int i = 0; i < shape.rank; ++i) ms.dims[i] = 1;
  ms.dims[out_axis ? 0 : 1] = n;
  HostTensor m(DType::F32, ms);
  const float eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < n; ++i)
    m.f32()[i] = p.dora_scale.f32()[i] / (float(std::sqrt(sq[size_t(i)])) + eps);
  return m;
}

// Applies one patch to `region` (float32, `shape`), with DoRA's multiplier `m` if it has one.
void patch_apply_region(const WeightPatch& p, float* region, const float* diff, const Shape& shape,
                        const HostTensor& m) {
  const int64_t n = shape.numel();
  if (p.dora_scale.empty()) {
    for (int64_t i = 0; i < n; ++i) region[i] += diff[i];
    return;
  }
  const bool out_axis = dora_out_axis(p, shape);
  const int64_t cols = shape.rank > 1 ? shape[1] : 1, inner = n / (shape[0] * cols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / (cols * inner), c = (i / inner) % cols;
    const float calc = (region[i] + diff[i]) * m.f32()[out_axis ? r : c];
    region[i] = p.strength == 1.0f ? calc : region[i] + p.strength * (calc - region[i]);
  }
}

int64_t row_elems(const Shape& s) { return s[0] == 0 ? 0 : s.numel() / s[0]; }

}  // namespace

Status patches_apply_host(HostTensor& w, std::span<const WeightPatch> patches,
                          std::span<const HostTensor> dora_multipliers) {
  for (size_t i = 0; i < patches.size(); ++i) {
    const WeightPatch& p = patches[i];
    const Shape region = p.region_shape(w.shape());
    HR_ASSIGN_OR_RETURN(HostTensor d, patch_diff_host(p, region));
    float* at = w.f32() + (p.rows >= 0 ? p.row_offset * row_elems(w.shape()) : 0);
    if (!p.dora_scale.empty() && (i >= dora_multipliers.size() || dora_multipliers[i].empty()))
      return make_error(ErrorCode::INTERNAL, "DoRA patch '{}' without its multiplier", p.source);
    patch_apply_region(p, at, d.f32(), region,
                       p.dora_scale.empty() ? HostTensor() : dora_multipliers[i].clone());
  }
  return Status();
}

Result<HostTensor> dora_multiplier(const HostTensor& w, std::span<const WeightPatch> patches,
                                   size_t index) {
  HostTensor acc = w.to(DType::F32);
  std::vector<HostTensor> ms;
  for (size_t i = 0; i <= index; ++i) {
    const WeightPatch& p = patches[i];
    HostTensor m;
    if (!p.dora_scale.empty()) {
      const Shape region = p.region_shape(acc.shape());
      HR_ASSIGN_OR_RETURN(HostTensor d, patch_diff_host(p, region));
      const float* at = acc.f32() + (p.rows >= 0 ? p.row_offset * row_elems(acc.shape()) : 0);
      m = dora_norm_multiplier(p, at, d.f32(), region);
      if (i == index) return m;
    }
    ms.push_back(std::move(m));
    HR_TRY(patches_apply_host(acc, patches.subspan(i, 1), std::span(ms).subspan(i, 1)));
  }
  return make_error(ErrorCode::INTERNAL, "patch {} is not a DoRA patch", index);
}

// ---- the ops ----

int64_t patch_scratch_elems(std::span<const Shape> parts) {
  int64_t n = 0;
  for (const Shape& s : parts) n = std::max(n, s.numel());
  return n;
}

namespace {

struct OpRun {
  Backend& b;
  Stream* s;
  void* workspace;

  Status operator()(OpKind kind, const OpParams& params, std::vector<TensorRef> in,
                    TensorRef out) const {
    OpCall c;
    c.kind = kind;
    c.params = &params;
    c.inputs = in;
    c.output = out;
    std::vector<TensorDesc> descs;
    for (const TensorRef& r : in) descs.push_back(r.desc);
    c.workspace_bytes = b.op_workspace(kind, params, descs, out.desc);
    c.workspace = c.workspace_bytes ? workspace : nullptr;
    return b.op_run(c, s);
  }
};

TensorRef f32_ref(float* p, const Shape& s) { return TensorRef{TensorDesc{DType::F32, s}, p}; }

Shape shape_2d(int64_t a, int64_t b) { return Shape{a, b}; }

// The kron's operands as broadcasting views: w1 [a1, 1, a2, 1, 1...], w2 [1, b1, 1, b2, k...].
std::pair<TensorRef, TensorRef> kron_views(const PatchFactorsOnDevice& d, const WeightPatch& p) {
  const Shape& s2 = p.factors[1].shape();
  Shape v1, v2;
  v1.rank = v2.rank = s2.rank + 2;
  for (int i = 0; i < v1.rank; ++i) v1.dims[i] = v2.dims[i] = 1;
  v1.dims[0] = p.factors[0].shape()[0];
  v1.dims[2] = p.factors[0].shape()[1];
  v2.dims[1] = s2[0];
  v2.dims[3] = s2[1];
  for (int i = 2; i < s2.rank; ++i) v2.dims[i + 2] = s2[i];
  return {TensorRef{TensorDesc{DType::F32, v1}, d.factors[0].data},
          TensorRef{TensorDesc{DType::F32, v2}, d.factors[1].data}};
}

Shape kron_out(const std::pair<TensorRef, TensorRef>& v) {
  Shape o = v.first.desc.shape;
  for (int i = 0; i < o.rank; ++i) o.dims[i] = std::max(o.dims[i], v.second.desc.shape.dims[i]);
  return o;
}

// The patch's difference, computed into scratch.diff (scratch.calc as a temporary), or the
// factor itself for DIFF.
Result<TensorRef> diff_issue(const OpRun& run, const WeightPatch& p, const PatchFactorsOnDevice& d,
                             const Shape& region, const PatchScratch& scratch) {
  const OpParams none;
  const std::vector<TensorRef>& f = d.factors;
  switch (p.kind) {
    case PatchKind::DIFF: return TensorRef{TensorDesc{DType::F32, region}, f[0].data};
    case PatchKind::LOW_RANK: {
      const Shape o = shape_2d(f[0].desc.shape[0], f[1].desc.shape[1]);
      HR_TRY(run(OpKind::MATMUL, none, {f[0], f[1]}, f32_ref(scratch.diff, o)));
      return f32_ref(scratch.diff, region);
    }
    case PatchKind::HADAMARD: {
      const Shape o = shape_2d(f[0].desc.shape[0], f[1].desc.shape[1]);
      HR_TRY(run(OpKind::MATMUL, none, {f[0], f[1]}, f32_ref(scratch.diff, o)));
      HR_TRY(run(OpKind::MATMUL, none, {f[2], f[3]}, f32_ref(scratch.calc, o)));
      HR_TRY(run(OpKind::MUL, none, {f32_ref(scratch.diff, o), f32_ref(scratch.calc, o)},
                 f32_ref(scratch.diff, o)));
      return f32_ref(scratch.diff, region);
    }
    case PatchKind::KRONECKER: {
      const auto views = kron_views(d, p);
      HR_TRY(run(OpKind::MUL, none, {views.first, views.second},
                 f32_ref(scratch.diff, kron_out(views))));
      return f32_ref(scratch.diff, region);
    }
  }
  return make_error(ErrorCode::INTERNAL, "unknown patch kind");
}

// region += diff, or DoRA's decomposition (Note [weight patches]).
Status add_issue(const OpRun& run, const WeightPatch& p, const PatchFactorsOnDevice& d,
                 TensorRef region, TensorRef diff, const PatchScratch& scratch) {
  const OpParams none;
  if (p.dora_scale.empty()) return run(OpKind::ADD, none, {region, diff}, region);
  const TensorRef calc = f32_ref(scratch.calc, region.desc.shape);
  HR_TRY(run(OpKind::ADD, none, {region, diff}, calc));
  HR_TRY(run(OpKind::MUL, none, {calc, d.multiplier}, calc));
  if (p.strength == 1.0f) return run(OpKind::COPY, none, {calc}, region);
  HR_TRY(run(OpKind::SUB, none, {calc, region}, calc));
  OpParams scale;
  scale.alpha = p.strength;
  HR_TRY(run(OpKind::SCALE, scale, {calc}, calc));
  return run(OpKind::ADD, none, {region, calc}, region);
}

Shape ohwi_of(const Shape& s) { return Shape{s[0], s[2], s[3], s[1]}; }

}  // namespace

size_t patch_workspace_bytes(const BackendKernels& b, std::span<const WeightPatch> patches) {
  size_t n = 0;
  const OpParams none;
  for (const WeightPatch& p : patches) {
    if (p.kind != PatchKind::LOW_RANK && p.kind != PatchKind::HADAMARD) continue;
    for (size_t i = 0; i + 1 < p.factors.size(); i += 2) {
      const TensorDesc a{DType::F32, p.factors[i].shape()}, c{DType::F32, p.factors[i + 1].shape()};
      const TensorDesc out{DType::F32, shape_2d(a.shape[0], c.shape[1])};
      const TensorDesc in[2] = {a, c};
      n = std::max(n, b.op_workspace(OpKind::MATMUL, none, in, out));
    }
  }
  return n;
}

Status patches_issue(Backend& b, Stream* s, const PatchTarget& t,
                     std::span<const WeightPatch> patches,
                     std::span<const PatchFactorsOnDevice> dev, const PatchScratch& scratch) {
  const OpRun run{b, s, scratch.workspace};
  const OpParams none;
  void* src = const_cast<void*>(t.source ? t.source : t.data);
  const TensorRef acc = f32_ref(scratch.acc, t.stored);
  if (t.ohwi) {  // the op reads its filter channels-last: patch in the stored layout between
    OpParams to_oihw;
    to_oihw.perm[0] = 0, to_oihw.perm[1] = 3, to_oihw.perm[2] = 1, to_oihw.perm[3] = 2;
    const TensorRef calc = f32_ref(scratch.calc, ohwi_of(t.stored));
    OpParams cast;
    cast.dtype = DType::F32;
    HR_TRY(run(OpKind::CAST, cast, {TensorRef{TensorDesc{t.dtype, calc.desc.shape}, src}}, calc));
    HR_TRY(run(OpKind::PERMUTE, to_oihw, {calc}, acc));
  } else {
    OpParams cast;
    cast.dtype = DType::F32;
    HR_TRY(run(OpKind::CAST, cast, {TensorRef{TensorDesc{t.dtype, t.stored}, src}}, acc));
  }
  const int64_t row = row_elems(t.stored);
  for (size_t i = 0; i < patches.size(); ++i) {
    const WeightPatch& p = patches[i];
    const Shape region = p.region_shape(t.stored);
    const TensorRef at = f32_ref(scratch.acc + (p.rows >= 0 ? p.row_offset * row : 0), region);
    HR_ASSIGN_OR_RETURN(TensorRef diff, diff_issue(run, p, dev[i], region, scratch));
    HR_TRY(add_issue(run, p, dev[i], at, diff, scratch).with_context("LoRA key '" + p.source + "'"));
  }
  OpParams back;
  back.dtype = t.dtype;
  if (!t.ohwi) return run(OpKind::CAST, back, {acc}, TensorRef{TensorDesc{t.dtype, t.stored}, t.data});
  OpParams to_ohwi;
  to_ohwi.perm[0] = 0, to_ohwi.perm[1] = 2, to_ohwi.perm[2] = 3, to_ohwi.perm[3] = 1;
  const TensorRef calc = f32_ref(scratch.calc, ohwi_of(t.stored));
  HR_TRY(run(OpKind::PERMUTE, to_ohwi, {acc}, calc));
  return run(OpKind::CAST, back, {calc}, TensorRef{TensorDesc{t.dtype, calc.desc.shape}, t.data});
}

// ---- fused low-rank patches (Note [fused low-rank patches]) ----

namespace {

// `v` rounded to `dtype` and back.
float dtype_round(float v, DType dtype) {
  if (dtype == DType::F16) return f16_to_f32(f32_to_f16(v));
  if (dtype == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

// Whether every value of `t` is exact in `dtype` (a LoRA file's f16 downs are; LoCon's folded ones
// are not).
bool exact_in(const HostTensor& t, DType dtype) {
  if (dtype == DType::F32 || t.is_placeholder()) return true;
  const float* v = t.f32();
  int64_t inexact = 0;
#pragma omp parallel for reduction(+ : inexact) if (t.numel() > (1 << 16))
  for (int64_t i = 0; i < t.numel(); ++i) inexact += dtype_round(v[i], dtype) != v[i];
  return inexact == 0;
}

// The parts each up is split into (Note [fused low-rank patches]): one in float32, or when every
// scaled up is exact in `dtype` (an f16 file's ups with alpha = rank); else two. A placeholder
// (a plan run) counts as two: the plan may overstate the factors' bytes, never understate them.
int64_t up_parts(std::span<const WeightPatch> patches, DType dtype) {
  if (dtype == DType::F32) return 1;
  for (const WeightPatch& p : patches)
    if (p.factors[0].is_placeholder() || !exact_in(p.factors[0], dtype)) return 2;
  return 1;
}

}  // namespace

bool patches_fusable(std::span<const WeightPatch> patches, DType dtype, bool ohwi) {
  if (ohwi || patches.empty()) return false;
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return false;
  for (const WeightPatch& p : patches)
    if (p.kind != PatchKind::LOW_RANK || !p.dora_scale.empty() || !exact_in(p.factors[1], dtype))
      return false;
  return true;
}

namespace {

// The patches' distinct row slices, in first-seen order.
std::vector<std::pair<int64_t, int64_t>> slices_of(std::span<const WeightPatch> patches,
                                                   const Shape& stored) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const WeightPatch& p : patches) {
    const std::pair<int64_t, int64_t> s =
        p.rows >= 0 ? std::pair{p.row_offset, p.rows} : std::pair{int64_t(0), stored[0]};
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

bool covers(const WeightPatch& p, std::pair<int64_t, int64_t> s, const Shape& stored) {
  return p.rows >= 0 ? p.row_offset == s.first && p.rows == s.second
                     : s.first == 0 && s.second == stored[0];
}

}  // namespace

std::vector<FusedLowRank> patches_fuse(std::span<const WeightPatch> patches, const Shape& stored,
                                       DType dtype) {
  std::vector<FusedLowRank> out;
  const int64_t n = row_elems(stored);
  for (const auto& s : slices_of(patches, stored)) {
    int64_t rank = 0;
    for (const WeightPatch& p : patches)
      if (covers(p, s, stored)) rank += p.factors[0].shape()[1];
    // Columns [0, rank): up's high part; [rank, 2 rank): its low part, each against down.
    const int64_t parts = up_parts(patches, dtype), width = parts * rank;
    HostTensor up(DType::F32, Shape{s.second, width}), down_t(DType::F32, Shape{n, width});
    int64_t at = 0;
    for (const WeightPatch& p : patches) {
      if (!covers(p, s, stored)) continue;
      const int64_t r = p.factors[0].shape()[1];
      const bool ph = p.factors[0].is_placeholder() || p.factors[1].is_placeholder();
#pragma omp parallel for if (s.second * r > (1 << 16))
      for (int64_t i = 0; i < (ph ? 0 : s.second); ++i)
        for (int64_t k = 0; k < r; ++k) {
          const float v = p.factors[0].f32()[i * r + k];
          const float hi = parts == 1 ? v : dtype_round(v, dtype);
          up.f32()[i * width + at + k] = hi;
          if (parts == 2) up.f32()[i * width + rank + at + k] = v - hi;
        }
#pragma omp parallel for if (n * r > (1 << 16))
      for (int64_t c = 0; c < (ph ? 0 : n); ++c)  // by output row: each thread writes its own
        for (int64_t k = 0; k < r; ++k) {
          const float v = p.factors[1].f32()[k * n + c];
          for (int64_t q = 0; q < parts; ++q) down_t.f32()[c * width + q * rank + at + k] = v;
        }
      at += r;
    }
    out.push_back(FusedLowRank{up.to(dtype), down_t.to(dtype), s.first, s.second});
  }
  return out;
}

uint64_t fused_bytes(std::span<const WeightPatch> patches, DType dtype) {
  uint64_t n = 0;
  for (const WeightPatch& p : patches) n += uint64_t(p.factors[0].numel() + p.factors[1].numel());
  // Note [fused low-rank patches]: the parts of each up, each against its down.
  return uint64_t(up_parts(patches, dtype)) * n * dtype_size(dtype);
}

namespace {

struct FusedCall {
  OpParams params;
  std::vector<TensorRef> in;
  TensorRef out;
};

// LINEAR with add_input: rows of t.data = rows of t.source + up @ down_t^T.
FusedCall fused_call(const PatchTarget& t, const FusedOnDevice& f) {
  FusedCall c;
  c.params.add_input = true;
  const int64_t n = row_elems(t.stored);
  const size_t offset = size_t(f.row_offset * n) * dtype_size(t.dtype);
  const TensorDesc rows{t.dtype, Shape{f.rows, n}};
  const void* src = t.source ? t.source : t.data;
  c.in = {f.up, f.down_t,
          TensorRef{rows, const_cast<char*>(static_cast<const char*>(src) + offset)}};
  c.out = TensorRef{rows, static_cast<char*>(t.data) + offset};
  return c;
}

}  // namespace

size_t fused_workspace_bytes(const BackendKernels& b, const FusedOnDevice& f, const Shape& stored,
                             DType dtype) {
  PatchTarget t{nullptr, nullptr, dtype, stored, false};
  const FusedCall c = fused_call(t, f);
  std::vector<TensorDesc> descs;
  for (const TensorRef& r : c.in) descs.push_back(r.desc);
  return b.op_workspace(OpKind::LINEAR, c.params, descs, c.out.desc);
}

size_t fused_workspace_most(const BackendKernels& b, std::span<const WeightPatch> patches,
                            const Shape& stored, DType dtype) {
  int64_t rank = 0;
  for (const WeightPatch& p : patches) rank += p.factors[0].shape()[1];
  const int64_t width = up_parts(patches, dtype) * rank, n = row_elems(stored);
  size_t most = 0;
  for (const auto& s : slices_of(patches, stored)) {
    FusedOnDevice f{TensorRef{TensorDesc{dtype, Shape{s.second, width}}, nullptr},
                    TensorRef{TensorDesc{dtype, Shape{n, width}}, nullptr}, s.first, s.second};
    most = std::max(most, fused_workspace_bytes(b, f, stored, dtype));
  }
  return most;
}

Status fused_issue(Backend& b, Stream* s, const PatchTarget& t,
                   std::span<const FusedOnDevice> groups, void* workspace, size_t workspace_bytes) {
  for (const FusedOnDevice& f : groups) {
    const FusedCall fc = fused_call(t, f);
    OpCall c;
    c.kind = OpKind::LINEAR;
    c.params = &fc.params;
    c.inputs = fc.in;
    c.output = fc.out;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    HR_TRY(b.op_run(c, s));
  }
  return Status();
}

}  // namespace hr
