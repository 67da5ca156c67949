// CLIP text encoder graphs (HF and OpenCLIP layouts), pooling/projection and ComfyUI's
// CLIPTextEncode (chunk batching, token weighting, clip skip).
#include "models/sd/clip_text.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "models/layer_count.h"

namespace hr {
namespace {

// Weight names of one layout (Note [CLIP layouts]).
// Note [CLIP layouts]
// HF CLIPTextModel (SD1 and SDXL CLIP-L files, diffusers text encoders) names every projection
// as a Linear: q_proj/k_proj/v_proj/out_proj, mlp.fc1/fc2, layer_norm1/2, final_layer_norm.
// OpenCLIP (SDXL bigG, SD2) packs q, k, v into one in_proj [3C, C] (+ bias [3C]); we run it as
// one LINEAR and SLICE the [B, N, 3C] result into q, k, v, so checkpoint tensors are used as
// stored. OpenCLIP's positional_embedding and text_projection are bare parameters (no
// ".weight"); text_projection is applied as x @ P, the transpose of a Linear weight.
struct LayoutNames {
  std::string token_embedding, position_embedding, final_ln, layer_prefix;
  std::string ln1, ln2, out_proj, fc1, fc2;
};

LayoutNames layout_names(const CLIPTextConfig& c) {
  if (c.layout == CLIPLayout::HF) {
    const std::string& r = c.hf_root;
    return {r + "embeddings.token_embedding.weight",
            r + "embeddings.position_embedding.weight",
            r + "final_layer_norm",
            r + "encoder.layers.",
            "layer_norm1",
            "layer_norm2",
            "self_attn.out_proj",
            "mlp.fc1",
            "mlp.fc2"};
  }
  return {"token_embedding.weight",
          "positional_embedding",
          "ln_final",
          "transformer.resblocks.",
          "ln_1",
          "ln_2",
          "attn.out_proj",
          "mlp.c_fc",
          "mlp.c_proj"};
}

// Detection from names and shapes alone: `find(name)` gives a tensor's desc (in the dtype it is
// computed in) or nullopt, so a WeightSet and a file header answer alike.
template <class Find>
Result<CLIPTextConfig> clip_detect_from(const std::vector<std::string>& names, const Find& find,
                                        int heads) {
  CLIPTextConfig c;
  if (find("text_model.embeddings.token_embedding.weight").has_value()) {
    c.layout = CLIPLayout::HF;
  } else if (find("embeddings.token_embedding.weight").has_value()) {
    c.layout = CLIPLayout::HF;  // older transformers files without the "text_model." level
    c.hf_root.clear();
  } else if (find("token_embedding.weight").has_value() &&
             find("transformer.resblocks.0.ln_1.weight").has_value()) {
    c.layout = CLIPLayout::OPEN_CLIP;
  } else {
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "no CLIP text encoder in these weights (neither "
                      "'text_model.embeddings.token_embedding.weight' nor OpenCLIP "
                      "'token_embedding.weight' + 'transformer.resblocks.0.*'); {} tensors",
                      names.size());
  }
  const LayoutNames n = layout_names(c);
  const std::optional<TensorDesc> tok = find(n.token_embedding);
  const std::optional<TensorDesc> pos = find(n.position_embedding);
  if (!tok || tok->shape.rank != 2 || !pos || pos->shape.rank != 2)
    return make_error(ErrorCode::INVALID_ARGUMENT, "CLIP embeddings '{}' / '{}' missing or not 2-D",
                      n.token_embedding, n.position_embedding);
  c.vocab = tok->shape[0];
  c.width = tok->shape[1];
  c.positions = pos->shape[0];
  c.dtype = tok->dtype;
  c.layers = numbered_layers(names, n.layer_prefix);
  if (c.layers == 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "CLIP text encoder has no '{}N' layers",
                      n.layer_prefix);
  const std::optional<TensorDesc> fc1 = find(n.layer_prefix + "0." + n.fc1 + ".weight");
  if (!fc1 || fc1->shape.rank != 2)
    return make_error(ErrorCode::INVALID_ARGUMENT, "CLIP layer 0 has no '{}.weight'", n.fc1);
  c.mlp = fc1->shape[0];
  c.heads = heads > 0 ? heads : int(std::max<int64_t>(1, c.width / 64));
  if (c.width % c.heads != 0)
    return make_error(ErrorCode::INVALID_ARGUMENT, "CLIP width {} is not divisible by {} heads",
                      c.width, c.heads);
  c.activation = (c.layout == CLIPLayout::OPEN_CLIP || c.width >= 1024)
                     ? CLIPActivation::GELU
                     : CLIPActivation::QUICK_GELU;
  if (const std::optional<TensorDesc> p = find("text_projection"); p && c.layout == CLIPLayout::OPEN_CLIP) {
    c.has_projection = true;
    c.projection_dim = p->shape[1];
  } else if (const std::optional<TensorDesc> q = find("text_projection.weight")) {
    c.has_projection = true;
    c.projection_dim = q->shape[0];
  }
  return c;
}

}  // namespace

