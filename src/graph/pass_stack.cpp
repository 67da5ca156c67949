// The stacked-projection pass (Note [stacked context projections]).
#include <algorithm>
#include <map>
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
namespace {

struct Candidate {
  int attention = -1;             // the ATTENTION node
  int q_node = -1;                // its Q LINEAR when stacked too (self-attention mode)
  int k_node = -1, v_node = -1;   // its K and V LINEARs
  uint64_t bytes = 0;             // of the stacked weights
};

struct Stack {
  std::vector<int> members;  // indices into the candidates
  int anchor = -1;           // the node where the stacked GEMM is emitted
};

// The LINEAR producing v, when it is a bias-free projection with a stored 2-d weight that only
// `reader` reads; else -1.
int projection_of(const Graph& g, const std::vector<std::vector<int>>& uses, ValueId v, int reader) {
  const Value& x = g.value(v);
  if (x.kind != ValueKind::INTERMEDIATE || x.producer < 0 || x.is_output) return -1;
  if (uses[size_t(v)].size() != 1 || uses[size_t(v)][0] != reader) return -1;
  const Node& n = g.nodes()[size_t(x.producer)];
  if (n.kind != OpKind::LINEAR || n.inputs.size() != 2 || n.params.add_input) return -1;
  const Value& w = g.value(n.inputs[1]);
  if (w.kind != ValueKind::WEIGHT || w.layout != WeightLayout::STORED || w.desc.shape.rank != 2)
    return -1;
  if (w.name.find('+') != std::string::npos) return -1;  // '+' separates a stack's parts
  return x.producer;
}

std::vector<Candidate> candidates(const Graph& g, const std::vector<std::vector<int>>& uses) {
  const auto& nodes = g.nodes();
  std::vector<Candidate> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != OpKind::ATTENTION || n.params.kv_window || n.inputs.size() != 3) continue;
    if (n.inputs[1] == n.inputs[2]) continue;
    const int k = projection_of(g, uses, n.inputs[1], int(i));
    const int v = projection_of(g, uses, n.inputs[2], int(i));
    if (k < 0 || v < 0) continue;
    const Node &kn = nodes[size_t(k)], &vn = nodes[size_t(v)];
    if (kn.inputs[0] != vn.inputs[0]) continue;
    const TensorDesc &kw = g.desc(kn.inputs[1]), &vw = g.desc(vn.inputs[1]);
    if (kw.dtype != vw.dtype || kw.shape[1] != vw.shape[1]) continue;
    if (g.shape(n.inputs[2])[2] != g.shape(n.inputs[0])[2]) continue;  // Dv = D
    out.push_back(Candidate{int(i), -1, k, v, kw.bytes() + vw.bytes()});
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
    const int q = projection_of(g, uses, a, int(i));
    const int k = projection_of(g, uses, b, int(i));
    const int v = projection_of(g, uses, c, int(i));
    if (q < 0 || k < 0 || v < 0) continue;
    const ValueId x = nodes[size_t(q)].inputs[0];
    if (nodes[size_t(k)].inputs[0] != x || nodes[size_t(v)].inputs[0] != x) continue;
    const TensorDesc& qw = g.desc(nodes[size_t(q)].inputs[1]);
    bool same = true;
    for (int p : {k, v}) {
      const TensorDesc& w = g.desc(nodes[size_t(p)].inputs[1]);
      same = same && w.dtype == qw.dtype && w.shape == qw.shape;
    }
    if (!same) continue;
    out.push_back(Candidate{int(i), q, k, v, 3 * qw.bytes()});
  }
  return out;
}

// Candidates grouped by their input, split into stacks of at most `cap` weight bytes.
std::vector<Stack> stacks_of(const Graph& g, const std::vector<Candidate>& cs, uint64_t cap) {
  std::map<ValueId, std::vector<int>> by_input;
  for (size_t i = 0; i < cs.size(); ++i)
    by_input[g.nodes()[size_t(cs[i].k_node)].inputs[0]].push_back(int(i));
  std::vector<Stack> out;
  for (const auto& [x, members] : by_input) {
    if (members.size() < 2) continue;
    Stack cur;
    uint64_t bytes = 0;
    for (int m : members) {
      const TensorDesc& w = g.desc(g.nodes()[size_t(cs[size_t(m)].k_node)].inputs[1]);
      const TensorDesc& first =
          cur.members.empty() ? w : g.desc(g.nodes()[size_t(cs[size_t(cur.members[0])].k_node)].inputs[1]);
      const bool fits = bytes + cs[size_t(m)].bytes <= cap && w.dtype == first.dtype &&
                        w.shape[1] == first.shape[1];
      if (!cur.members.empty() && !fits) {
        out.push_back(std::move(cur));
        cur = Stack{};
        bytes = 0;
      }
      cur.members.push_back(m);
      bytes += cs[size_t(m)].bytes;
    }
    if (!cur.members.empty()) out.push_back(std::move(cur));
  }
  return out;
}

