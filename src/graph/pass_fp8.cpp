// The fp8-linear pass (Note [fp8 linear]): linear layers of `_fast` fp8 weights as fp8 GEMMs.
#include <vector>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace hr {
using pass_util::Mapper;
using pass_util::value_uses;

// Note [fp8 linear]
// ComfyUI's `fp8_e4m3fn_fast` (comfy/ops.py fp8_linear, a125cd84) runs a linear layer whose
// weight is stored as float8_e4m3fn, on a GPU with fp8 tensor cores, as torch._scaled_mm: the
// activations of a 2-d or 3-d input clamped to +-448 and cast to e4m3 (round to nearest even),
// times the weight (its scale_weight, or 1) with f32 accumulation, plus the bias, in the input's
// dtype. Every other layer (and every layer where the GPU has no fp8 tensor cores, or the CPU)
// dequantizes. This pass does the same to the graph: LINEAR(x, CAST(w8 [, scale]), b) whose
// weight's storage is marked fast (WeightStorage::fast, e4m3), with a 2-d or 3-d 16-bit x and
// K and N multiples of 16 (what cuBLASLt's fp8 GEMM takes; ComfyUI falls back to dequantizing
// when _scaled_mm throws), becomes CAST(x -> e4m3) and LINEAR_FP8(xq, w8 [, scale], b). The
// dequantizing CAST goes when nothing else reads it. It runs before the other passes, on the
// model's graph, whose storage map says which weights are fast; the fusion pass may then add a
// residual into the fp8 GEMM's epilogue as it does for LINEAR. Files with `scale_input` are not
// marked fast (weight_format.cpp): ComfyUI's input scaling is not implemented here, and those
// layers dequantize.
namespace {

// The stored weight a LINEAR's weight input dequantizes, when the pass applies to node n.
const Node* fp8_dequant_of(const Graph& g, const Node& n) {
  const WeightStorageMap* map = g.weight_storage();
  if (!map || n.kind != OpKind::LINEAR || n.params.add_input || n.inputs.size() > 3) return nullptr;
  const int dqi = pass_util::dequant_node(g, n.inputs[1]);
  if (dqi < 0) return nullptr;
  const Node& dq = g.nodes()[size_t(dqi)];
  const auto it = map->find(g.value(dq.inputs[0]).name);
  if (it == map->end() || !it->second.fast || it->second.dtype != DType::F8_E4M3) return nullptr;
  const TensorDesc& x = g.desc(n.inputs[0]);
  const Shape& ws = g.shape(dq.inputs[0]);
  if ((x.shape.rank != 2 && x.shape.rank != 3) || (x.dtype != DType::F16 && x.dtype != DType::BF16))
    return nullptr;
  if (ws[0] % 16 || ws[1] % 16) return nullptr;
  return &dq;
}

}  // namespace

Result<Graph> pass_fp8_linear(const Graph& g) {
  if (!g.ok()) return g.status();
  const auto& nodes = g.nodes();
  const auto uses = value_uses(g);
  std::vector<const Node*> dq_of(nodes.size(), nullptr);
  std::vector<int> converted_readers(nodes.size(), 0);  // per dequantizing CAST node
  for (size_t i = 0; i < nodes.size(); ++i)
    if ((dq_of[i] = fp8_dequant_of(g, nodes[i])))
      ++converted_readers[size_t(g.value(nodes[i].inputs[1]).producer)];
  Graph out;
  Mapper m(g, out);
  auto get = [&](ValueId v) { return m.get(v); };
  for (size_t i = 0; i < nodes.size() && out.ok(); ++i) {
    const Node& n = nodes[i];
    if (n.kind == OpKind::CAST && converted_readers[i] > 0 &&
        size_t(converted_readers[i]) == uses[size_t(n.output)].size() &&
        !g.value(n.output).is_output)
      continue;  // read only by fp8 GEMMs
    std::vector<ValueId> ins;
    if (const Node* dq = dq_of[i]) {
      OpParams quant;
      quant.dtype = DType::F8_E4M3;
      OpParams p;
      p.dtype = g.desc(n.inputs[0]).dtype;
      p.weight_scale = dq->inputs.size() > 1;
      ins = {out.op(OpKind::CAST, quant, {get(n.inputs[0])}, n.name + ".quant"),
             get(dq->inputs[0])};
      if (p.weight_scale) ins.push_back(get(dq->inputs[1]));
      if (n.inputs.size() > 2) ins.push_back(get(n.inputs[2]));
      m.plain[size_t(n.output)] = out.op(OpKind::LINEAR_FP8, p, std::move(ins), n.name);
      continue;
    }
    for (ValueId x : n.inputs) ins.push_back(get(x));
    m.plain[size_t(n.output)] = out.op(n.kind, n.params, std::move(ins), n.name);
  }
  for (ValueId o : g.outputs()) out.output(get(o), g.value(o).name);
  if (!out.ok()) return out.status().with_context("fp8 linear pass");
  return out;
}

}  // namespace hr
