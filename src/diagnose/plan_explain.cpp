// plan_explain: segments per node from the workflow plan, and the remedy for the dominant one.
#include "diagnose/plan_explain.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/bytes.h"

namespace hr {

// Note [explain segments]
// A node's planned peak (allocator level, NodePlan::peak) is split as
//   weights     = NodePlan::resident_bytes (its own weights held on the device),
//   activations = NodePlan::arena_bytes less NodePlan::workspace_bytes (op workspaces live in
//                 the arena but are library overhead, the first segment of DESIGN.md),
//   overhead    = the rest: the staging ring of streamed weights, the workspaces, and what
//                 earlier nodes still hold (idle models, an arena kept from a larger graph),
//                 which headroom gives back when an allocation needs the room.
// What earlier nodes hold is part of the overhead but not of the node's need (headroom reclaims
// it when an allocation needs the room), so the segment that dominates is the largest of the
// node's own: its weights, its activations, its ring and workspaces. Each has its own remedy,
// and only the weights' remedy is moving weights off the device. The CUDA context is outside the
// allocator and its budget: it is shown once, measured at the driver level, and never added to
// these numbers.

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string activations_remedy(const NodeExplanation& n) {
  if (contains(n.class_type, "VAEDecode") || contains(n.class_type, "VAEEncode"))
    return "activations dominate: tile the VAE (VAEDecodeTiled / VAEEncodeTiled, or a smaller "
           "--vram-budget: headroom then tiles by itself) or decode fewer images at once; "
           "streaming weights cannot lower this";
  if (contains(n.class_type, "Sampler"))
    return "activations dominate: lower the resolution or the batch size (the UNet runs cond "
           "and uncond together); streaming weights cannot lower this";
  return "activations dominate: lower the resolution or the batch size, or split the workflow; "
         "streaming weights cannot lower this";
}

std::string weights_remedy(const NodeExplanation& n, uint64_t streamed) {
  std::string s =
      "weights dominate: streaming lowers this peak: --lowvram or --novram, or a "
      "smaller --vram-budget (headroom streams what does not fit)";
  if (streamed) s += fmt::format("; it already streams {}", bytes_format(streamed));
  return s + "; an f16 or bf16 --dtype halves f32 weights";
}

std::string overhead_remedy(const NodeExplanation& n) {
  if (n.ring >= n.workspaces)
    return fmt::format(
        "overhead dominates: the staging ring of streamed weights ({}); it is the "
        "price of streaming: a larger budget keeps more weights resident instead",
        bytes_format(n.ring));
  return fmt::format(
      "overhead dominates: op workspaces ({}); a lower resolution or batch "
      "shrinks them",
      bytes_format(n.workspaces));
}

std::string held_note(const NodeExplanation& n) {
  if (n.held == 0) return "";
  return fmt::format(
      " ({} more is held from earlier nodes: idle models and the kept arena, "
      "given back when an allocation needs the room; --novram keeps fewer models)",
      bytes_format(n.held));
}

NodeExplanation explain_node(const NodePlan& p) {
  NodeExplanation n;
  n.node_id = p.node_id;
  n.class_type = p.class_type;
  n.peak = p.peak;
  n.fits = p.fits;
  n.weights = p.resident_bytes;
  n.workspaces = std::min(p.workspace_bytes, p.arena_bytes);
  n.activations = p.arena_bytes - n.workspaces;
  const uint64_t own = n.weights + n.activations;
  n.overhead = p.peak > own ? p.peak - own : 0;
  n.ring = std::min(p.ring_bytes, n.overhead);
  n.workspaces = std::min(n.workspaces, n.overhead - n.ring);
  n.held = n.overhead - n.ring - n.workspaces;
  if (own + n.ring + n.workspaces == 0) {
    n.remedy = "runs no model" + held_note(n);
    return n;
  }
  // Note [explain segments]: what earlier nodes hold is given back on demand, so the node's own
  // bytes decide which segment dominates.
  n.dominant = Segment::WEIGHTS;
  uint64_t most = n.weights;
  if (n.activations > most) n.dominant = Segment::ACTIVATIONS, most = n.activations;
  if (n.ring + n.workspaces > most) n.dominant = Segment::OVERHEAD;
  if (n.dominant == Segment::WEIGHTS) n.remedy = weights_remedy(n, p.streamed_bytes);
  if (n.dominant == Segment::ACTIVATIONS) n.remedy = activations_remedy(n);
  if (n.dominant == Segment::OVERHEAD) n.remedy = overhead_remedy(n);
  n.remedy += held_note(n);
  if (!n.fits) n.remedy = fmt::format("DOES NOT FIT: {}", n.remedy);
  return n;
}

}  // namespace

const char* segment_name(Segment s) {
  switch (s) {
    case Segment::NONE:
      return "none";
    case Segment::OVERHEAD:
      return "context and overhead";
    case Segment::WEIGHTS:
      return "weights";
    case Segment::ACTIVATIONS:
      return "activations";
  }
  return "?";
}

std::vector<NodeExplanation> plan_explain(const WorkflowPlan& plan) {
  std::vector<NodeExplanation> out;
  for (const NodePlan& p : plan.nodes) out.push_back(explain_node(p));
  return out;
}

std::string plan_explain_format(const WorkflowPlan& plan, const std::vector<NodeExplanation>& nodes,
                                uint64_t context_bytes, const std::string& context_source) {
  std::string s = fmt::format(
      "explain: plan on {} in {}, budget {}; segments at each node's peak (allocator level)\n\n",
      plan.device, dtype_name(plan.compute_dtype),
      plan.budget == UINT64_MAX ? std::string("none") : bytes_format(plan.budget));
  s += "| node | class | peak | context and overhead | of it held from earlier nodes | weights | "
       "activations | dominant |\n|---|---|---|---|---|---|---|---|\n";
  for (const NodeExplanation& n : nodes)
    s +=
        fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", n.node_id, n.class_type,
                    bytes_format(n.peak), bytes_format(n.overhead), bytes_format(n.held),
                    bytes_format(n.weights), bytes_format(n.activations), segment_name(n.dominant));
  s += "\n";
  for (const NodeExplanation& n : nodes)
    if (n.dominant != Segment::NONE)
      s += fmt::format("node {} {}: {}\n", n.node_id, n.class_type, n.remedy);
  if (context_bytes > 0)
    s += fmt::format(
        "\ncontext outside the allocator (driver level, {}): {}; it is not part of "
        "the budget or of the peaks above\n",
        context_source, bytes_format(context_bytes));
  s += plan.fits ? fmt::format("\nthe workflow fits: predicted peak {} (allocator level)\n",
                               bytes_format(plan.peak))
                 : fmt::format("\nthe workflow does not fit: {}; smallest budget that fits: {}\n",
                               plan.why_not, bytes_format(plan.smallest_budget));
  return s;
}

Json plan_explain_json(const std::vector<NodeExplanation>& nodes) {
  Json j = Json::array();
  for (const NodeExplanation& n : nodes)
    j.push_back({{"node_id", n.node_id},
                 {"class_type", n.class_type},
                 {"peak", n.peak},
                 {"overhead", n.overhead},
                 {"ring", n.ring},
                 {"workspaces", n.workspaces},
                 {"held_from_earlier", n.held},
                 {"weights", n.weights},
                 {"activations", n.activations},
                 {"dominant", segment_name(n.dominant)},
                 {"fits", n.fits},
                 {"remedy", n.remedy}});
  return j;
}

}  // namespace hr
