// The stacked-projection pass (Note [stacked context projections]).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/pass_util.h"
#include "graph/passes.h"

namespace hr {
using pass_util::Mapper;
using pass_util::value_uses;

// Note [stacked context projections]
// Every cross-attention of a UNet projects the same text context to its keys and values: SDXL
// has 70 such layers, so 140 GEMMs of 154 rows (two prompts of 77 tokens) against 1.3-5 MB of
// weights each. Each takes ~10 us on an H200 where moving its weights takes ~1.3: they are too
// small to fill the GPU, and their launches add up to ~1.4 ms of a ~31 ms step. This pass
// gives each run of such layers one GEMM: the K and V weights of consecutive attentions that read
// the same input are stacked along their output dim into one weight (WeightLayout::STACK, made
// once by the weight source, Note [weight layouts] in graph.h), the GEMM's output [B, Nk, sum]
// holds every layer's K and V side by side, and each ATTENTION reads its own two column windows
// of it in place (params.kv_window) instead of two tensors of its own.
// Rules:
// - Only attentions whose K and V come from bias-free LINEARs with stored 2-d weights, read by
//   that attention alone, both of one input x read by at least two such attentions (the context;
//   a self-attention's keys come from its own hidden state, read once). Dv = D.
// - A stack holds at most `cap` bytes of weights, the graph's largest weight (so the stacked
//   weights never raise the largest single weight a low-VRAM run must stream), and at least one
//   attention's pair.
// - The stacked GEMM runs where the stack's first projection ran; its output lives until its
//   last attention (the planner sees it like any other value, so the memory plan stays exact).
// It runs where BackendKernels::prefers_stacked_weights(): not on the CPU, whose device memory is
// host memory, so a stacked weight would be a second host copy of those weights (Note [device
// properties] in backend/device.h); HEADROOM_STACK_PROJECTIONS=0 turns the pass off.
// Self-attention mode (PassOptions::stack_qkv; on wherever the pass runs, HEADROOM_STACK_QKV=0
// turns it off; it gained in the SDXL step in two same-run attributions, bench/PERF_NOTES.md v10):
// an attention whose Q, K and V are bias-free projections of one hidden state gets one
// GEMM for all three ([Wq; Wk; Wv], N = 3C instead of three GEMMs of C: more tiles per wave for
// SDXL's 2048 x 1280 x 1280 projections) and reads Q as a window too (params.q_width). These
// stacks are not capped: three C x C weights stay far below a UNet's largest weight (SDXL: 9.8 of
// 59 MB), and a tiny graph may stack above its own largest weight.
//
// Note [stacked fp8 projections]
// A model stored in fp8 declares each weight as its fp8 bytes and a dequantizing CAST (Note [fp8
// weights] in graph.h), so its projections read no WEIGHT and, before this Note, none stacked:
// SDXL's fp8 step ran about 280 more GEMMs than its f16 step (its 140 context projections, and
// two of each self-attention's three), each after a CAST of its own. A projection whose
// weight is an unscaled fp8 weight's CAST that it alone reads now stacks like a plain one: the
// fp8 parts form one fp8 STACK weight (half the bytes of the f16 stack), one CAST dequantizes
// it, and the one LINEAR reads that. This is exact: an unscaled CAST converts each element on its
// own, so the stacked copy is the parts' copies side by side. The `_fast` form stacks too: fp8
// GEMMs LINEAR_FP8(CAST(x -> e4m3), w8) without scale or bias become one activation CAST and one
// fp8 GEMM of the stacked weight (each output column is one row of w times the same quantized x,
// so the columns are the parts' outputs; and x is quantized once instead of once per layer).
// Not stacked: scaled parts (ComfyUI's scaled fp8 files, one scale per part: the one CAST would
// need a scale per row range; equal scales are not known when the graph is built), and weights
// read by more than one node. A stack's parts are of one form (plain, dequantized or fp8 GEMM),
// one stored dtype and one compute dtype. Beside the weight cap, a dequantized context stack's
// f16 copy stays within the graph's largest dequantized copy, so the arena's largest dequantize
// scratch does not grow. LoRA on stacked fp8 parts: PatchedWeights patches each patched part on
// the host as for a single fp8 weight and stacks the parts' bytes (Note [fp8 patches]).
//
// Note [dequantize cost]
// What the SDXL fp8 step (bench workload_sdxl_fp8: every float weight stored as unscaled e4m3,
// as UNETLoader's weight_dtype fp8_e4m3fn stores it) paid over the f16 step on the H200, 7.6 ms
// of 38.69 (bench/PERF_NOTES.md "fp8 weights", run 2), and what this branch expects back
// (predicted, not measured; scripts/device/fp8.sh's profile run splits it):
// - Traffic. Dequantizing per use reads 2.57 G fp8 bytes and writes 5.14 GB of f16 that the
//   GEMMs then read as the f16 step does: ~7.7 GB more a step, ~2.3 ms at the ~3.3 TB/s the
//   H200's device copies reach. This is the floor of per-use dequantization, as ComfyUI's
//   manual_cast does it (comfy/ops.py cast_bias_weight, every forward). Keeping f16 copies
//   resident would remove it but costs the f16 bytes the memory rule forbids.
// - The kernel. Run 2's eight-elements-a-thread dequantize served scaled weights only; the
//   unscaled CAST (this workload) read one byte and wrote one f16 a thread. It now takes the
//   eight-element kernel too (backend/cuda/cuda_layout.cu). Expected: the dequantize CASTs move
//   from well under the copy ceiling to near it, 1-2 ms.
// - Stacking (this Note's pass): the fp8 step again runs the f16 step's stacked GEMMs, whose
//   f16 gain was ~1.4 ms for the 140 context projections alone (Note above), and ~280 fewer
//   CASTs. Expected: 1.5-2 ms.
// - What stays: every bias and norm weight is fp8 too (ComfyUI's fp8 models store them so) and
//   each has its own tiny CAST: of SDXL's ~1,680 stored tensors ~880 are such vectors, at ~1-2 us
//   a kernel under capture ~1-2 ms a step. The next
//   cut would be one multi-tensor dequantize of a step's small weights into one arena buffer
//   (a few MB), not built: the profile's "fp8 dequantize" row (node count and mean) says
//   whether it is worth it.
// So the dequantize step is expected at ~34-35 ms, 1.10-1.13x f16 (goal 1.1x). `_fast`: its
// projections stack into one fp8 GEMM each with one activation cast, and the activation cast
// reads eight elements a thread; the convolutions still dequantize (ComfyUI's fp8 ops have no
// fp8 convolution), so 0.8x f16 stays out of reach; expected ~31-32 ms (~1.0x).
namespace {

// A projection a stack may take in: LINEAR(x, w) of a stored weight; LINEAR(x, CAST(w8)), the
// unscaled dequantized fp8 weight (Note [stacked fp8 projections]); or LINEAR_FP8(CAST(x ->
// e4m3), w8), an unscaled bias-free fp8 GEMM (Note [fp8 linear] in pass_fp8.cpp).
struct Projection {
  int node = -1;            // the LINEAR or LINEAR_FP8
  int cast = -1;            // its weight's dequantizing CAST, or the fp8 GEMM's activation CAST
  ValueId x = kNoValue;     // the input it projects
  ValueId w = kNoValue;     // the stored weight
  bool dequant = false;     // cast dequantizes w
  DType compute = DType::F32;  // the weight's dtype as the GEMM reads it, or the fp8 GEMM's output
};

struct Candidate {
  Projection q, k, v;       // q.node < 0 unless Q is stacked too (self-attention mode)
  int attention = -1;       // the ATTENTION node
  uint64_t bytes = 0;       // of the stacked stored weights
  uint64_t dequant_bytes = 0;  // of their dequantized copy (0 when not dequantized)
};

struct Stack {
  std::vector<int> members;  // indices into the candidates
  int anchor = -1;           // the node where the stacked GEMM is emitted
};

bool only_reader(const Graph& g, const std::vector<std::vector<int>>& uses, ValueId v, int reader) {
  return !g.value(v).is_output && uses[size_t(v)].size() == 1 && uses[size_t(v)][0] == reader;
}

// Whether two projections stack into one GEMM: one input, one op form, one weight dtype and K.
bool same_form(const Graph& g, const Projection& a, const Projection& b) {
  const TensorDesc &wa = g.desc(a.w), &wb = g.desc(b.w);
  const OpKind ka = g.nodes()[size_t(a.node)].kind, kb = g.nodes()[size_t(b.node)].kind;
  return a.x == b.x && ka == kb && a.dequant == b.dequant && a.compute == b.compute &&
         wa.dtype == wb.dtype && wa.shape[1] == wb.shape[1];
}

// The bias-free projection producing v that only `reader` reads, with a stored 2-d weight.
std::optional<Projection> projection_of(const Graph& g, const std::vector<std::vector<int>>& uses,
                                        ValueId v, int reader) {
  const Value& y = g.value(v);
  if (y.kind != ValueKind::INTERMEDIATE || y.producer < 0 || !only_reader(g, uses, v, reader))
    return std::nullopt;
  const Node& n = g.nodes()[size_t(y.producer)];
  if (n.inputs.size() != 2 || n.params.add_input) return std::nullopt;
  Projection p{y.producer, -1, n.inputs[0], n.inputs[1]};
  if (n.kind == OpKind::LINEAR) {
    p.compute = g.desc(n.inputs[1]).dtype;
    if (const int dq = pass_util::dequant_node(g, n.inputs[1]); dq >= 0) {
      const Node& c = g.nodes()[size_t(dq)];
      // A scaled weight's CAST takes its own scale: its parts would need one scale each.
      if (c.inputs.size() != 1 || !only_reader(g, uses, n.inputs[1], y.producer))
        return std::nullopt;
      p = Projection{y.producer, dq, n.inputs[0], c.inputs[0], true, p.compute};
    }
  } else if (n.kind == OpKind::LINEAR_FP8 && !n.params.weight_scale) {
    const int q = g.value(n.inputs[0]).producer;
    if (q < 0 || !only_reader(g, uses, n.inputs[0], y.producer)) return std::nullopt;
    const Node& c = g.nodes()[size_t(q)];
    if (c.kind != OpKind::CAST || c.inputs.size() != 1) return std::nullopt;
    p = Projection{y.producer, q, c.inputs[0], n.inputs[1], false, n.params.dtype};
  } else {
    return std::nullopt;
  }
  const Value& w = g.value(p.w);
  if (w.kind != ValueKind::WEIGHT || w.layout != WeightLayout::STORED || w.desc.shape.rank != 2)
    return std::nullopt;
  if (w.name.find('+') != std::string::npos) return std::nullopt;  // '+' separates a stack's parts
  return p;
}

uint64_t dequant_bytes_of(const Graph& g, const Projection& p) {
  return p.dequant ? uint64_t(g.desc(p.w).shape.numel()) * dtype_size(p.compute) : 0;
}

std::vector<Candidate> candidates(const Graph& g, const std::vector<std::vector<int>>& uses) {
  const auto& nodes = g.nodes();
  std::vector<Candidate> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != OpKind::ATTENTION || n.params.kv_window || n.inputs.size() != 3) continue;
    if (n.inputs[1] == n.inputs[2]) continue;
    const auto k = projection_of(g, uses, n.inputs[1], int(i));
    const auto v = projection_of(g, uses, n.inputs[2], int(i));
    if (!k || !v || !same_form(g, *k, *v)) continue;
    if (g.shape(n.inputs[2])[2] != g.shape(n.inputs[0])[2]) continue;  // Dv = D
    out.push_back(Candidate{Projection{}, *k, *v, int(i), g.desc(k->w).bytes() + g.desc(v->w).bytes(),
                            dequant_bytes_of(g, *k) + dequant_bytes_of(g, *v)});
  }
  return out;
}

