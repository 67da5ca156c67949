// `headroom plan --explain`: each node's planned peak split into the three segments of DESIGN.md
// (context and overhead, resident weights, activations), the one that dominates, and the remedy
// that lowers it, in words a user can act on (Note [explain segments] in plan_explain.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workflow/workflow_plan.h"

namespace hr {

enum class Segment : uint8_t { NONE = 0, OVERHEAD, WEIGHTS, ACTIVATIONS };
const char* segment_name(Segment s);  // "none", "context and overhead", "weights", "activations"

// One node, allocator level throughout.
struct NodeExplanation {
  std::string node_id, class_type;
  uint64_t peak = 0;
  uint64_t overhead = 0;     // staging ring, op workspaces and what earlier nodes still hold
  uint64_t ring = 0;         // of overhead: the staging ring of streamed weights
  uint64_t workspaces = 0;   // of overhead: the largest op workspace
  uint64_t held = 0;         // of overhead: what earlier nodes still hold (given back on demand)
  uint64_t weights = 0;      // this node's weights resident on the device
  uint64_t activations = 0;  // its activation arena less the workspaces inside it
  Segment dominant = Segment::NONE;
  bool fits = true;
  std::string remedy;
};

std::vector<NodeExplanation> plan_explain(const WorkflowPlan& plan);

// The explanation as text: a table, one remedy line per node that holds memory, and the
// context outside the allocator (driver level) when `context_bytes` was measured (> 0).
std::string plan_explain_format(const WorkflowPlan& plan, const std::vector<NodeExplanation>& nodes,
                                uint64_t context_bytes, const std::string& context_source);
Json plan_explain_json(const std::vector<NodeExplanation>& nodes);

}  // namespace hr
