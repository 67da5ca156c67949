// The warning/danger levels and the plan cache, without running anything.
#include "jobs/memory_levels.h"

#include <gtest/gtest.h>

#include <cmath>

#include "jobs/plan_cache.h"

namespace hr {
namespace {

TEST(MemoryLevels, DefaultsAndValidation) {
  MemoryLevels lv;
  EXPECT_EQ(lv.warning(), 0.8);
  EXPECT_EQ(lv.danger(), 0.9);
  EXPECT_FALSE(lv.set(0.95, 0.9).ok());  // warning above danger
  EXPECT_FALSE(lv.set(0.0, 0.9).ok());
  EXPECT_FALSE(lv.set(0.5, 1.1).ok());
  EXPECT_FALSE(lv.set(std::nan(""), 0.9).ok());
  EXPECT_EQ(lv.warning(), 0.8);  // unchanged by a refused pair
  ASSERT_TRUE(lv.set(0.7, 0.7).ok());
  EXPECT_EQ(lv.danger(), 0.7);
  EXPECT_EQ(MemoryLevels::level_bytes(1000, 0.8), 800u);
  EXPECT_EQ(MemoryLevels::level_bytes(UINT64_MAX, 0.8), UINT64_MAX);  // unlimited: no level
}

Prompt prompt_of(int64_t seed, int64_t width, const std::string& prefix = "ComfyUI") {
  static const std::string kId = "1";
  static const std::string kClass = "NoSuchNodeForPlanning";  // refused without reading files
  Prompt p;
  PromptNode& n = p.nodes[kId];
  n.id = kId;
  n.class_type = kClass;
  n.inputs = Json{{"seed", seed}, {"width", width}, {"filename_prefix", prefix}};
  p.outputs.push_back(kId);
  return p;
}

TEST(PlanCache, SameGraphWithAnotherSeedOrPrefixHitsOthersMiss) {
  PlanCache cache(2);
  WorkflowPlanOptions o;
  o.budget = 1 << 20;
  Result<WorkflowPlan> first = cache.plan(prompt_of(1, 64), o);
  EXPECT_FALSE(first.ok());  // the planner's answer, cached as it is
  EXPECT_EQ(cache.plan(prompt_of(2, 64), o).status().message(), first.status().message());
  EXPECT_EQ(cache.hits(), 1u);
  (void)cache.plan(prompt_of(3, 64, "other"), o);  // another file name: no shape changes
  EXPECT_EQ(cache.hits(), 2u);
  (void)cache.plan(prompt_of(1, 128), o);  // another shape
  o.budget = 2 << 20;                // another budget
  (void)cache.plan(prompt_of(1, 64), o);
  EXPECT_EQ(cache.hits(), 2u);
  o.budget = 1 << 20;  // evicted (capacity 2): planned again
  (void)cache.plan(prompt_of(1, 64), o);
  EXPECT_EQ(cache.hits(), 2u);
  cache.clear();
  (void)cache.plan(prompt_of(1, 64), o);
  EXPECT_EQ(cache.hits(), 2u);
}

}  // namespace
}  // namespace hr
