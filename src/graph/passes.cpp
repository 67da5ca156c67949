// Graph passes (Note [graph passes] in passes.h): channels-last layout and op fusion.
#include "graph/passes.h"

#include "core/env.h"
#include "graph/pass_util.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace hr {
using pass_util::dequant_node;
using pass_util::Mapper;
using pass_util::value_uses;
namespace {

bool is_unary_elementwise(OpKind k) {
  switch (k) {
    case OpKind::GELU:
    case OpKind::GELU_TANH:
    case OpKind::QUICK_GELU:
    case OpKind::SILU:
    case OpKind::TANH:
    case OpKind::SCALE:
    case OpKind::CAST:
    case OpKind::COPY: return true;
    default: return false;
  }
}

bool is_binary(OpKind k) {
  return k == OpKind::ADD || k == OpKind::SUB || k == OpKind::MUL || k == OpKind::DIV;
}

std::string value_label(const Graph& g, ValueId v) {
  const Value& x = g.value(v);
  if (x.kind == ValueKind::INTERMEDIATE && x.producer >= 0)
    return g.nodes()[size_t(x.producer)].name;
  return x.name;
}

bool perm_is(const OpParams& p, std::initializer_list<int> perm) {
  int i = 0;
  for (int d : perm)
    if (p.perm[i++] != d) return false;
  return true;
}

// NCHW axis -> its position in NHWC.
int cl_axis(int axis) {
  if (axis < 0) axis += 4;
  static const int kMap[4] = {0, 3, 1, 2};
  return kMap[axis];
}

}  // namespace

PassOptions pass_options(const Graph& g, const BackendKernels& kernels) {
  PassOptions o;
  if (kernels.runs_fp8_gemm() && g.weight_storage())
    for (const auto& [name, st] : *g.weight_storage()) o.fp8_linear = o.fp8_linear || st.fast;
  for (const Node& n : g.nodes())
    if (n.kind == OpKind::CONV2D && !n.params.channels_last &&
        kernels.prefers_channels_last(g.desc(n.inputs[0]).dtype))
      o.channels_last = true;
  // Note [stacked context projections] in pass_stack.cpp
  o.stack = kernels.prefers_stacked_weights() && env_switch("HEADROOM_STACK_PROJECTIONS", true);
  o.stack_qkv = o.stack && env_switch("HEADROOM_STACK_QKV", true);
  return o;
}

Result<Graph> graph_passes(const Graph& g, const PassOptions& options,
                           const BackendKernels* kernels) {
  if (!g.ok()) return g.status();
  Graph cur = g;
  if (options.fp8_linear) {
    HR_ASSIGN_OR_RETURN(cur, pass_fp8_linear(cur));
  }
  if (options.channels_last) {
    HR_ASSIGN_OR_RETURN(cur, pass_channels_last(cur, kernels));
  }
  if (options.fuse) {
    HR_ASSIGN_OR_RETURN(cur, pass_fuse(cur));
  }
  if (options.stack || options.stack_qkv) {
    HR_ASSIGN_OR_RETURN(cur, pass_stack_projections(cur, options.stack_qkv));
  }
  return cur;
}

Result<Graph> graph_passes(const Graph& g, const BackendKernels& kernels) {
  return graph_passes(g, pass_options(g, kernels), &kernels);
}

// ---------------------------------------------------------------------------------------------
// Channels last

