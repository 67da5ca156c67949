// Residency as data: the node clock, a compiled graph's weight uses on it, and the text of a
// residency plan. The planner that makes the plans is memory policy (memory/residency_planner.h).
#include "graph/residency.h"

#include <algorithm>

#include "backend/op.h"
#include "core/alignment.h"
#include "core/bytes.h"
#include "graph/planner.h"

namespace hr {

// Note [node clock]
// The planner needs to know where in a call each weight is needed, to tell whether its copy can
// run ahead of compute. It times the graph on a clock of estimated seconds: a node takes the
// larger of its FLOPs at the compute rate (attention at its own, lower rate) and the bytes it
// reads and writes at the memory rate, plus a launch cost. The first clock was FLOPs alone: it
// made normalisations and element-wise ops free (a fifth of an SD1.5 step on the H200) and
// attention as fast as a GEMM (it runs at a third of that), so copies looked hidden where
// compute in fact waited. The GPU rates are set so the clock matches the H200's measured
// steps: SD1.5 512x512 batch 2 is 1.61 TFLOP, 5.4 GB of traffic, 459 nodes and 7.6 ms (the
// clock says 7.3 ms); SDXL 1024x1024 batch 2 is 13.5 TFLOP, 31 GB, 1277 nodes and 39 ms (44).
// Other devices get the clock from their measured profile, scaled the same way (Note [device
// profile] in memory/residency_clock.cpp).
double node_seconds(const Graph& g, const ArenaPlan& plan, size_t i, const NodeClock& c) {
  if (i < plan.nodes.size() && plan.nodes[i].view) return 0;
  const Node& n = g.nodes()[i];
  std::vector<TensorDesc> in;
  in.reserve(n.inputs.size());
  double bytes = double(g.desc(n.output).bytes());
  for (ValueId x : n.inputs) {
    in.push_back(g.desc(x));
    bytes += double(g.desc(x).bytes());
  }
  const double flops = op_flops(n.kind, n.params, in, g.desc(n.output));
  const double rate = n.kind == OpKind::ATTENTION ? c.attention_flops_per_s : c.flops_per_s;
  const double compute = rate > 0 ? flops / rate : 0;
  const double memory = c.bytes_per_s > 0 ? bytes / c.bytes_per_s : 0;
  return std::max(compute, memory) + c.node_s;
}

std::vector<WeightUse> weight_uses(const Graph& g, const ArenaPlan& plan, const NodeClock& clock) {
  std::vector<int32_t> index(g.values().size(), -1);
  std::vector<WeightUse> uses;
  const std::vector<Node>& nodes = g.nodes();
  double t = 0;  // seconds of the nodes before node i
  for (size_t i = 0; i < nodes.size(); ++i) {
    const double before = t;
    t += node_seconds(g, plan, i, clock);
    if (plan.nodes[i].view) continue;
    for (ValueId x : nodes[i].inputs) {
      const ValueId s = g.storage_of(x);
      if (plan.values[size_t(s)].offset >= 0 || g.values()[size_t(s)].kind != ValueKind::WEIGHT)
        continue;
      int32_t& k = index[size_t(s)];
      if (k < 0) {
        k = int32_t(uses.size());
        WeightUse u;
        u.value = s;
        const uint64_t b = g.desc(s).bytes();
        u.bytes = std::max<uint64_t>(kDeviceAlignment, align_up(b));
        u.first = int32_t(i);
        const Shape& ws = g.desc(s).shape;
        const double rows = ws.rank > 0 && ws[0] > 0 ? double(ws[0]) : 1.0;
        u.reuse = double(g.desc(nodes[i].output).numel()) / rows;
        u.t_first = before;
        uses.push_back(u);
      }
      uses[size_t(k)].last = int32_t(i);
      uses[size_t(k)].t_last = t;
    }
  }
  return uses;
}

std::string residency_describe(const ResidencyPlan& p, const std::vector<WeightUse>& uses) {
  const uint64_t total = p.resident_bytes + p.streamed_bytes;
  if (!p.streams())
    return fmt::format("all {} weights resident ({} tensors)", bytes_format(total), uses.size());
  std::string text = fmt::format(
      "streams {} of {} weights ({} of {} tensors) through a {} ring; {} resident",
      bytes_format(p.streamed_bytes), bytes_format(total), p.streamed_count, uses.size(),
      bytes_format(p.ring_bytes), bytes_format(p.resident_bytes));
  if (p.stall_s > 0 || p.swaps > 0)  // Note [ring choice], Note [spreading copies] (memory/)
    text += fmt::format("; compute waits ~{:.1f} ms per call for copies (estimated{})",
                        p.stall_s * 1e3, p.swaps ? fmt::format(", {} swaps", p.swaps) : "");
  return text;
}

}  // namespace hr
