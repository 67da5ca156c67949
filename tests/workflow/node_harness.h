// Runs one registered ComfyUI node directly (its NodeDef::run, as PromptExecutor does after
// validation), checking combo literals against the node's declared options first, and loads
// the reference tensors made by tests/data/nodes/make_node_refs.py.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <any>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "graph/executor.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "models/safetensors.h"
#include "nodes/nodes.h"
#include "nodes/values.h"
#include "test_paths.h"
#include "workflow/execute.h"

namespace hr::test {

class NodeHarness {
 public:
  explicit NodeHarness(const ExecOptions& opts) : opts_(opts) {
    NodeEnv env;
    env.input_dir = opts.input_dir;
    nodes_register(registry_, env);
  }

  // A combo value the node does not offer is a validation error in ComfyUI; report it as one.
  Result<std::vector<std::any>> run(const std::string& class_type, const NodeInputs& in) {
    const NodeDef* def = registry_.find(class_type);
    if (!def) return make_error(ErrorCode::NOT_FOUND, "no node {}", class_type);
    for (const auto& [name, v] : in.literals) {
      const InputSpec* spec = def->input(name);
      if (!spec || spec->type != IoType::COMBO) continue;
      auto opts = spec->combo_options();
      if (std::find(opts.begin(), opts.end(), v.get<std::string>()) == opts.end())
        return make_error(ErrorCode::INVALID_ARGUMENT, "{}.{}: '{}' is not an option", class_type,
                          name, v.get<std::string>());
    }
    ExecContext ctx{opts_, prompt_, "1"};
    auto out = def->run(ctx, in);
    ui_ = ctx.ui;
    return out;
  }

  const Json& last_ui() const { return ui_; }
  Prompt& prompt() { return prompt_; }

 private:
  const ExecOptions& opts_;
  NodeRegistry registry_;
  Prompt prompt_;
  Json ui_;
};

// The CPU backend, allocator and executor that model-running nodes use, wired into opts. One
// thread: the tiny models' ops are small, and on a shared 2-core machine spinning worker
// threads made a 4-step sampler run 30 times slower.
struct CpuRuntime {
  std::unique_ptr<Backend> backend = cpu_backend_create(1);
  std::unique_ptr<Allocator> allocator =
      std::make_unique<Allocator>(*backend, Allocator::kUnlimited, eviction_policy());
  std::unique_ptr<Executor> executor =
      std::make_unique<Executor>(*backend, *allocator, executor_policies_default(*backend));
  void wire(ExecOptions& o) const {
    o.backend = backend.get();
    o.allocator = allocator.get();
    o.executor = executor.get();
  }
};

// tests/data/nodes/node-refs.safetensors (see the README beside it).
inline const SafetensorsFile& node_refs() {
  static std::unique_ptr<SafetensorsFile> f = [] {
    auto r = SafetensorsFile::open(data_path("nodes/node-refs.safetensors"));
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return *f;
}

inline HostTensor node_ref(const std::string& name) {
  auto t = node_refs().load(name, DType::F32);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
  return t.ok() ? std::move(t).value() : HostTensor();
}

inline std::any latent_value(const HostTensor& x) {
  Latent l;
  l.samples = std::make_shared<const HostTensor>(x.clone());
  return std::make_shared<const Latent>(std::move(l));
}

inline std::any image_value(const HostTensor& x) {
  return std::make_shared<const ImageValue>(
      ImageValue{std::make_shared<const HostTensor>(x.clone())});
}

// The node's output `slot` as T (a shared_ptr value type); fails the test when absent.
template <typename T>
std::shared_ptr<const T> output_as(const Result<std::vector<std::any>>& r, size_t slot = 0) {
  EXPECT_TRUE(r.ok()) << r.status().str();
  if (!r.ok() || r->size() <= slot) return nullptr;
  auto p = std::any_cast<std::shared_ptr<const T>>(&(*r)[slot]);
  EXPECT_TRUE(p != nullptr) << "output " << slot << " has another type";
  return p ? *p : nullptr;
}

inline float max_abs_diff(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.f32()[i] - b.f32()[i]));
  return m;
}

}  // namespace hr::test
