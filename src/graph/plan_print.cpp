// Printing an ArenaPlan: the per-node table `headroom plan` shows and its totals.
#include <algorithm>

#include "graph/planner.h"

namespace hr {

std::string plan_format(const Graph& g, const ArenaPlan& plan) {
  std::string s;
  auto out = std::back_inserter(s);
  size_t name_w = 4;
  for (const Node& n : g.nodes()) name_w = std::min<size_t>(std::max(name_w, n.name.size()), 48);
  fmt::format_to(out, "{:>5}  {:<18} {:<{}} {:<24} {:>10} {:>10} {:>10}  {}\n", "node", "op",
                 "name", name_w, "output", "bytes", "workspace", "live", "note");
  const size_t n = std::min(g.nodes().size(), plan.nodes.size());
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    const NodeSlot& ns = plan.nodes[i];
    const TensorDesc& d = g.desc(node.output);
    const char* note = ns.view ? "view" : ns.in_place ? "in place" : "";
    fmt::format_to(out, "{:>5}  {:<18} {:<{}} {:<24} {:>10} {:>10} {:>10}  {}\n", i,
                   op_name(node.kind), node.name, name_w, d.str(), bytes_format(d.bytes()),
                   ns.workspace_bytes ? bytes_format(ns.workspace_bytes) : "-",
                   bytes_format(ns.live_bytes), note);
  }
  fmt::format_to(out, "weights      {} ({} bytes)\n", bytes_format(plan.weight_bytes),
                 plan.weight_bytes);
  fmt::format_to(out, "arena        {} ({} bytes, {})\n", bytes_format(plan.arena_bytes),
                 plan.arena_bytes, plan.strategy.empty() ? "empty" : plan.strategy);
  fmt::format_to(out, "workspace    {} (largest single node)\n",
                 bytes_format(plan.workspace_peak));
  fmt::format_to(out, "inputs       {}   outputs {}\n", bytes_format(plan.input_bytes),
                 bytes_format(plan.output_bytes));
  fmt::format_to(out, "lower bound  {} ({} bytes)\n", bytes_format(plan.lower_bound),
                 plan.lower_bound);
  fmt::format_to(out, "arena / lower bound = {:.4f}\n", plan.ratio());
  return s;
}

}  // namespace hr
