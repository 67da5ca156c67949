// Shared by the graph tests: stand-in kernels for planning, a map WeightSource, a random
// graph generator, an independent plan checker and an op-by-op reference runner.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/planner.h"

namespace hr::test {

// Planning and graph passes need the kernels only (BackendKernels): op workspaces from
// `workspace`, every op supported, stacked weights preferred as on a GPU; op_run refuses.
class PlanKernels final : public BackendKernels {
 public:
  std::function<size_t(OpKind, std::span<const TensorDesc>, const TensorDesc&)> workspace;

  bool op_supported(OpKind, DType) const override { return true; }
  bool prefers_stacked_weights() const override { return true; }
  size_t op_workspace(OpKind kind, const OpParams&, std::span<const TensorDesc> in,
                      const TensorDesc& out) const override {
    return workspace ? workspace(kind, in, out) : 0;
  }
  Status op_run(const OpCall&, Stream*) override {
    return Status(ErrorCode::UNSUPPORTED, "plan-only kernels");
  }
};

// Weights from a name -> host tensor map (backends whose memory_is_host() only).
class MapWeights final : public WeightSource {
 public:
  std::map<std::string, HostTensor> tensors;
  std::vector<std::string> asked;  // names in the order weight_get saw them

  std::map<std::string, HostTensor> relaid;  // name + layout -> rearranged copy

  Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                               WeightLayout layout) override {
    asked.push_back(name);
    auto it = tensors.find(name);
    if (it == tensors.end())
      return make_error(ErrorCode::NOT_FOUND, "weight '{}' ({}) not found", name, desc.str());
    if (layout == WeightLayout::STORED) return it->second.ref();
    const std::string key = weight_key(name, layout);
    auto r = relaid.find(key);
    if (r == relaid.end()) {
      HR_ASSIGN_OR_RETURN(HostTensor t, weight_relayout(it->second, layout));
      r = relaid.emplace(key, std::move(t)).first;
    }
    return r->second.ref();
  }
  // Streamed weights come from the same host tensors (Note [streamed execution]).
  std::vector<std::string> streamed;  // names in the order weight_host saw them
  Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                WeightLayout layout) override {
    streamed.push_back(name);
    Result<TensorRef> r = weight_get(name, desc, layout);
    asked.pop_back();
    return r;
  }
  // contiguous: weight_host_all copies the streamed weights into one block in the order asked,
  // padded to `align`, as WeightSet lays out its page-locked copies (Note [coalesced copies]).
  bool contiguous = false;
  std::vector<HostTensor> blocks;  // kept for the test's lifetime
  Result<std::vector<TensorRef>> weight_host_all(const std::vector<WeightRequest>& requests,
                                                 size_t align) override {
    if (!contiguous) return WeightSource::weight_host_all(requests, align);
    std::vector<TensorRef> refs;
    size_t total = 0;
    for (const WeightRequest& q : requests) {
      HR_ASSIGN_OR_RETURN(TensorRef r, weight_host(q.name, q.desc, q.layout));
      refs.push_back(r);
      total += (std::max<size_t>(r.desc.bytes(), 1) + align - 1) / align * align;
    }
    HostTensor block(DType::F32, Shape{int64_t((total + 3) / 4)});
    char* at = static_cast<char*>(block.data());
    for (TensorRef& r : refs) {
      std::memcpy(at, r.data, r.desc.bytes());
      r.data = at;
      at += (std::max<size_t>(r.desc.bytes(), 1) + align - 1) / align * align;
    }
    blocks.push_back(std::move(block));
    return refs;
  }
};

inline HostTensor random_tensor(const TensorDesc& d, std::mt19937& rng) {
  HostTensor t(d);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return t;
}

