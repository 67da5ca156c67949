// LoRA files: ComfyUI's key forms per adapter, read into float32 factors with the scale folded in
// (Note [weight patches] in memory/weight_patch.h).
#include "models/lora_file.h"

#include <algorithm>
#include <optional>
#include <set>

namespace hr {
namespace {

// Reads a file's tensors as float32 and remembers which keys were taken.
struct Reader {
  const SafetensorsFile& file;
  std::set<std::string> loaded;

  bool has(const std::string& key) const { return file.contains(key); }
  Result<HostTensor> get(const std::string& key) {
    loaded.insert(key);
    Result<HostTensor> t = file.load(key, DType::F32);
    if (!t.ok()) return t.status().with_context(fmt::format("LoRA key '{}'", key));
    return t;
  }
};

HostTensor flat2(HostTensor t) {
  const Shape s = t.shape();
  if (s.rank == 2) return t;
  const int64_t rows = s.rank == 0 ? 1 : s[0];
  return std::move(t).reshaped(Shape{rows, rows == 0 ? 0 : s.numel() / rows});
}

// Note [placeholder tensors] in core/tensor.h: a plan run reads the file's shapes only; its
// factors are read-only zeros, which the arithmetic here leaves as they are (or, for a product,
// answers with a placeholder of the product's shape).
HostTensor times(HostTensor t, float s) {
  if (s != 1.0f && !t.is_placeholder())
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] *= s;
  return t;
}

Result<HostTensor> mm(const HostTensor& a, const HostTensor& b, const std::string& what) {
  if (a.shape().rank != 2 || b.shape().rank != 2 || a.shape()[1] != b.shape()[0])
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}': factors {} and {} do not chain",
                      what, a.shape().str(), b.shape().str());
  const int64_t o = a.shape()[0], n = b.shape()[1];
  if (a.is_placeholder() || b.is_placeholder())
    return HostTensor::placeholder(TensorDesc{DType::F32, Shape{o, n}});
  HostTensor out(DType::F32, Shape{o, n});
  matmul_host(a, b, out.f32());
  return out;
}

// The scale ComfyUI applies: the strength times alpha / rank (1 without alpha), folded into the
// first factor; DoRA keeps the strength apart (Note [weight patches]).
WeightPatch patch_make(PatchKind kind, std::vector<HostTensor> f, std::optional<float> alpha,
                       int64_t rank, float strength, HostTensor dora) {
  const float scale = alpha && rank > 0 ? *alpha / float(rank) : 1.0f;
  WeightPatch p;
  p.kind = kind;
  p.dora_scale = dora.empty() ? HostTensor() : dora.to(DType::F32);
  p.strength = strength;
  f[0] = times(std::move(f[0]), p.dora_scale.empty() ? strength * scale : scale);
  p.factors = std::move(f);
  return p;
}

struct LoraForm {
  const char* up;
  const char* down;
  const char* mid;
};
// comfy/weight_adapter/lora.py's forms, in its order.
constexpr LoraForm kLoraForms[] = {
    {".lora_up.weight", ".lora_down.weight", ".lora_mid.weight"},
    {"_lora.up.weight", "_lora.down.weight", nullptr},
    {".lora_B.weight", ".lora_A.weight", nullptr},
    {".lora.up.weight", ".lora.down.weight", nullptr},
    {".lora_B", ".lora_A", nullptr},
    {".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight", nullptr},
    {".lora_B.default.weight", ".lora_A.default.weight", nullptr},
};

