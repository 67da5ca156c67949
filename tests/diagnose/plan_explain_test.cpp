// plan --explain's segments (Note [explain segments]) on a recorded plan: which segment
// dominates each node and the remedy named for it.
#include "diagnose/plan_explain.h"

#include <gtest/gtest.h>

namespace hr {
namespace {

constexpr uint64_t MiB = 1ull << 20;

NodePlan node(const char* id, const char* cls, uint64_t peak, uint64_t resident, uint64_t arena,
              uint64_t workspace = 0, uint64_t ring = 0, uint64_t streamed = 0) {
  NodePlan n;
  n.node_id = id;
  n.class_type = cls;
  n.peak = peak * MiB;
  n.resident_bytes = resident * MiB;
  n.weight_bytes = (resident + streamed) * MiB;
  n.arena_bytes = arena * MiB;
  n.workspace_bytes = workspace * MiB;
  n.ring_bytes = ring * MiB;
  n.streamed_bytes = streamed * MiB;
  return n;
}

WorkflowPlan recorded() {
  WorkflowPlan p;
  p.device = "cpu";
  p.budget = 512 * MiB;
  p.nodes = {
      node("4", "CheckpointLoaderSimple", 0, 0, 0),     node("6", "CLIPTextEncode", 60, 50, 6, 1),
      node("3", "KSampler", 400, 100, 290, 10),         node("8", "VAEDecode", 300, 20, 260),
      node("10", "KSampler", 200, 20, 40, 0, 120, 300), node("11", "CLIPTextEncode", 200, 10, 20),
  };
  p.nodes[3].fits = false;
  p.fits = false;
  p.why_not = "node 8 (VAEDecode): arena";
  p.peak = 400 * MiB;
  return p;
}

TEST(PlanExplain, DominantSegmentAndRemedyPerNode) {
  std::vector<NodeExplanation> e = plan_explain(recorded());
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0].dominant, Segment::NONE);
  EXPECT_EQ(e[1].dominant, Segment::WEIGHTS);
  EXPECT_NE(e[1].remedy.find("--lowvram"), std::string::npos) << e[1].remedy;
  EXPECT_EQ(e[2].dominant, Segment::ACTIVATIONS);
  EXPECT_EQ(e[2].activations, 280 * MiB);  // the workspace is overhead, not activations
  EXPECT_NE(e[2].remedy.find("resolution"), std::string::npos) << e[2].remedy;
  EXPECT_NE(e[2].remedy.find("cannot"), std::string::npos) << e[2].remedy;
  EXPECT_EQ(e[3].dominant, Segment::ACTIVATIONS);
  EXPECT_EQ(e[3].remedy.rfind("DOES NOT FIT", 0), 0u) << e[3].remedy;
  EXPECT_NE(e[3].remedy.find("VAEDecodeTiled"), std::string::npos) << e[3].remedy;
  EXPECT_EQ(e[4].dominant, Segment::OVERHEAD);
  EXPECT_EQ(e[4].ring, 120 * MiB);
  EXPECT_NE(e[4].remedy.find("staging ring"), std::string::npos) << e[4].remedy;
  // 170 MiB held from earlier nodes is given back on demand: the node's own activations dominate.
  EXPECT_EQ(e[5].held, 170 * MiB);
  EXPECT_EQ(e[5].overhead, 170 * MiB);
  EXPECT_EQ(e[5].dominant, Segment::ACTIVATIONS);
  EXPECT_NE(e[5].remedy.find("170.0 MiB more is held from earlier nodes"), std::string::npos)
      << e[5].remedy;
  for (const NodeExplanation& n : e) {  // the segments add up to the peak
    if (n.dominant != Segment::NONE) {
      EXPECT_EQ(n.overhead + n.weights + n.activations, n.peak) << n.node_id;
    }
  }
}

TEST(PlanExplain, FormatNamesLensesAndContext) {
  WorkflowPlan p = recorded();
  std::vector<NodeExplanation> e = plan_explain(p);
  std::string s = plan_explain_format(p, e, 0, "");
  EXPECT_NE(s.find("allocator level"), std::string::npos);
  EXPECT_NE(s.find("| 3 | KSampler | 400.0 MiB |"), std::string::npos) << s;
  EXPECT_NE(s.find("node 8 VAEDecode: DOES NOT FIT"), std::string::npos) << s;
  EXPECT_EQ(s.find("context outside the allocator"), std::string::npos);
  EXPECT_NE(s.find("does not fit"), std::string::npos);
  s = plan_explain_format(p, e, 500 * MiB, "nvml");
  EXPECT_NE(s.find("context outside the allocator (driver level, nvml): 500.0 MiB"),
            std::string::npos)
      << s;
  Json j = plan_explain_json(e);
  ASSERT_EQ(j.size(), 6u);
  EXPECT_EQ(j[2]["dominant"], "activations");
  EXPECT_EQ(j[4]["dominant"], "context and overhead");
  EXPECT_EQ(j[5]["held_from_earlier"], 170 * MiB);
}

}  // namespace
}  // namespace hr