// A random DAG of element-wise, binary, linear, concat, slice, permute and reshape (view)
// nodes over f32 [R, C] tensors. Recent values are preferred as operands, with some long
// skips, and a few values (possibly inputs or views) are marked as outputs.
inline Graph random_graph(uint32_t seed, int node_count) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  const int64_t rows[] = {1, 2, 3, 4, 8, 16, 32};
  const int64_t cols[] = {4, 8, 16, 24, 64, 100, 128, 256, 512};
  Graph g;
  std::vector<ValueId> pool;
  const int inputs = 1 + pick(3);
  for (int i = 0; i < inputs; ++i)
    pool.push_back(g.input(fmt::format("in{}", i),
                           TensorDesc{DType::F32, Shape{rows[pick(7)], cols[pick(9)]}}));
  auto operand = [&]() {
    if (pick(5) == 0) return pool[size_t(pick(int(pool.size())))];
    int back = std::min(int(pool.size()) - 1, pick(4));
    return pool[pool.size() - 1 - size_t(back)];
  };
  for (int step = 0; step < node_count; ++step) {
    ValueId x = operand();
    const Shape s = g.shape(x);
    ValueId y = kNoValue;
    const std::string name = fmt::format("n{}", step);
    switch (pick(9)) {
      case 0: {
        const OpKind k[] = {OpKind::GELU, OpKind::SILU, OpKind::QUICK_GELU, OpKind::GELU_TANH};
        y = g.unary(k[pick(4)], x, name);
        break;
      }
      case 1: y = g.scale(x, 0.5f + float(pick(4)), float(pick(3)) - 1.0f, name); break;
      case 2:
      case 3: {
        ValueId other = kNoValue;
        size_t start = size_t(pick(int(pool.size())));
        for (size_t k = 0; k < pool.size() && other == kNoValue; ++k) {
          ValueId c = pool[(start + k) % pool.size()];
          if (c != x && g.shape(c) == s) other = c;
        }
        if (other == kNoValue)
          other = g.weight(fmt::format("bias{}", step), TensorDesc{DType::F32, Shape{s[1]}});
        const OpKind k[] = {OpKind::ADD, OpKind::MUL, OpKind::SUB};
        y = pick(2) ? g.binary(k[pick(3)], x, other, name) : g.binary(k[pick(3)], other, x, name);
        break;
      }
      case 4: {
        int64_t n = cols[pick(9)];
        ValueId w = g.weight(fmt::format("w{}", step), TensorDesc{DType::F32, Shape{n, s[1]}});
        ValueId b = pick(2) ? g.weight(fmt::format("b{}", step), TensorDesc{DType::F32, Shape{n}})
                            : kNoValue;
        y = g.linear(x, w, b, name);
        break;
      }
      case 5: {
        std::vector<ValueId> xs{x};
        int64_t width = s[1];
        for (ValueId c : pool)
          if (xs.size() < 3 && c != x && g.shape(c)[0] == s[0] && width + g.shape(c)[1] <= 1024 &&
              pick(3) == 0) {
            xs.push_back(c);
            width += g.shape(c)[1];
          }
        if (xs.size() == 1) xs.push_back(x);
        y = g.concat(xs, pick(2) ? 1 : -1, name);
        break;
      }
      case 6: {
        int64_t a = pick(int(s[1]) / 2 + 1);
        y = g.slice(x, 1, a, s[1] - pick(int(s[1] - a)), 1, name);  // width >= 1
        break;
      }
      case 7: y = g.permute(x, {1, 0}, name); break;
      case 8:
        y = s[0] % 2 == 0 ? g.reshape(x, Shape{s[0] / 2, s[1] * 2}, name)
                          : g.reshape(x, Shape{1, s[0] * s[1]}, name);
        break;
    }
    pool.push_back(y);
  }
  g.output(pool.back(), "out");
  const int extra = pick(3);
  for (int i = 0; i < extra; ++i) g.output(pool[size_t(pick(int(pool.size())))], fmt::format("extra{}", i));
  return g;
}