// Self-attention mode: attentions (not in `taken`) whose Q, K and V are projections of one input.
std::vector<Candidate> self_candidates(const Graph& g, const std::vector<std::vector<int>>& uses,
                                       const std::vector<char>& taken) {
  const auto& nodes = g.nodes();
  std::vector<Candidate> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != OpKind::ATTENTION || n.params.kv_window || n.inputs.size() != 3 || taken[i])
      continue;
    const ValueId a = n.inputs[0], b = n.inputs[1], c = n.inputs[2];
    if (a == b || b == c || a == c) continue;
    const auto q = projection_of(g, uses, a, int(i));
    const auto k = projection_of(g, uses, b, int(i));
    const auto v = projection_of(g, uses, c, int(i));
    if (!q || !k || !v || !same_form(g, *q, *k) || !same_form(g, *q, *v)) continue;
    const TensorDesc& qw = g.desc(q->w);
    if (g.shape(k->w) != qw.shape || g.shape(v->w) != qw.shape) continue;
    out.push_back(Candidate{*q, *k, *v, int(i), 3 * qw.bytes(), 3 * dequant_bytes_of(g, *q)});
  }
  return out;
}

// The caps of a context stack: the graph's largest weight, and its largest dequantized copy.
struct Caps {
  uint64_t weight = 0, dequant = 0;
};