Result<CLIPTextConfig> clip_text_detect(const WeightSet& w, int heads) {
  return clip_detect_from(
      w.names(),
      [&w](const std::string& name) -> std::optional<TensorDesc> {
        const HostTensor* t = w.find(name);
        return t ? std::optional<TensorDesc>(t->desc()) : std::nullopt;
      },
      heads);
}

Result<CLIPTextConfig> clip_text_detect(const SafetensorsFile& file, std::string_view prefix,
                                        DType dtype, int heads) {
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : file.entries())
    if (e.name.compare(0, prefix.size(), prefix) == 0) names.push_back(e.name.substr(prefix.size()));
  return clip_detect_from(
      names,
      [&](const std::string& name) -> std::optional<TensorDesc> {
        const SafetensorsEntry* e = file.find(std::string(prefix) + name);
        if (!e) return std::nullopt;
        // As weights_load_prefix: floats are converted to the compute dtype.
        return TensorDesc{dtype_is_float(e->dtype) ? dtype : e->dtype, e->shape};
      },
      heads);
}

Result<CLIPTextGraph> clip_text_graph(const CLIPTextConfig& c, const CLIPTextGraphOptions& o) {
  if (o.layer >= 0 || -o.layer > c.layers)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "CLIP layer {} is out of range for a {}-layer encoder (use -1 .. -{})",
                      o.layer, c.layers, c.layers);
  if (o.batch < 1) return make_error(ErrorCode::INVALID_ARGUMENT, "CLIP batch must be >= 1");
  const LayoutNames n = layout_names(c);
  const int64_t C = c.width, N = c.positions, B = o.batch;
  const TensorDesc vec{c.dtype, {C}};
  CLIPTextGraph out;
  Graph& g = out.graph;
  g.set_weight_storage(c.storage);
  auto W = [&](const std::string& name, Shape s) { return g.weight(name, {c.dtype, s}); };
  auto layer_norm = [&](ValueId x, const std::string& prefix) {
    return g.layer_norm(x, g.weight(prefix + ".weight", vec), g.weight(prefix + ".bias", vec),
                        c.eps, prefix);
  };
  auto linear = [&](ValueId x, const std::string& prefix, int64_t out_f, int64_t in_f) {
    return g.linear(x, W(prefix + ".weight", {out_f, in_f}), W(prefix + ".bias", {out_f}), prefix);
  };

  ValueId ids = g.input("ids", {DType::I64, {B, N}});
  ValueId x =
      g.op(OpKind::EMBEDDING, {}, {ids, W(n.token_embedding, {c.vocab, C})}, "token_embedding");
  x = g.add(x, W(n.position_embedding, {N, C}), "embeddings");
  int outputs = 0;
  if (o.embeddings) {
    g.output(x, "embeddings");
    out.embeddings = outputs++;
  }

  // hidden_states[layer]: output of layer index layers + layer (0-based).
  const int hidden_after = c.layers + o.layer;
  const int last_layer = o.last_hidden_state ? c.layers - 1 : hidden_after;
  for (int i = 0; i <= last_layer; ++i) {
    const std::string p = n.layer_prefix + std::to_string(i) + ".";
    ValueId h = layer_norm(x, p + n.ln1);
    ValueId q, k, v;
    if (c.layout == CLIPLayout::HF) {
      q = linear(h, p + "self_attn.q_proj", C, C);
      k = linear(h, p + "self_attn.k_proj", C, C);
      v = linear(h, p + "self_attn.v_proj", C, C);
    } else {
      ValueId qkv = g.linear(h, W(p + "attn.in_proj_weight", {3 * C, C}),
                             W(p + "attn.in_proj_bias", {3 * C}), p + "attn.in_proj");
      q = g.slice(qkv, 2, 0, C, 1, p + "attn.q");
      k = g.slice(qkv, 2, C, 2 * C, 1, p + "attn.k");
      v = g.slice(qkv, 2, 2 * C, 3 * C, 1, p + "attn.v");
    }
    ValueId a = g.attention(q, k, v, c.heads, /*causal=*/true, p + "attn");
    x = g.add(x, linear(a, p + n.out_proj, C, C), p + "attn_residual");
    h = layer_norm(x, p + n.ln2);
    h = linear(h, p + n.fc1, c.mlp, C);
    h = g.unary(c.activation == CLIPActivation::GELU ? OpKind::GELU : OpKind::QUICK_GELU, h,
                p + "mlp.act");
    x = g.add(x, linear(h, p + n.fc2, C, c.mlp), p + "mlp_residual");
    if (i == hidden_after) {
      ValueId hs = o.layer_final_norm ? layer_norm(x, n.final_ln) : x;
      if (o.layer_final_norm && o.last_hidden_state && i == c.layers - 1) {
        // Same tensor as last_hidden_state: one node, one output, reported at both indices.
        g.output(hs, "last_hidden_state");
        out.hidden = out.last = outputs++;
        break;
      }
      g.output(hs, "hidden_state");
      out.hidden = outputs++;
    }
  }
  if (o.last_hidden_state && out.last < 0) {
    g.output(layer_norm(x, n.final_ln), "last_hidden_state");
    out.last = outputs++;
  }
  if (!g.status().ok()) return g.status().with_context("building the CLIP text graph");
  return out;
}