// Checks a plan against the graph independently of the planner's own bookkeeping:
// lifetimes cover every read, outputs live to the end, slots are aligned and inside the
// arena, no two live slots of different storage overlap (every pair), shared slots are
// legitimate views or in-place chains, and lower_bound matches a recount.
inline ::testing::AssertionResult plan_check(const Graph& g, const ArenaPlan& p) {
  const auto& vals = g.values();
  const auto& nodes = g.nodes();
  const int32_t n = int32_t(nodes.size());
  const int32_t end = std::max(n - 1, 0);
  if (p.values.size() != vals.size() || p.nodes.size() != nodes.size())
    return ::testing::AssertionFailure() << "plan sizes do not match the graph";
  auto slot_of = [&](ValueId v) -> const ValueSlot& { return p.values[size_t(g.storage_of(v))]; };
  for (int32_t i = 0; i < n; ++i) {
    for (ValueId x : nodes[size_t(i)].inputs) {
      if (g.value(g.storage_of(x)).kind == ValueKind::WEIGHT) continue;
      const ValueSlot& s = slot_of(x);
      if (s.first > i || s.last < i)
        return ::testing::AssertionFailure()
               << "value " << x << " read by node " << i << " but live " << s.first << ".." << s.last;
    }
  }
  for (ValueId o : g.outputs()) {
    if (g.value(g.storage_of(o)).kind == ValueKind::WEIGHT) continue;
    if (slot_of(o).last != end) return ::testing::AssertionFailure() << "output " << o << " dies early";
  }
  struct Item {
    uint64_t off, size;
    int32_t first, last;
    int64_t storage;
  };
  std::vector<Item> items;
  for (size_t v = 0; v < vals.size(); ++v) {
    const ValueSlot& s = p.values[v];
    bool arena = vals[v].kind != ValueKind::WEIGHT &&
                 g.value(g.storage_of(ValueId(v))).kind != ValueKind::WEIGHT;
    if (arena != (s.offset >= 0)) return ::testing::AssertionFailure() << "value " << v << " placement";
    if (!arena) continue;
    if (uint64_t(s.offset) % kDeviceAlignment != 0)
      return ::testing::AssertionFailure() << "value " << v << " misaligned at " << s.offset;
    if (uint64_t(s.offset) + s.bytes > p.arena_bytes)
      return ::testing::AssertionFailure() << "value " << v << " outside the arena";
    if (vals[v].view_of != kNoValue) {
      if (s.offset != slot_of(ValueId(v)).offset)
        return ::testing::AssertionFailure() << "view " << v << " not at its storage";
      continue;
    }
    if (s.bytes > 0) items.push_back({uint64_t(s.offset), s.bytes, s.first, s.last, s.storage});
  }
  for (int32_t i = 0; i < n; ++i) {
    const NodeSlot& ns = p.nodes[size_t(i)];
    if (ns.workspace_bytes == 0) continue;
    if (ns.workspace_offset % kDeviceAlignment != 0 ||
        ns.workspace_offset + ns.workspace_bytes > p.arena_bytes)
      return ::testing::AssertionFailure() << "workspace of node " << i << " misplaced";
    items.push_back({ns.workspace_offset, ns.workspace_bytes, i, i, -2 - int64_t(i)});
  }
  for (size_t a = 0; a < items.size(); ++a)
    for (size_t b = a + 1; b < items.size(); ++b) {
      const Item& x = items[a];
      const Item& y = items[b];
      bool time = !(x.last < y.first || y.last < x.first);
      bool space = x.off < y.off + y.size && y.off < x.off + x.size;
      if (x.storage == y.storage) {
        // One in-place chain: lifetimes touch only at the in-place node.
        const Item& early = x.first <= y.first ? x : y;
        const Item& late = x.first <= y.first ? y : x;
        if (early.last > late.first || !p.nodes[size_t(late.first)].in_place || x.off != y.off)
          return ::testing::AssertionFailure() << "bad shared slot at node " << late.first;
        continue;
      }
      if (time && space)
        return ::testing::AssertionFailure()
               << "overlap: [" << x.off << "+" << x.size << ") live " << x.first << ".." << x.last
               << " and [" << y.off << "+" << y.size << ") live " << y.first << ".." << y.last;
    }
  // Lower bound recount: slots (storage groups) live per node, sizes rounded to the alignment.
  std::map<int64_t, Item> groups;
  for (const Item& it : items) {
    auto [g_it, fresh] = groups.emplace(it.storage, it);
    if (!fresh) {
      g_it->second.first = std::min(g_it->second.first, it.first);
      g_it->second.last = std::max(g_it->second.last, it.last);
    }
  }
  uint64_t bound = 0;
  for (int32_t i = 0; i < n; ++i) {
    uint64_t live = 0;
    for (const auto& [k, it] : groups)
      if (it.first <= i && i <= it.last)
        live += (it.size + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    bound = std::max(bound, live);
  }
  if (n > 0 && bound != p.lower_bound)
    return ::testing::AssertionFailure() << "lower bound " << p.lower_bound << " recounted " << bound;
  if (p.arena_bytes < p.lower_bound)
    return ::testing::AssertionFailure() << "arena below the lower bound";
  return ::testing::AssertionSuccess();
}

// MapWeights that also serves WeightLayout::STACK weights: the parts named by the '+'-joined
// name, concatenated with weight_stack (WeightSet does the same in the models layer, which this
// suite does not link). Records the stacked names it served.
class StackingWeights final : public WeightSource {
 public:
  explicit StackingWeights(test::MapWeights& base) : base_(base) {}
  Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                               WeightLayout layout) override {
    if (layout != WeightLayout::STACK) return base_.weight_get(name, desc, layout);
    served.push_back(name);
    auto it = stacks_.find(name);
    if (it == stacks_.end()) {
      std::vector<const HostTensor*> parts;
      for (const std::string& p : weight_stack_parts(name)) {
        auto t = base_.tensors.find(p);
        if (t == base_.tensors.end())
          return make_error(ErrorCode::NOT_FOUND, "stack part '{}' not found", p);
        parts.push_back(&t->second);
      }
      HR_ASSIGN_OR_RETURN(HostTensor t, weight_stack(parts));
      it = stacks_.emplace(name, std::move(t)).first;
    }
    if (it->second.desc() != desc)
      return make_error(ErrorCode::INVALID_ARGUMENT, "stack '{}' is {}, asked {}", name,
                        it->second.desc().str(), desc.str());
    return it->second.ref();
  }
  std::vector<std::string> served;

 private:
  test::MapWeights& base_;
  std::map<std::string, HostTensor> stacks_;
};