Caps caps_of(const Graph& g) {
  Caps c;
  for (const Value& v : g.values())
    if (v.kind == ValueKind::WEIGHT) c.weight = std::max<uint64_t>(c.weight, v.desc.bytes());
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (pass_util::dequant_node(g, g.nodes()[i].output) >= 0)
      c.dequant = std::max<uint64_t>(c.dequant, g.desc(g.nodes()[i].output).bytes());
  return c;
}

// Candidates grouped by their input, split into stacks within the caps, of one form each.
std::vector<Stack> stacks_of(const Graph& g, const std::vector<Candidate>& cs, Caps cap) {
  std::map<ValueId, std::vector<int>> by_input;
  for (size_t i = 0; i < cs.size(); ++i) by_input[cs[i].k.x].push_back(int(i));
  std::vector<Stack> out;
  for (const auto& [x, members] : by_input) {
    if (members.size() < 2) continue;
    Stack cur;
    uint64_t bytes = 0, dequant = 0;
    for (int m : members) {
      const Candidate& c = cs[size_t(m)];
      const bool fits = bytes + c.bytes <= cap.weight && dequant + c.dequant_bytes <= cap.dequant &&
                        (cur.members.empty() || same_form(g, c.k, cs[size_t(cur.members[0])].k));
      if (!cur.members.empty() && !fits) {
        out.push_back(std::move(cur));
        cur = Stack{};
        bytes = dequant = 0;
      }
      cur.members.push_back(m);
      bytes += c.bytes;
      dequant += c.dequant_bytes;
    }
    if (!cur.members.empty()) out.push_back(std::move(cur));
  }
  return out;
}