// The projection LINEARs of a candidate, in stacking order (Q first when stacked).
std::vector<int> stacked_nodes(const Candidate& c) {
  if (c.q_node >= 0) return {c.q_node, c.k_node, c.v_node};
  return {c.k_node, c.v_node};
}

// The stacked-projection plan: the candidates and their stacks (context stacks first, then one
// per self-attention).
struct StackPlan {
  std::vector<Candidate> cs;
  std::vector<Stack> stacks;
};

StackPlan stack_plan(const Graph& g, bool self_attention) {
  const auto uses = value_uses(g);
  uint64_t cap = 0;
  for (const Value& v : g.values())
    if (v.kind == ValueKind::WEIGHT) cap = std::max<uint64_t>(cap, v.desc.bytes());
  StackPlan p;
  p.cs = candidates(g, uses);
  p.stacks = stacks_of(g, p.cs, cap);
  if (self_attention) {
    std::vector<char> taken(g.nodes().size(), 0);
    for (const Stack& s : p.stacks)
      for (int m : s.members) taken[size_t(p.cs[size_t(m)].attention)] = 1;
    for (const Candidate& c : self_candidates(g, uses, taken)) {
      p.cs.push_back(c);
      p.stacks.push_back(Stack{{int(p.cs.size()) - 1}});
    }
  }
  // Each stack's GEMM goes where its first projection was.
  for (Stack& s : p.stacks) {
    s.anchor = INT32_MAX;
    for (int m : s.members)
      for (int node : stacked_nodes(p.cs[size_t(m)])) s.anchor = std::min(s.anchor, node);
  }
  return p;
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
  auto rows = [&](int node) { return g.desc(nodes[size_t(node)].inputs[1]).shape[0]; };
  for (size_t s = 0; s < stacks.size(); ++s) {
    anchored[size_t(stacks[s].anchor)] = int(s);
    int64_t at = 0;
    for (int m : stacks[s].members) {
      const Candidate& c = cs[size_t(m)];
      for (int node : stacked_nodes(c)) skip[size_t(node)] = 1;
      Window w{int(s)};
      if (c.q_node >= 0) {
        w.q_at = at;
        w.q_width = rows(c.q_node);
        at += w.q_width;
      }
      w.k_at = at;
      w.v_at = at + rows(c.k_node);
      window[size_t(c.attention)] = w;
      at = w.v_at + rows(c.v_node);
    }
  }

  Graph out;
  Mapper m(g, out);
  std::vector<ValueId>& map = m.plain;
  std::vector<ValueId> stacked(stacks.size(), kNoValue);
  for (size_t i = 0; i < nodes.size() && out.ok(); ++i) {
    const Node& n = nodes[i];
    if (anchored[i] >= 0) {
      const Stack& s = stacks[size_t(anchored[i])];
      const Candidate& first = cs[size_t(s.members[0])];
      std::vector<std::string> parts;
      int64_t rows = 0;
      for (int mi : s.members)
        for (int node : stacked_nodes(cs[size_t(mi)])) {
          const Value& w = g.value(nodes[size_t(node)].inputs[1]);
          parts.push_back(w.name);
          rows += w.desc.shape[0];
        }
      const TensorDesc& w0 = g.desc(nodes[size_t(first.k_node)].inputs[1]);
      const ValueId w = out.weight(weight_stack_name(parts),
                                   TensorDesc{w0.dtype, Shape{rows, w0.shape[1]}},
                                   WeightLayout::STACK);
      stacked[size_t(anchored[i])] =
          out.linear(m.get(nodes[size_t(first.k_node)].inputs[0]), w, kNoValue,
                     first.q_node >= 0
                         ? nodes[size_t(first.attention)].name + ".to_qkv"
                         : fmt::format("{}.to_kv_x{}", nodes[size_t(first.attention)].name,
                                       s.members.size()));
    }
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