// LoCon's mid factor folded into down: down'[j, i, k, l] = sum_m mid[j, m, k, l] down[m, i].
Result<HostTensor> locon_fold(const HostTensor& down, const HostTensor& mid, const std::string& x) {
  const Shape ms = mid.shape();
  if (ms.rank != 4 || ms[1] != down.shape()[0])
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}': mid {} does not fit down {}", x,
                      ms.str(), down.shape().str());
  const int64_t r = ms[0], m = ms[1], kk = ms[2] * ms[3], in = down.numel() / down.shape()[0];
  if (down.is_placeholder() || mid.is_placeholder())
    return HostTensor::placeholder(TensorDesc{DType::F32, Shape{r, in * kk}});
  HostTensor out(DType::F32, Shape{r, in * kk});
  for (int64_t j = 0; j < r; ++j)
    for (int64_t mm_ = 0; mm_ < m; ++mm_)
      for (int64_t i = 0; i < in; ++i) {
        const float d = down.f32()[mm_ * in + i];
        for (int64_t e = 0; e < kk; ++e)
          out.f32()[(j * in + i) * kk + e] += mid.f32()[(j * m + mm_) * kk + e] * d;
      }
  return out;
}

using Found = std::optional<WeightPatch>;

Result<Found> lora_read(Reader& r, const std::string& x, std::optional<float> alpha, float s,
                        HostTensor& dora) {
  for (const LoraForm& f : kLoraForms) {
    if (!r.has(x + f.up)) continue;
    HR_ASSIGN_OR_RETURN(HostTensor up, r.get(x + f.up));
    HR_ASSIGN_OR_RETURN(HostTensor down, r.get(x + f.down));
    const int64_t rank = down.shape().rank > 0 ? down.shape()[0] : 0;
    if (f.mid && r.has(x + f.mid)) {
      HR_ASSIGN_OR_RETURN(HostTensor mid, r.get(x + f.mid));
      HR_ASSIGN_OR_RETURN(down, locon_fold(flat2(std::move(down)), mid, x));
    }
    std::vector<HostTensor> fs;
    fs.push_back(flat2(std::move(up)));
    fs.push_back(flat2(std::move(down)));
    return Found(patch_make(PatchKind::LOW_RANK, std::move(fs), alpha, rank, s, std::move(dora)));
  }
  return Found();
}

// LoHa's CP form: m[p, r, k, l] = sum_i sum_j t[i, j, k, l] wb[j, r] wa[i, p].
Result<HostTensor> cp_expand(const HostTensor& t, const HostTensor& wb, const HostTensor& wa,
                             const std::string& x) {
  const Shape ts = t.shape();
  if (ts.rank != 4 || wa.shape().rank != 2 || wb.shape().rank != 2 || wa.shape()[0] != ts[0] ||
      wb.shape()[0] != ts[1])
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}': CP factors {} {} {} do not fit",
                      x, ts.str(), wb.shape().str(), wa.shape().str());
  const int64_t I = ts[0], J = ts[1], K = ts[2] * ts[3], R = wb.shape()[1], P = wa.shape()[1];
  if (t.is_placeholder() || wb.is_placeholder() || wa.is_placeholder())
    return HostTensor::placeholder(TensorDesc{DType::F32, Shape{P, R, ts[2], ts[3]}});
  HostTensor tb(DType::F32, Shape{I, R, K});  // sum_j t[i, j, k] wb[j, r]
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j)
      for (int64_t r = 0; r < R; ++r) {
        const float b = wb.f32()[j * R + r];
        for (int64_t k = 0; k < K; ++k)
          tb.f32()[(i * R + r) * K + k] += t.f32()[(i * J + j) * K + k] * b;
      }
  HostTensor m(DType::F32, Shape{P, R, ts[2], ts[3]});
  for (int64_t i = 0; i < I; ++i)
    for (int64_t p = 0; p < P; ++p) {
      const float a = wa.f32()[i * P + p];
      for (int64_t e = 0; e < R * K; ++e) m.f32()[p * R * K + e] += tb.f32()[i * R * K + e] * a;
    }
  return m;
}