// The projections of a candidate, in stacking order (Q first when stacked).
std::vector<const Projection*> stacked_projections(const Candidate& c) {
  if (c.q.node >= 0) return {&c.q, &c.k, &c.v};
  return {&c.k, &c.v};
}

// The stacked-projection plan: the candidates and their stacks (context stacks first, then one
// per self-attention).
struct StackPlan {
  std::vector<Candidate> cs;
  std::vector<Stack> stacks;
};

StackPlan stack_plan(const Graph& g, bool self_attention) {
  const auto uses = value_uses(g);
  StackPlan p;
  p.cs = candidates(g, uses);
  p.stacks = stacks_of(g, p.cs, caps_of(g));
  if (self_attention) {
    std::vector<char> taken(g.nodes().size(), 0);
    for (const Stack& s : p.stacks)
      for (int m : s.members) taken[size_t(p.cs[size_t(m)].attention)] = 1;
    for (const Candidate& c : self_candidates(g, uses, taken)) {
      p.cs.push_back(c);
      p.stacks.push_back(Stack{{int(p.cs.size()) - 1}});
    }
  }
  // Each stack's GEMM goes where its first projection was (its input is made by then; a
  // weight's dequantizing CAST may come before that).
  for (Stack& s : p.stacks) {
    s.anchor = INT32_MAX;
    for (int m : s.members)
      for (const Projection* pr : stacked_projections(p.cs[size_t(m)]))
        s.anchor = std::min(s.anchor, pr->node);
  }
  return p;
}