HostTensor clip_text_pool(const HostTensor& last_hidden,
                          const std::vector<std::vector<int32_t>>& ids, int32_t eos) {
  const int64_t B = last_hidden.shape()[0], N = last_hidden.shape()[1], C = last_hidden.shape()[2];
  HostTensor out(DType::F32, {B, C});
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& row = ids[size_t(b)];
    auto it = std::find(row.begin(), row.end(), eos);
    if (it == row.end()) it = std::max_element(row.begin(), row.end());
    int64_t j = std::min<int64_t>(int64_t(it - row.begin()), N - 1);
    std::memcpy(out.f32() + b * C, last_hidden.f32() + (b * N + j) * C, size_t(C) * sizeof(float));
  }
  return out;
}

Result<HostTensor> clip_text_project(const HostTensor& pooled, const WeightSet& w,
                                     const CLIPTextConfig& c) {
  if (!c.has_projection) return pooled.clone();
  const bool open_clip = c.layout == CLIPLayout::OPEN_CLIP;
  const HostTensor* p = w.find(open_clip ? "text_projection" : "text_projection.weight");
  if (!p) return make_error(ErrorCode::NOT_FOUND, "CLIP text_projection is missing");
  HostTensor proj = p->to(DType::F32);
  const int64_t B = pooled.shape()[0], C = pooled.shape()[1];
  // OpenCLIP: P [C, D], y = x @ P.  HF Linear: W [D, C], y = x @ W^T.
  const int64_t D = open_clip ? proj.shape()[1] : proj.shape()[0];
  if ((open_clip ? proj.shape()[0] : proj.shape()[1]) != C)
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "text_projection {} does not fit pooled width {}", proj.shape().str(), C);
  HostTensor out(DType::F32, {B, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t k = 0; k < C; ++k)
        s += double(pooled.f32()[b * C + k]) * proj.f32()[open_clip ? k * D + d : d * C + k];
      out.f32()[b * D + d] = float(s);
    }
  return out;
}

Result<CLIPTextRun> clip_text_run(Executor& ex, WeightSource& w, const CLIPTextConfig& c,
                                  const std::vector<std::vector<int32_t>>& rows,
                                  const CLIPTextGraphOptions& options) {
  CLIPTextGraphOptions o = options;
  o.batch = int64_t(rows.size());
  HostTensor ids(DType::I64, {o.batch, c.positions});
  for (size_t b = 0; b < rows.size(); ++b) {
    if (int64_t(rows[b].size()) != c.positions)
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "token row {} has {} ids, the encoder takes {}", b, rows[b].size(),
                        c.positions);
    for (size_t j = 0; j < rows[b].size(); ++j) {
      int32_t id = rows[b][j];
      if (id < 0 || id >= c.vocab)
        return make_error(ErrorCode::INVALID_ARGUMENT,
                          "token id {} (row {}, position {}) is outside the {}-entry vocabulary; "
                          "is the right tokenizer in use?",
                          id, b, j, c.vocab);
      static_cast<int64_t*>(ids.data())[b * size_t(c.positions) + j] = id;
    }
  }
  HR_ASSIGN_OR_RETURN(CLIPTextGraph g, clip_text_graph(c, o));
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> outs, ex.run(g.graph, {{"ids", &ids}}, w));
  auto take = [&](int index) -> HostTensor {
    if (index < 0) return HostTensor();
    const HostTensor& t = outs[size_t(index)];
    return t.dtype() == DType::F32 ? t.clone() : t.to(DType::F32);
  };
  CLIPTextRun r;
  r.hidden = take(g.hidden);
  r.last = take(g.last);
  r.embeddings = take(g.embeddings);
  return r;
}