Result<Graph> pass_channels_last(const Graph& g, const BackendKernels* kernels) {
  if (!g.ok()) return g.status();
  const auto& vals = g.values();
  const auto& nodes = g.nodes();
  const auto uses = value_uses(g);
  Graph out;
  Mapper m(g, out);
  std::vector<ValueId>& plain = m.plain;
  std::vector<ValueId> cl(vals.size(), kNoValue);  // NHWC version of a 4-d NCHW value

  auto get_plain = [&](ValueId v) -> ValueId {
    ValueId p = m.get(v);
    if (p != kNoValue) return p;
    if (cl[size_t(v)] == kNoValue) return kNoValue;  // an earlier failure; out.status() has it
    return plain[size_t(v)] = out.permute(cl[size_t(v)], {0, 3, 1, 2}, value_label(g, v) + ".nchw");
  };
  auto get_cl = [&](ValueId v) -> ValueId {
    if (cl[size_t(v)] != kNoValue) return cl[size_t(v)];
    return cl[size_t(v)] = out.permute(get_plain(v), {0, 2, 3, 1}, value_label(g, v) + ".nhwc");
  };
  auto has_cl = [&](ValueId v) { return cl[size_t(v)] != kNoValue; };
  auto single_reader = [&](ValueId v) -> int {
    return uses[size_t(v)].size() == 1 && !vals[size_t(v)].is_output ? uses[size_t(v)][0] : -1;
  };

  // A convolution goes channels-last when its filter is a weight, or a stored weight's
  // dequantizing CAST that it alone reads (then the CAST moves after the rearrangement):
  // per CONV2D node, that weight and its OHWI descriptor.
  struct Filter {
    ValueId weight = kNoValue;
    TensorDesc ohwi;
  };
  std::vector<Filter> filter(nodes.size());
  std::vector<char> done(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != OpKind::CONV2D || n.params.channels_last || n.params.add_input) continue;
    if (kernels && !kernels->prefers_channels_last(g.desc(n.inputs[0]).dtype)) continue;
    const ValueId w = n.inputs[1];
    ValueId f = vals[size_t(w)].kind == ValueKind::WEIGHT ? w : kNoValue;
    const int dq = dequant_node(g, w);
    if (dq >= 0 && single_reader(w) >= 0) f = nodes[size_t(dq)].inputs[0];
    if (f == kNoValue) continue;
    Result<TensorDesc> d = weight_layout_desc(g.desc(f), WeightLayout::CONV_OHWI);
    if (!d.ok()) continue;
    filter[i] = Filter{f, *d};
    if (f != w) done[size_t(dq)] = 1;  // emitted by the convolution
  }
  for (size_t i = 0; i < nodes.size() && out.ok(); ++i) {
    if (done[i]) continue;
    const Node& n = nodes[i];
    const ValueId o = n.output;
    const Shape& os = vals[size_t(o)].desc.shape;
    const ValueId x0 = n.inputs.empty() ? kNoValue : n.inputs[0];
    OpParams p = n.params;
    bool handled = false;
    switch (n.kind) {
      case OpKind::CONV2D: {
        const Filter& f = filter[i];
        if (f.weight == kNoValue) break;
        ValueId w = out.weight(vals[size_t(f.weight)].name, f.ohwi, WeightLayout::CONV_OHWI);
        if (f.weight != n.inputs[1]) {  // the dequantizing CAST, now of the rearranged filter
          const Node& dq = nodes[size_t(vals[size_t(n.inputs[1])].producer)];
          std::vector<ValueId> dq_ins = {w};
          if (dq.inputs.size() > 1) dq_ins.push_back(get_plain(dq.inputs[1]));
          w = out.op(OpKind::CAST, dq.params, std::move(dq_ins), dq.name);
        }
        std::vector<ValueId> ins = {get_cl(x0), w};
        if (n.inputs.size() > 2) ins.push_back(get_plain(n.inputs[2]));
        p.channels_last = true;
        cl[size_t(o)] = out.op(n.kind, p, std::move(ins), n.name);
        handled = true;
        break;
      }
      case OpKind::GROUP_NORM:
      case OpKind::UPSAMPLE_NEAREST: {
        if (p.channels_last || os.rank != 4 || !has_cl(x0)) break;
        std::vector<ValueId> ins = {cl[size_t(x0)]};
        for (size_t k = 1; k < n.inputs.size(); ++k) ins.push_back(get_plain(n.inputs[k]));
        p.channels_last = true;
        cl[size_t(o)] = out.op(n.kind, p, std::move(ins), n.name);
        handled = true;
        break;
      }
      case OpKind::CONCAT: {
        if (os.rank != 4) break;
        bool any = false;
        for (ValueId x : n.inputs) any = any || has_cl(x);
        if (!any) break;
        std::vector<ValueId> ins;
        for (ValueId x : n.inputs) ins.push_back(get_cl(x));
        p.axis = cl_axis(p.axis);
        cl[size_t(o)] = out.op(n.kind, p, std::move(ins), n.name);
        handled = true;
        break;
      }
      case OpKind::SLICE: {
        if (os.rank != 4 || !has_cl(x0)) break;
        p.axis = cl_axis(p.axis);
        cl[size_t(o)] = out.op(n.kind, p, {cl[size_t(x0)]}, n.name);
        handled = true;
        break;
      }
      case OpKind::RESHAPE: {
        // [N,C,H,W] -> [N,C,HW] read only by permute (0,2,1): tokens [N,HW,C] are a view of NHWC.
        const Shape& is = g.shape(x0);
        if (!has_cl(x0) || is.rank != 4 || os.rank != 3 || os[0] != is[0] || os[1] != is[1] ||
            os[2] != is[2] * is[3])
          break;
        const int j = single_reader(o);
        if (j < 0 || nodes[size_t(j)].kind != OpKind::PERMUTE || !perm_is(nodes[size_t(j)].params, {0, 2, 1}))
          break;
        plain[size_t(nodes[size_t(j)].output)] =
            out.reshape(cl[size_t(x0)], Shape{is[0], is[2] * is[3], is[1]}, nodes[size_t(j)].name);
        done[size_t(j)] = 1;
        handled = true;
        break;
      }
      case OpKind::PERMUTE: {
        // Tokens [N,HW,C] -> permute (0,2,1) -> reshape [N,C,H,W]: a view as NHWC [N,H,W,C].
        const Shape& is = g.shape(x0);
        if (is.rank != 3 || !perm_is(p, {0, 2, 1})) break;
        const int j = single_reader(o);
        if (j < 0 || nodes[size_t(j)].kind != OpKind::RESHAPE) break;
        const Shape& rs = vals[size_t(nodes[size_t(j)].output)].desc.shape;
        if (rs.rank != 4 || rs[0] != is[0] || rs[1] != is[2] || rs[2] * rs[3] != is[1]) break;
        cl[size_t(nodes[size_t(j)].output)] =
            out.reshape(get_plain(x0), Shape{rs[0], rs[2], rs[3], rs[1]}, nodes[size_t(j)].name);
        done[size_t(j)] = 1;
        handled = true;
        break;
      }
      default: {
        if (is_unary_elementwise(n.kind)) {
          if (os.rank != 4 || !has_cl(x0)) break;
          cl[size_t(o)] = out.op(n.kind, p, {cl[size_t(x0)]}, n.name);
          handled = true;
        } else if (is_binary(n.kind)) {
          if (os.rank != 4) break;
          bool any = false;
          for (ValueId x : n.inputs) any = any || has_cl(x);
          if (!any) break;
          std::vector<ValueId> ins;
          bool ok = true;
          for (ValueId x : n.inputs) {
            const Shape& s = g.shape(x);
            if (has_cl(x) || s == os) {
              ins.push_back(get_cl(x));
            } else if (s.rank == 4 && s[2] == 1 && s[3] == 1) {  // per-channel term: a view
              ins.push_back(out.reshape(get_plain(x), Shape{s[0], 1, 1, s[1]},
                                        value_label(g, x) + ".nhwc"));
            } else {
              ok = false;
            }
          }
          if (!ok) break;
          cl[size_t(o)] = out.op(n.kind, p, std::move(ins), n.name);
          handled = true;
        }
        break;
      }
    }
    if (handled) continue;
    std::vector<ValueId> ins;
    for (ValueId x : n.inputs) ins.push_back(get_plain(x));
    plain[size_t(o)] = out.op(n.kind, n.params, std::move(ins), n.name);
  }
  for (ValueId o : g.outputs()) out.output(get_plain(o), vals[size_t(o)].name);
  if (!out.ok()) return out.status().with_context("channels-last pass");
  return out;
}