// LoHa with hada_t1/hada_t2: both products expanded on the host into a full difference.
Result<Found> loha_cp_read(Reader& r, const std::string& x, std::optional<float> alpha, float s,
                           HostTensor& dora) {
  std::vector<HostTensor> f;
  for (const char* n : {".hada_w1_a", ".hada_w1_b", ".hada_t1", ".hada_w2_a", ".hada_w2_b",
                        ".hada_t2"}) {
    HR_ASSIGN_OR_RETURN(HostTensor t, r.get(x + n));
    f.push_back(std::move(t));
  }
  HR_ASSIGN_OR_RETURN(HostTensor m1, cp_expand(f[2], f[1], f[0], x));
  HR_ASSIGN_OR_RETURN(HostTensor m2, cp_expand(f[5], f[4], f[3], x));
  if (m1.shape() != m2.shape())
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}': LoHa products {} and {} differ",
                      x, m1.shape().str(), m2.shape().str());
  if (!m1.is_placeholder() && !m2.is_placeholder())
    for (int64_t i = 0; i < m1.numel(); ++i) m1.f32()[i] *= m2.f32()[i];
  const int64_t rank = f[1].shape()[0];
  std::vector<HostTensor> fs;
  fs.push_back(std::move(m1));
  return Found(patch_make(PatchKind::DIFF, std::move(fs), alpha, rank, s, std::move(dora)));
}

Result<Found> loha_read(Reader& r, const std::string& x, std::optional<float> alpha, float s,
                        HostTensor& dora) {
  if (!r.has(x + ".hada_w1_a")) return Found();
  if (r.has(x + ".hada_t1")) return loha_cp_read(r, x, alpha, s, dora);
  std::vector<HostTensor> fs;
  for (const char* n : {".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b"}) {
    HR_ASSIGN_OR_RETURN(HostTensor t, r.get(x + n));
    fs.push_back(flat2(std::move(t)));
  }
  const int64_t rank = fs[1].shape()[0];
  return Found(patch_make(PatchKind::HADAMARD, std::move(fs), alpha, rank, s, std::move(dora)));
}

// A LoKr factor: given whole, or as a product a @ b (whose rank sets the scale's divisor).
Result<std::optional<HostTensor>> lokr_factor(Reader& r, const std::string& x, const char* whole,
                                              const char* a, const char* b, int64_t* dim) {
  if (r.has(x + whole)) {
    HR_ASSIGN_OR_RETURN(HostTensor t, r.get(x + whole));
    return std::optional<HostTensor>(std::move(t));
  }
  if (!r.has(x + a)) return std::optional<HostTensor>();
  HR_ASSIGN_OR_RETURN(HostTensor fa, r.get(x + a));
  HR_ASSIGN_OR_RETURN(HostTensor fb, r.get(x + b));
  *dim = fb.shape()[0];
  HR_ASSIGN_OR_RETURN(HostTensor p, mm(flat2(std::move(fa)), flat2(std::move(fb)), x));
  return std::optional<HostTensor>(std::move(p));
}

Result<Found> lokr_read(Reader& r, const std::string& x, std::optional<float> alpha, float s,
                        HostTensor& dora) {
  const bool any = r.has(x + ".lokr_w1") || r.has(x + ".lokr_w2") || r.has(x + ".lokr_w1_a") ||
                   r.has(x + ".lokr_w2_a");
  if (!any) return Found();
  if (r.has(x + ".lokr_t2"))
    return make_error(ErrorCode::UNSUPPORTED, "LoRA key '{}': LoKr's CP decomposition (lokr_t2) is "
                      "not supported", x);
  int64_t dim = 0;
  HR_ASSIGN_OR_RETURN(auto w1, lokr_factor(r, x, ".lokr_w1", ".lokr_w1_a", ".lokr_w1_b", &dim));
  HR_ASSIGN_OR_RETURN(auto w2, lokr_factor(r, x, ".lokr_w2", ".lokr_w2_a", ".lokr_w2_b", &dim));
  if (!w1 || !w2)
    return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}': LoKr needs both w1 and w2", x);
  std::vector<HostTensor> fs;
  fs.push_back(flat2(std::move(*w1)));
  fs.push_back(std::move(*w2));
  if (fs[1].shape().rank < 2) fs[1] = flat2(std::move(fs[1]));
  return Found(patch_make(PatchKind::KRONECKER, std::move(fs), dim > 0 ? alpha : std::nullopt,
                          dim, s, std::move(dora)));
}