Result<CLIPConditioning> clip_text_encode(Executor& ex, WeightSet& w, const CLIPTextConfig& c,
                                          const TokenChunks& chunks, const CLIPEncodeOptions& opt) {
  return clip_text_encode(ex, w, w, c, chunks, opt);
}

Result<CLIPConditioning> clip_text_encode(Executor& ex, WeightSource& run_weights,
                                          const WeightSet& w, const CLIPTextConfig& c,
                                          const TokenChunks& chunks, const CLIPEncodeOptions& opt) {
  const bool weighted = !chunks.unweighted();
  std::vector<std::vector<int32_t>> rows = chunks.ids;
  if (weighted || rows.empty()) {
    std::vector<int32_t> empty(size_t(c.positions), opt.pad);
    empty[0] = opt.bos;
    if (empty.size() > 1) empty[1] = opt.eos;
    rows.push_back(std::move(empty));
  }
  CLIPTextGraphOptions go;
  go.layer = opt.layer;
  go.layer_final_norm = opt.layer_final_norm;
  go.last_hidden_state = true;
  HR_ASSIGN_OR_RETURN(CLIPTextRun run, clip_text_run(ex, run_weights, c, rows, go));

  const int64_t N = c.positions, C = c.width;
  const size_t sections = chunks.size();
  CLIPConditioning out;
  const float* z = run.hidden.f32();
  if (sections == 0) {  // ComfyUI returns the empty row itself
    out.cond = HostTensor(DType::F32, {1, N, C});
    std::memcpy(out.cond.f32(), z, out.cond.bytes());
  } else {
    out.cond = HostTensor(DType::F32, {1, int64_t(sections) * N, C});
    std::memcpy(out.cond.f32(), z, size_t(sections * N * C) * sizeof(float));
    if (weighted) {
      const float* e = z + int64_t(rows.size() - 1) * N * C;
      for (size_t k = 0; k < sections; ++k)
        for (int64_t j = 0; j < N; ++j) {
          const double wt = chunks.weights[k][size_t(j)];
          if (wt == 1.0) continue;
          // float32 arithmetic with the weight rounded to float, as torch does with a scalar.
          const float fw = float(wt);
          float* dst = out.cond.f32() + (int64_t(k) * N + j) * C;
          for (int64_t ch = 0; ch < C; ++ch)
            dst[ch] = (dst[ch] - e[j * C + ch]) * fw + e[j * C + ch];
        }
    }
  }
  HostTensor pooled = clip_text_pool(run.last, rows, opt.eos);
  HostTensor first(DType::F32, {1, C});
  std::memcpy(first.f32(), pooled.f32(), size_t(C) * sizeof(float));
  if (opt.project_pooled && c.has_projection) {
    HR_ASSIGN_OR_RETURN(first, clip_text_project(first, w, c));
  }
  out.pooled = std::move(first);
  return out;
}

Result<CLIPConditioning> clip_sdxl_combine(const CLIPConditioning& l, const CLIPConditioning& g) {
  if (l.cond.shape().rank != 3 || g.cond.shape().rank != 3 ||
      l.cond.shape()[0] != g.cond.shape()[0])
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "SDXL conditioning shapes {} and {} do not combine", l.cond.shape().str(),
                      g.cond.shape().str());
  const int64_t B = l.cond.shape()[0];
  const int64_t N = std::min(l.cond.shape()[1], g.cond.shape()[1]);
  const int64_t Cl = l.cond.shape()[2], Cg = g.cond.shape()[2];
  CLIPConditioning out;
  out.cond = HostTensor(DType::F32, {B, N, Cl + Cg});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < N; ++j) {
      float* dst = out.cond.f32() + (b * N + j) * (Cl + Cg);
      std::memcpy(dst, l.cond.f32() + (b * l.cond.shape()[1] + j) * Cl, size_t(Cl) * sizeof(float));
      std::memcpy(dst + Cl, g.cond.f32() + (b * g.cond.shape()[1] + j) * Cg,
                  size_t(Cg) * sizeof(float));
    }
  out.pooled = g.pooled.clone();
  return out;
}

}  // namespace hr