// ---------------------------------------------------------------------------------------------
// Fusion

Result<Graph> pass_fuse(const Graph& g) {
  if (!g.ok()) return g.status();
  const auto& vals = g.values();
  const auto& nodes = g.nodes();
  const auto uses = value_uses(g);
  auto single_reader = [&](ValueId v) -> int {
    return uses[size_t(v)].size() == 1 && !vals[size_t(v)].is_output ? uses[size_t(v)][0] : -1;
  };
  auto producer = [&](ValueId v) -> int {
    return vals[size_t(v)].kind == ValueKind::INTERMEDIATE ? vals[size_t(v)].producer : -1;
  };

  // Decide the fusions first.
  struct AddFusion {
    int op = -1;       // the LINEAR/CONV2D node
    int reshape = -1;  // the RESHAPE between it and the ADD, or -1
    ValueId term = kNoValue;
  };
  std::vector<int> silu_of(nodes.size(), -1);   // GROUP_NORM node -> its SILU reader
  std::vector<char> skip(nodes.size(), 0);      // emitted elsewhere (or folded)
  std::vector<AddFusion> add_of(nodes.size());  // ADD node -> what it absorbs
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind == OpKind::GROUP_NORM && !n.params.fuse_silu) {
      const int j = single_reader(n.output);
      if (j >= 0 && nodes[size_t(j)].kind == OpKind::SILU) {
        silu_of[i] = j;
        skip[size_t(j)] = 1;
      }
    }
    if (n.kind != OpKind::ADD || n.inputs.size() != 2) continue;
    const TensorDesc& od = g.desc(n.output);
    // The operand computed last first: deferring its producer to the ADD moves it least.
    const int first = producer(n.inputs[1]) > producer(n.inputs[0]) ? 1 : 0;
    for (int kk = 0; kk < 2; ++kk) {
      const int k = kk == 0 ? first : 1 - first;
      const ValueId a = n.inputs[size_t(k)], r = n.inputs[size_t(1 - k)];
      if (a == r || g.desc(a) != od || g.desc(r).dtype != od.dtype) continue;
      int pi = producer(a);
      int ri = -1;
      if (pi >= 0 && nodes[size_t(pi)].kind == OpKind::RESHAPE) {
        ri = pi;
        if (single_reader(a) != int(i)) continue;
        pi = producer(nodes[size_t(ri)].inputs[0]);
        if (pi < 0 || g.shape(r) != od.shape) continue;
        if (nodes[size_t(pi)].kind != OpKind::LINEAR &&
            nodes[size_t(pi)].kind != OpKind::LINEAR_FP8)
          continue;
        if (single_reader(nodes[size_t(ri)].inputs[0]) != ri) continue;
      } else if (pi < 0 || single_reader(a) != int(i)) {
        continue;
      }
      const Node& p = nodes[size_t(pi)];
      if ((p.kind != OpKind::LINEAR && p.kind != OpKind::LINEAR_FP8 &&
           p.kind != OpKind::CONV2D) || p.params.add_input ||
          skip[size_t(pi)])
        continue;
      // Whether the op takes this term (op.h's add_input rule, as op_infer checks it); through
      // a reshape the term is reshaped to the op's output shape.
      std::vector<TensorDesc> descs;
      for (ValueId x : p.inputs) descs.push_back(g.desc(x));
      descs.push_back(ri >= 0 ? TensorDesc{od.dtype, g.shape(p.output)} : g.desc(r));
      OpParams q = p.params;
      q.add_input = true;
      if (!op_infer(p.kind, q, descs).ok()) continue;
      add_of[i] = AddFusion{pi, ri, r};
      skip[size_t(pi)] = 1;
      if (ri >= 0) skip[size_t(ri)] = 1;
      break;
    }
  }

  Graph out;
  Mapper m(g, out);
  std::vector<ValueId>& map = m.plain;
  auto get = [&](ValueId v) { return m.get(v); };
  for (size_t i = 0; i < nodes.size() && out.ok(); ++i) {
    if (skip[i]) continue;
    const Node& n = nodes[i];
    const AddFusion& f = add_of[i];
    if (f.op >= 0) {
      const Node& p = nodes[size_t(f.op)];
      std::vector<ValueId> ins;
      for (ValueId x : p.inputs) ins.push_back(get(x));
      ValueId term = get(f.term);
      if (f.reshape >= 0) term = out.reshape(term, g.shape(p.output), n.name + ".term");
      ins.push_back(term);
      OpParams q = p.params;
      q.add_input = true;
      ValueId y = out.op(p.kind, q, std::move(ins), p.name + "+" + n.name);
      if (f.reshape >= 0) y = out.reshape(y, g.shape(n.output), nodes[size_t(f.reshape)].name);
      map[size_t(n.output)] = y;
      continue;
    }
    std::vector<ValueId> ins;
    for (ValueId x : n.inputs) ins.push_back(get(x));
    OpParams q = n.params;
    if (silu_of[i] >= 0) q.fuse_silu = true;
    ValueId y = out.op(n.kind, q, std::move(ins), n.name);
    map[size_t(n.output)] = y;
    if (silu_of[i] >= 0) map[size_t(nodes[size_t(silu_of[i])].output)] = y;
  }
  for (ValueId o : g.outputs()) out.output(get(o), vals[size_t(o)].name);
  if (!out.ok()) return out.status().with_context("fusion pass");
  return out;
}

}  // namespace hr