std::string bias_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() > suffix.size() && weight.ends_with(suffix))
    return weight.substr(0, weight.size() - suffix.size()) + ".bias";
  return weight + ".bias";
}

// A full difference (".diff", ".diff_b", ".w_norm", ".b_norm").
Result<Found> diff_read(Reader& r, const std::string& key, float s) {
  if (!r.has(key)) return Found();
  HR_ASSIGN_OR_RETURN(HostTensor d, r.get(key));
  std::vector<HostTensor> fs;
  fs.push_back(std::move(d));
  return Found(patch_make(PatchKind::DIFF, std::move(fs), std::nullopt, 0, s, HostTensor()));
}

struct Sink {
  LoraPatches& out;
  void add(const LoraTarget& t, WeightPatch p, const std::string& stem) {
    p.source = stem;
    if (t.row_offset >= 0) {
      p.row_offset = t.row_offset;
      p.rows = t.rows;
    }
    out.factor_bytes += p.factor_bytes();
    auto& by = t.component == LoraComponent::DIFFUSION ? out.diffusion
                                                       : out.encoders[size_t(t.encoder)];
    auto& list = by[t.weight];
    if (list.empty()) ++out.targets;
    list.push_back(std::move(p));
  }
};

// One stem of the map: the adapter its keys form, and its diffs (ComfyUI's load_lora order).
Status stem_read(Reader& r, const std::string& x, const LoraTarget& t, float s, Sink& sink) {
  std::optional<float> alpha;
  if (r.has(x + ".alpha")) {
    HR_ASSIGN_OR_RETURN(HostTensor a, r.get(x + ".alpha"));
    if (a.numel() != 1)
      return make_error(ErrorCode::INVALID_ARGUMENT, "LoRA key '{}.alpha' is not a scalar", x);
    alpha = a.f32()[0];
  }
  HostTensor dora;
  if (r.has(x + ".dora_scale")) {
    HR_ASSIGN_OR_RETURN(dora, r.get(x + ".dora_scale"));
  }
  for (auto read : {lora_read, loha_read, lokr_read}) {
    HR_ASSIGN_OR_RETURN(Found p, read(r, x, alpha, s, dora));
    if (!p) continue;
    sink.add(t, std::move(*p), x);
    break;
  }
  for (const char* n : {".w_norm", ".diff"}) {
    HR_ASSIGN_OR_RETURN(Found p, diff_read(r, x + n, s));
    if (p) sink.add(t, std::move(*p), x);
  }
  for (const char* n : {".b_norm", ".diff_b"}) {
    HR_ASSIGN_OR_RETURN(Found p, diff_read(r, x + n, s));
    if (p) sink.add(LoraTarget{t.component, t.encoder, bias_of(t.weight)},
                    std::move(*p), x);
  }
  return Status();
}

}  // namespace

Result<LoraPatches> lora_patches_read(const SafetensorsFile& file, const LoraKeyMap& map,
                                      const LoraStrengths& strengths) {
  LoraPatches out;
  Reader r{file, {}};
  Sink sink{out};
  std::vector<std::pair<std::string, const LoraTarget*>> stems;
  for (const auto& [stem, t] : map) stems.push_back({stem, &t});
  std::sort(stems.begin(), stems.end());
  for (const auto& [stem, t] : stems) {
    const float s = t->component == LoraComponent::DIFFUSION ? strengths.model : strengths.clip;
    if (t->component == LoraComponent::TEXT_ENCODER && out.encoders.size() <= size_t(t->encoder))
      out.encoders.resize(size_t(t->encoder) + 1);
    if (s == 0.0f) {  // matched but not applied (the same weights as unpatched)
      for (const SafetensorsEntry& e : file.entries())
        if (e.name.starts_with(stem + ".") || e.name.starts_with(stem + "_lora."))
          r.loaded.insert(e.name);
      continue;
    }
    HR_TRY(stem_read(r, stem, *t, s, sink).with_context(file.path()));
  }
  for (const SafetensorsEntry& e : file.entries())
    if (!r.loaded.count(e.name)) out.not_loaded.push_back(e.name);
  return out;
}

}  // namespace hr