// Random f32 tensors for every input and weight of g.
inline void bindings_fill(const Graph& g, uint32_t seed, std::map<std::string, HostTensor>& inputs,
                          MapWeights& weights) {
  std::mt19937 rng(seed);
  for (const Value& v : g.values()) {
    if (v.kind == ValueKind::INPUT) inputs[v.name] = random_tensor(v.desc, rng);
    if (v.kind == ValueKind::WEIGHT) weights.tensors[v.name] = random_tensor(v.desc, rng);
  }
}

// Runs g node by node with backend.op_run, every value in its own host buffer.
inline std::vector<HostTensor> reference_run(const Graph& g, Backend& backend,
                                             const std::map<std::string, HostTensor>& inputs,
                                             MapWeights& weights) {
  std::vector<HostTensor> vals(g.values().size());
  std::vector<TensorRef> refs(g.values().size());
  for (size_t v = 0; v < g.values().size(); ++v) {
    const Value& x = g.values()[v];
    if (x.kind == ValueKind::INPUT) refs[v] = inputs.at(x.name).ref();
    if (x.kind == ValueKind::WEIGHT) refs[v] = weights.tensors.at(x.name).ref();
  }
  for (const Node& n : g.nodes()) {
    std::vector<TensorRef> in;
    std::vector<TensorDesc> descs;
    for (ValueId x : n.inputs) {
      in.push_back(refs[size_t(x)]);
      descs.push_back(g.desc(x));
    }
    vals[size_t(n.output)] = HostTensor(g.desc(n.output));
    refs[size_t(n.output)] = vals[size_t(n.output)].ref();
    size_t ws = backend.op_workspace(n.kind, n.params, descs, g.desc(n.output));
    std::vector<uint8_t> scratch(ws);
    OpCall c;
    c.kind = n.kind;
    c.params = &n.params;
    c.inputs = in;
    c.output = refs[size_t(n.output)];
    c.workspace = ws ? scratch.data() : nullptr;
    c.workspace_bytes = ws;
    Status st = backend.op_run(c, nullptr);
    EXPECT_TRUE(st.ok()) << n.name << ": " << st.str();
  }
  std::vector<HostTensor> out;
  for (ValueId o : g.outputs()) {
    HostTensor h(g.desc(o));
    if (h.bytes()) std::memcpy(h.data(), refs[size_t(o)].data, h.bytes());
    out.push_back(std::move(h));
  }
  return out;
}

inline HostInputs host_inputs(const std::map<std::string, HostTensor>& m) {
  HostInputs in;
  for (const auto& [k, v] : m) in.emplace_back(k, &v);
  return in;
}

}  // namespace hr::test