// Emits a stack's one GEMM into `out`, in the form of its projections: the stacked weight, its
// dequantizing CAST or the activation's fp8 CAST as the parts had, and the LINEAR or LINEAR_FP8.
ValueId stacked_gemm(const Graph& g, const StackPlan& plan, const Stack& s, pass_util::Mapper& m,
                     Graph& out) {
  const auto& nodes = g.nodes();
  const Candidate& first = plan.cs[size_t(s.members[0])];
  const Projection& p0 = first.q.node >= 0 ? first.q : first.k;
  std::vector<std::string> parts;
  int64_t rows = 0;
  for (int mi : s.members)
    for (const Projection* p : stacked_projections(plan.cs[size_t(mi)])) {
      parts.push_back(g.value(p->w).name);
      rows += g.shape(p->w)[0];
    }
  const TensorDesc& w0 = g.desc(p0.w);
  const std::string name =
      first.q.node >= 0
          ? nodes[size_t(first.attention)].name + ".to_qkv"
          : fmt::format("{}.to_kv_x{}", nodes[size_t(first.attention)].name, s.members.size());
  ValueId w = out.weight(weight_stack_name(parts), TensorDesc{w0.dtype, Shape{rows, w0.shape[1]}},
                         WeightLayout::STACK);
  const Node& gemm = nodes[size_t(p0.node)];
  if (gemm.kind == OpKind::LINEAR_FP8) {
    const ValueId xq =
        out.op(OpKind::CAST, nodes[size_t(p0.cast)].params, {m.get(p0.x)}, name + ".quant");
    return out.op(OpKind::LINEAR_FP8, gemm.params, {xq, w}, name);
  }
  if (p0.dequant) w = out.op(OpKind::CAST, nodes[size_t(p0.cast)].params, {w}, name + ".dequant");
  return out.linear(m.get(p0.x), w, kNoValue, name);
}

}  // namespace

Result<Graph> pass_stack_projections(const Graph& g, bool self_attention) {
  if (!g.ok()) return g.status();
  const auto& vals = g.values();
  const auto& nodes = g.nodes();
  const StackPlan plan = stack_plan(g, self_attention);
  const std::vector<Candidate>& cs = plan.cs;
  const std::vector<Stack>& stacks = plan.stacks;
  if (stacks.empty()) return g;

  // Per node: the stack it anchors, or the windows an attention reads, or skipped.
  struct Window {
    int stack = -1;
    int64_t q_at = 0, q_width = 0, k_at = 0, v_at = 0;
  };
  std::vector<int> anchored(nodes.size(), -1);
  std::vector<Window> window(nodes.size());
  std::vector<char> skip(nodes.size(), 0);
  auto rows = [&](const Projection& p) { return g.shape(p.w)[0]; };
  for (size_t s = 0; s < stacks.size(); ++s) {
    anchored[size_t(stacks[s].anchor)] = int(s);
    int64_t at = 0;
    for (int m : stacks[s].members) {
      const Candidate& c = cs[size_t(m)];
      for (const Projection* p : stacked_projections(c)) {
        skip[size_t(p->node)] = 1;
        if (p->cast >= 0) skip[size_t(p->cast)] = 1;
      }
      Window w{int(s)};
      if (c.q.node >= 0) {
        w.q_at = at;
        w.q_width = rows(c.q);
        at += w.q_width;
      }
      w.k_at = at;
      w.v_at = at + rows(c.k);
      window[size_t(c.attention)] = w;
      at = w.v_at + rows(c.v);
    }
  }

  Graph out;
  Mapper m(g, out);
  std::vector<ValueId>& map = m.plain;
  std::vector<ValueId> stacked(stacks.size(), kNoValue);
  for (size_t i = 0; i < nodes.size() && out.ok(); ++i) {
    const Node& n = nodes[i];
    if (anchored[i] >= 0)
      stacked[size_t(anchored[i])] = stacked_gemm(g, plan, stacks[size_t(anchored[i])], m, out);
    if (skip[i]) continue;
    std::vector<ValueId> ins;
    OpParams q = n.params;
    if (window[i].stack >= 0) {
      const Window& w = window[i];
      const ValueId kv = stacked[size_t(w.stack)];
      ins = {w.q_width > 0 ? kv : m.get(n.inputs[0]), kv, kv};
      q.kv_window = true;
      q.start = w.k_at;
      q.end = w.v_at;
      q.q_start = w.q_at;
      q.q_width = w.q_width;
    } else {
      for (ValueId x : n.inputs) ins.push_back(m.get(x));
    }
    map[size_t(n.output)] = out.op(n.kind, q, std::move(ins), n.name);
  }
  for (ValueId o : g.outputs()) out.output(m.get(o), vals[size_t(o)].name);
  if (!out.ok()) return out.status().with_context("stacked-projection pass");
  return out;
}

}  // namespace hr
