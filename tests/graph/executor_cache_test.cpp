// Note [bounded caches]: 60 distinct shapes through one Executor keep at most the cache limits'
// compiled graphs and captured runs, and on the GPU the page-locked input staging of the captures
// stays bounded too; a shape that comes back after its plan was dropped runs again, equal to
// its first run.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/allocator.h"
#include "graph/executor.h"
#include "graph_test_util.h"
#include "memory/executor_policies.h"
#include "test_gpu.h"

namespace hr {
namespace {

TensorDesc f32(std::initializer_list<int64_t> d) { return TensorDesc{DType::F32, Shape(d)}; }

// linear -> gelu -> linear over `rows` tokens: one structure key per row count.
Graph rows_graph(int64_t rows) {
  Graph g;
  ValueId x = g.input("x", f32({1, rows, 16}));
  ValueId h = g.linear(x, g.weight("w1", f32({32, 16})), g.weight("b1", f32({32})), "fc1");
  h = g.unary(OpKind::GELU, h, "act");
  h = g.linear(h, g.weight("w2", f32({16, 32})), g.weight("b2", f32({16})), "fc2");
  g.output(h, "y");
  return g;
}

// Runs 60 row counts `runs` times each; returns the first row count's output of its first run
// and of its run after the others pushed its plan out.
void sixty_shapes(Executor& ex, Backend& backend, int runs, uint64_t* pinned_most) {
  std::map<std::string, HostTensor> first_inputs;
  test::MapWeights weights;
  std::vector<HostTensor> first, again;
  for (int64_t rows = 1; rows <= 60; ++rows) {
    Graph g = rows_graph(rows);
    std::map<std::string, HostTensor> inputs;
    test::MapWeights w;
    test::bindings_fill(g, 11, inputs, w);
    for (int k = 0; k < runs; ++k) {
      Result<std::vector<HostTensor>> r = ex.run(g, test::host_inputs(inputs), w);
      ASSERT_TRUE(r.ok()) << r.status().str();
      if (rows == 1 && k == 0) first = std::move(r).value();
    }
    if (pinned_most) *pinned_most = std::max(*pinned_most, ex.allocator().pinned_held());
    EXPECT_LE(ex.plans_held(), 8u) << "rows " << rows;
    EXPECT_LE(ex.captures_held(), 4u) << "rows " << rows;
    if (rows == 1) {
      first_inputs = std::move(inputs);
      weights = std::move(w);
    }
  }
  Result<std::vector<HostTensor>> r = ex.run(rows_graph(1), test::host_inputs(first_inputs), weights);
  ASSERT_TRUE(r.ok()) << r.status().str();
  ASSERT_EQ(r->size(), first.size());
  EXPECT_EQ(std::memcmp((*r)[0].data(), first[0].data(), first[0].bytes()), 0);
  (void)backend;
}

TEST(ExecutorCache, SixtyShapesKeepAtMostTheLimits) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  Executor ex(*cpu, alloc, executor_policies_default(*cpu));
  ex.set_cache_limits({.plans = 8, .captures = 4});
  sixty_shapes(ex, *cpu, 1, nullptr);
  EXPECT_EQ(ex.plans_computed(), 61u);  // 60 shapes and the first one again
}

TEST(ExecutorCache, SixtyCapturedShapesOnTheGpuKeepTheirStagingBounded) {
  Result<std::unique_ptr<Backend>> b = cuda_backend_create(0);
  HR_SKIP_UNLESS_GPU(b.ok(), b.status().str());
  Allocator alloc(**b);
  Executor ex(**b, alloc, executor_policies_default(**b));
  ex.set_cache_limits({.plans = 8, .captures = 4});
  uint64_t pinned_most = 0;
  sixty_shapes(ex, **b, 3, &pinned_most);  // the second run of a plan captures, the third replays
  // Four captures of at most 60 rows of 16 floats each (one INPUT value per graph).
  EXPECT_LE(pinned_most, 4u * 60 * 16 * 4 + 4u * 4096) << "page-locked staging grew with shapes";
}

}  // namespace
}  // namespace hr
