// Helpers the graph passes share (passes.cpp, pass_stack.cpp).
#pragma once

#include <vector>

#include "graph/graph.h"

namespace hr::pass_util {

// Readers of each value (node indices, once per input slot).
inline std::vector<std::vector<int>> value_uses(const Graph& g) {
  std::vector<std::vector<int>> uses(g.values().size());
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId x : nodes[i].inputs) uses[size_t(x)].push_back(int(i));
  return uses;
}

// The node that dequantizes weight value `w` (a CAST of a stored weight, Note [fp8 weights] in
// graph.h), or -1 when `w` is not one.
inline int dequant_node(const Graph& g, ValueId w) {
  const Value& v = g.value(w);
  if (v.kind != ValueKind::INTERMEDIATE || v.producer < 0) return -1;
  const Node& n = g.nodes()[size_t(v.producer)];
  if (n.kind != OpKind::CAST) return -1;
  const Value& src = g.value(n.inputs[0]);
  return src.kind == ValueKind::WEIGHT && src.layout == WeightLayout::STORED ? v.producer : -1;
}

// Maps an old graph's INPUT and WEIGHT values into `out` (inputs up front, in value order, so
// that input order is kept; weights on first use).
struct Mapper {
  const Graph& g;
  Graph& out;
  std::vector<ValueId> plain;
  Mapper(const Graph& g_, Graph& out_) : g(g_), out(out_), plain(g_.values().size(), kNoValue) {
    for (size_t v = 0; v < g.values().size(); ++v)
      if (g.values()[v].kind == ValueKind::INPUT)
        plain[v] = out.input(g.values()[v].name, g.values()[v].desc);
  }
  ValueId get(ValueId v) {
    if (plain[size_t(v)] != kNoValue) return plain[size_t(v)];
    const Value& x = g.value(v);
    if (x.kind == ValueKind::WEIGHT) return plain[size_t(v)] = out.weight(x.name, x.desc, x.layout);
    return kNoValue;
  }
};

}  // namespace hr::pass_util
