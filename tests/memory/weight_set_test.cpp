// Tests of WeightSet, the weight store: per-tensor LRU reclaim between models, the weights cap,
// page-locked copies for streaming, stacked weights, and runs through an executor. Loading from
// a checkpoint is tested in models/weight_load_test.cpp.
#include "memory/weight_set.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "async_sim_backend.h"
#include "graph/passes.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "opaque_cpu_backend.h"

namespace hr {
namespace {

// Note [reclaim]: a model no run is using gives its device copies back, least recently used
// first, when another model's weights (or an arena) need the room; a model in use keeps them.
class WeightReclaimTest : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 4096;  // one weight: 1024 floats
  void fill(WeightSet& ws, int n) {
    for (int i = 0; i < n; ++i) ws.put(fmt::format("w{}", i), HostTensor(DType::F32, Shape{1024}));
  }
  Status touch(WeightSet& ws, int n) {
    for (int i = 0; i < n; ++i)
      HR_TRY(ws.weight_get(fmt::format("w{}", i), TensorDesc{DType::F32, Shape{1024}}).status());
    return Status();
  }
  OpaqueCpuBackend dev_;
};

TEST_F(WeightReclaimTest, LeastRecentlyUsedModelMakesRoom) {
  Allocator alloc(dev_, 5 * kBytes, eviction_policy());
  WeightSet a, b;
  fill(a, 3);
  fill(b, 3);
  a.bind(&dev_, &alloc);
  b.bind(&dev_, &alloc);
  ASSERT_TRUE(touch(a, 3).ok());
  EXPECT_EQ(a.device_bytes(), 3 * kBytes);
  // b needs 3 slots, 2 are free: a (not in use) gives back its oldest copy.
  Status sb = touch(b, 3);
  ASSERT_TRUE(sb.ok()) << sb.str();
  EXPECT_EQ(b.device_bytes(), 3 * kBytes);
  EXPECT_EQ(a.device_bytes(), 2 * kBytes);
  EXPECT_LE(alloc.total().peak, 5 * kBytes);
  EXPECT_EQ(alloc.reclaimed(), kBytes);
  // a's survivors are its newest two; asking for its oldest again reloads it (b gives room).
  ASSERT_TRUE(a.weight_get("w0", TensorDesc{DType::F32, Shape{1024}}).ok());
  EXPECT_EQ(dev_.uploads, 7);
}

TEST_F(WeightReclaimTest, ModelInUseIsNeverAsked) {
  Allocator alloc(dev_, 4 * kBytes, eviction_policy());
  WeightSet a, b;
  fill(a, 3);
  fill(b, 3);
  a.bind(&dev_, &alloc);
  b.bind(&dev_, &alloc);
  a.run_begin();
  ASSERT_TRUE(touch(a, 3).ok());
  Status busy = touch(b, 3);  // only one slot left and a is running
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_EQ(a.device_bytes(), 3 * kBytes);
  a.run_end();
  Status after = touch(b, 3);
  ASSERT_TRUE(after.ok()) << after.str();
  EXPECT_EQ(a.device_bytes(), kBytes);
}

TEST_F(WeightReclaimTest, WeightsCapTrimsAfterEachRun) {
  Allocator alloc(dev_, Allocator::kUnlimited, eviction_policy());
  WeightSet a;
  fill(a, 4);
  a.bind(&dev_, &alloc);
  alloc.set_weights_cap(kBytes);  // --lowvram with a tiny budget
  a.run_begin();
  ASSERT_TRUE(touch(a, 4).ok());
  EXPECT_EQ(a.device_bytes(), 4 * kBytes);  // within a run every weight stays
  a.run_end();
  EXPECT_EQ(a.device_bytes(), kBytes);
  alloc.set_weights_cap(0);  // --novram: nothing stays between uses
  a.run_begin();
  a.run_end();
  EXPECT_EQ(a.device_bytes(), 0u);
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 0u);
}

// Note [weight block cache]: switching between two models of one architecture under a budget
// that holds one moves the second into the first one's blocks, with no device allocation or free,
// and each reads its own values.
TEST_F(WeightReclaimTest, ModelSwitchReusesTheOtherModelsBlocks) {
  Allocator alloc(dev_, 3 * kBytes, eviction_policy());
  WeightSet a, b;
  for (int i = 0; i < 3; ++i) {
    HostTensor ta(DType::F32, Shape{1024}), tb(DType::F32, Shape{1024});
    ta.f32()[5] = 1.0f + float(i);
    tb.f32()[5] = -1.0f - float(i);
    a.put(fmt::format("w{}", i), std::move(ta));
    b.put(fmt::format("w{}", i), std::move(tb));
  }
  a.bind(&dev_, &alloc);
  b.bind(&dev_, &alloc);
  ASSERT_TRUE(touch(a, 3).ok());
  EXPECT_EQ(dev_.allocs, 3);
  Status sb = touch(b, 3);
  ASSERT_TRUE(sb.ok()) << sb.str();
  EXPECT_EQ(b.device_bytes(), 3 * kBytes);
  EXPECT_EQ(a.device_bytes(), 0u);
  EXPECT_EQ(dev_.allocs, 3);
  EXPECT_EQ(dev_.frees, 0);
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).reused, 3u);
  EXPECT_LE(alloc.total().peak, 3 * kBytes);
  for (int i = 0; i < 3; ++i) {
    Result<TensorRef> r = b.weight_get(fmt::format("w{}", i), TensorDesc{DType::F32, Shape{1024}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(static_cast<const float*>(r->data)[5], -1.0f - float(i));
  }
  Result<TensorRef> back = a.weight_get("w1", TensorDesc{DType::F32, Shape{1024}});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(static_cast<const float*>(back->data)[5], 2.0f);
  EXPECT_EQ(dev_.allocs, 3);
}

// Note [weight block cache]: when a lower budget makes the executor stream weights that were
// resident, none of their blocks stays idle in the cache and what is held comes back under the
// budget (the executor gives evicted blocks back, and so would the ring's allocation).
TEST_F(WeightReclaimTest, WeightsThatStartStreamingLeaveNoCachedBlocks) {
  Graph g;
  ValueId h = g.input("x", TensorDesc{DType::F32, Shape{4, 32}});
  WeightSet ws;
  for (int i = 0; i < 8; ++i) {
    HostTensor t(DType::F32, Shape{32, 32});
    for (int64_t j = 0; j < t.numel(); ++j) t.f32()[j] = 0.01f * float((i * 7 + j) % 13) - 0.05f;
    ws.put(fmt::format("l{}.weight", i), std::move(t));
    h = g.linear(h, g.weight(fmt::format("l{}.weight", i), TensorDesc{DType::F32, Shape{32, 32}}));
  }
  g.output(h, "y");
  HostTensor x(DType::F32, Shape{4, 32});
  for (int64_t j = 0; j < x.numel(); ++j) x.f32()[j] = 0.1f * float(j % 7);
  const HostInputs in = {{"x", &x}};
  Allocator alloc(dev_, Allocator::kUnlimited, eviction_policy());
  Executor ex(dev_, alloc, executor_policies_default(dev_));
  ResidencyOptions o = ex.residency_options();
  o.depth = 2;
  o.small_bytes = 0;
  ex.set_residency_options(o);
  ws.bind(&dev_, &alloc);
  auto resident = ex.run(g, in, ws);
  ASSERT_TRUE(resident.ok()) << resident.status().str();
  ASSERT_FALSE(ex.last_residency().streams());
  const uint64_t budget = ex.arena_held() + 4 * 32 * 32 * 4;  // room for half the weights
  alloc.set_budget(budget);  // below what is held: the next run must give back, not add
  auto streamed = ex.run(g, in, ws);
  ASSERT_TRUE(streamed.ok()) << streamed.status().str();
  EXPECT_TRUE(ex.last_residency().streams()) << ex.last_residency_text();
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).cached, 0u);
  EXPECT_LE(alloc.total().current, budget);
  EXPECT_EQ(std::memcmp((*streamed)[0].data(), (*resident)[0].data(), (*resident)[0].bytes()), 0);
  ws.bind(nullptr, nullptr);
}

// An arena may count on the room idle models would give back, but not on the weights the run
// itself will use.
TEST_F(WeightReclaimTest, ArenaRoomCountsIdleWeights) {
  Allocator alloc(dev_, 5 * kBytes, eviction_policy());
  Executor ex(dev_, alloc, executor_policies_default(dev_));
  WeightSet a;
  fill(a, 3);
  a.bind(&dev_, &alloc);
  ASSERT_TRUE(touch(a, 3).ok());
  EXPECT_EQ(ex.arena_room(), 5 * kBytes);
  EXPECT_EQ(ex.arena_room(&a), 2 * kBytes);
  a.run_begin();  // in use: nothing to give back
  EXPECT_EQ(ex.arena_room(), 2 * kBytes);
  a.run_end();
}

}  // namespace
}  // namespace hr

namespace hr {
namespace {

// Note [pinned budget]: a streamed weight's host copy is page-locked while the allocator's
// pinned budget allows; beyond it the pageable tensor is served. Unbinding gives the bytes back.
TEST(WeightSetPinned, StreamedCopiesArePinnedWithinThePinnedBudget) {
  WeightSet ws;
  HostTensor w(DType::F32, Shape{2, 3}), b(DType::F32, Shape{3});
  for (int i = 0; i < 6; ++i) w.f32()[i] = float(i);
  for (int i = 0; i < 3; ++i) b.f32()[i] = float(-i);
  ws.put("w", std::move(w));
  ws.put("b", std::move(b));
  AsyncSimBackend sim(SimOrder::ROUND_ROBIN);
  sim.set_discrete(true);
  Allocator alloc(sim, Allocator::kUnlimited, eviction_policy());
  alloc.set_pinned_budget(24 + 8);  // the 24-byte weight fits, then the 12-byte bias does not
  ws.bind(&sim, &alloc);
  auto pw = ws.weight_host("w", TensorDesc{DType::F32, Shape{2, 3}}, WeightLayout::STORED);
  ASSERT_TRUE(pw.ok()) << pw.status().str();
  EXPECT_NE(pw->data, ws.find("w")->data()) << "a page-locked copy";
  EXPECT_EQ(std::memcmp(pw->data, ws.find("w")->data(), 24), 0);
  EXPECT_EQ(alloc.pinned_held(), 24u);
  auto pb = ws.weight_host("b", TensorDesc{DType::F32, Shape{3}}, WeightLayout::STORED);
  ASSERT_TRUE(pb.ok());
  EXPECT_EQ(pb->data, ws.find("b")->data()) << "over the pinned budget: pageable";
  EXPECT_EQ(alloc.pinned_held(), 24u);
  EXPECT_EQ(ws.pinned_bytes(), 24u);
  ws.bind(nullptr, nullptr);
  EXPECT_EQ(alloc.pinned_held(), 0u);
  EXPECT_EQ(alloc.pinned_peak(), 24u);
}

// Note [pinned copies]: the weights asked for together get one page-locked block, in the order
// asked and padded to the alignment asked, and the block goes with its last weight.
TEST(WeightSetPinned, StreamedCopiesShareOneBlockInOrder) {
  WeightSet ws;
  for (const char* n : {"a", "b", "c"}) {
    HostTensor t(DType::F32, Shape{n[0] == 'b' ? 100 : 10});
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(i) + float(n[0]);
    ws.put(n, std::move(t));
  }
  AsyncSimBackend sim(SimOrder::ROUND_ROBIN);
  sim.set_discrete(true);
  Allocator alloc(sim, Allocator::kUnlimited, eviction_policy());
  ws.bind(&sim, &alloc);
  std::vector<WeightRequest> q = {{"c", TensorDesc{DType::F32, Shape{10}}, WeightLayout::STORED},
                                  {"b", TensorDesc{DType::F32, Shape{100}}, WeightLayout::STORED},
                                  {"a", TensorDesc{DType::F32, Shape{10}}, WeightLayout::STORED}};
  auto refs = ws.weight_host_all(q, 256);
  ASSERT_TRUE(refs.ok()) << refs.status().str();
  const char* c = static_cast<const char*>((*refs)[0].data);
  EXPECT_EQ((*refs)[1].data, c + 256) << "b follows c, padded to 256 bytes";
  EXPECT_EQ((*refs)[2].data, c + 256 + 512) << "a follows b (400 bytes, padded to 512)";
  EXPECT_EQ(alloc.pinned_held(), 256u + 512u + 256u);
  EXPECT_EQ(std::memcmp((*refs)[1].data, ws.find("b")->data(), 400), 0);
  auto b = ws.weight_host("b", TensorDesc{DType::F32, Shape{100}}, WeightLayout::STORED);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data, (*refs)[1].data) << "made once";
  ws.put("a", HostTensor(DType::F32, Shape{10}));
  ws.put("b", HostTensor(DType::F32, Shape{100}));
  EXPECT_EQ(alloc.pinned_held(), 1024u) << "c still uses the block";
  ws.put("c", HostTensor(DType::F32, Shape{10}));
  EXPECT_EQ(alloc.pinned_held(), 0u);
  ws.bind(nullptr, nullptr);
}

// WeightLayout::STACK (Note [weight layouts] in graph.h): a weight named by several checkpoint
// tensors joined by '+' is served as their concatenation along dim 0.
class WeightStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    put("l1.to_k", 2, 0.0f);
    put("l1.to_v", 1, 100.0f);
    put("l2.to_k", 3, 200.0f);
    put("l1", 1, -50.0f);  // a name that is a prefix of a part but no part
  }
  // A [rows, 3] f32 tensor holding from, from + 1, ...
  void put(const std::string& name, int64_t rows, float from) {
    HostTensor t(DType::F32, Shape{rows, 3});
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = from + float(i);
    ws.put(name, std::move(t));
  }
  // The parts' values, concatenated, from the host tensors the set holds now.
  std::vector<float> expected() const {
    std::vector<float> v;
    for (const std::string& p : weight_stack_parts(name))
      for (int64_t i = 0; i < ws.find(p)->numel(); ++i) v.push_back(ws.find(p)->f32()[i]);
    return v;
  }
  static std::vector<float> values(const TensorRef& r) {
    const float* p = static_cast<const float*>(r.data);
    return std::vector<float>(p, p + r.desc.numel());
  }

  WeightSet ws;
  const std::string name = weight_stack_name({"l1.to_k", "l1.to_v", "l2.to_k"});
  const TensorDesc desc{DType::F32, Shape{6, 3}};
};

TEST_F(WeightStackTest, ServedAsTheConcatenationOnTheCpu) {
  ASSERT_EQ(name, "l1.to_k+l1.to_v+l2.to_k");
  const std::vector<float> first = expected();
  ASSERT_EQ(first.size(), 18u);
  EXPECT_EQ(first[5], 5.0f);
  EXPECT_EQ(first[6], 100.0f);
  EXPECT_EQ(first[9], 200.0f);

  // Unbound: a host tensor holding the stack (a copy: the parts are separate tensors).
  auto r0 = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(r0.ok()) << r0.status().str();
  EXPECT_EQ(r0->desc, desc);
  EXPECT_EQ(values(*r0), first);
  for (const char* p : {"l1.to_k", "l1.to_v", "l2.to_k"}) EXPECT_NE(r0->data, ws.find(p)->data());
  auto again = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, r0->data) << "stacked once";

  // Bound to the CPU backend: the same values, its bytes counted (Note [adopted bytes]).
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);
  auto r = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->desc, desc);
  EXPECT_EQ(values(*r), first);
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 256u) << "6x3 f32 rounded to the alignment";
  auto h = ws.weight_host(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(h.ok()) << h.status().str();
  EXPECT_EQ(values(*h), first);

  // put() of something that is no part (a prefix of one) leaves the stack alone ...
  put("l1", 1, 7.0f);
  auto same = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(values(*same), first);
  // ... put() of a part makes it stale: served again, it holds the new part.
  put("l1.to_v", 1, -1000.0f);
  auto after = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(after.ok()) << after.status().str();
  const std::vector<float> second = expected();
  EXPECT_EQ(second[6], -1000.0f);
  EXPECT_EQ(values(*after), second);
  auto host_after = ws.weight_host(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(host_after.ok());
  EXPECT_EQ(values(*host_after), second);
  // A part of another height changes the stack's shape: the old descriptor no longer fits.
  put("l2.to_k", 4, 300.0f);
  auto old_desc = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_FALSE(old_desc.ok());
  EXPECT_EQ(old_desc.status().code(), ErrorCode::INVALID_ARGUMENT);
  auto taller = ws.weight_get(name, TensorDesc{DType::F32, Shape{7, 3}}, WeightLayout::STACK);
  ASSERT_TRUE(taller.ok()) << taller.status().str();
  EXPECT_EQ(values(*taller), expected());
  EXPECT_EQ(values(*taller).back(), 311.0f);
  ws.bind(nullptr, nullptr);
}

TEST_F(WeightStackTest, Errors) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);
  // A missing part: NOT_FOUND naming it.
  auto missing = ws.weight_get(weight_stack_name({"l1.to_k", "l1.nope", "l2.to_k"}),
                               TensorDesc{DType::F32, Shape{5, 3}}, WeightLayout::STACK);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("'l1.nope'"), std::string::npos)
      << missing.status().message();
  auto host_missing = ws.weight_host("l1.to_k+gone", desc, WeightLayout::STACK);
  ASSERT_FALSE(host_missing.ok());
  EXPECT_EQ(host_missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(host_missing.status().message().find("gone"), std::string::npos);
  // A descriptor the parts do not stack into: INVALID_ARGUMENT.
  for (const TensorDesc& bad : {TensorDesc{DType::F32, Shape{5, 3}},
                                TensorDesc{DType::F32, Shape{6, 4}},
                                TensorDesc{DType::F32, Shape{18}},
                                TensorDesc{DType::F16, Shape{6, 3}}}) {
    auto r = ws.weight_get(name, bad, WeightLayout::STACK);
    ASSERT_FALSE(r.ok()) << bad.str();
    EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT) << bad.str();
    auto hr = ws.weight_host(name, bad, WeightLayout::STACK);
    ASSERT_FALSE(hr.ok()) << bad.str();
    EXPECT_EQ(hr.status().code(), ErrorCode::INVALID_ARGUMENT) << bad.str();
  }
  // Parts that do not stack (trailing dims, dtypes): INVALID_ARGUMENT whatever the descriptor.
  ws.put("wide", HostTensor(DType::F32, Shape{1, 4}));
  ws.put("half", HostTensor(DType::F16, Shape{1, 3}));
  for (const char* other : {"wide", "half"})
    for (const TensorDesc& d : {TensorDesc{DType::F32, Shape{3, 3}},
                                TensorDesc{DType::F32, Shape{3, 4}},
                                TensorDesc{DType::F16, Shape{3, 3}}}) {
      auto r = ws.weight_get(weight_stack_name({"l1.to_k", other}), d, WeightLayout::STACK);
      ASSERT_FALSE(r.ok()) << other << " " << d.str();
      EXPECT_EQ(r.status().code(), ErrorCode::INVALID_ARGUMENT) << other << " " << d.str();
    }
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 0u) << "nothing was served";
  ws.bind(nullptr, nullptr);
}

// On a device whose memory the host may not touch: uploaded once, kept resident, uploaded again
// after a part changes; streamed copies follow the part too.
TEST_F(WeightStackTest, UploadedOnceAndAgainAfterAPartChanges) {
  OpaqueCpuBackend dev;
  Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
  ws.bind(&dev, &alloc);
  auto r = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(dev.uploads, 1);
  EXPECT_EQ(values(*r), expected());
  auto again = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, r->data);
  EXPECT_EQ(dev.uploads, 1) << "resident";
  auto streamed = ws.weight_host(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(streamed.ok()) << streamed.status().str();
  EXPECT_EQ(values(*streamed), expected());

  put("l1", 1, 9.0f);  // no part
  auto kept = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(dev.uploads, 1) << "put() of another weight keeps the stack resident";

  put("l2.to_k", 3, 500.0f);
  auto after = ws.weight_get(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(after.ok()) << after.status().str();
  EXPECT_EQ(dev.uploads, 2);
  EXPECT_EQ(values(*after)[9], 500.0f);
  EXPECT_EQ(values(*after), expected());
  auto streamed_after = ws.weight_host(name, desc, WeightLayout::STACK);
  ASSERT_TRUE(streamed_after.ok()) << streamed_after.status().str();
  EXPECT_EQ(values(*streamed_after), expected()) << "the streamed copy was made again";
  ws.release_device();
  ws.bind(nullptr, nullptr);
}

// Note [stacked context projections] end to end: two cross-attentions whose to_k / to_v read one
// context run through an Executor with the stacking pass (on a device whose memory the host may
// not touch, as where the pass applies, and on the CPU) and without it, serving the weights from
// one WeightSet: the stacked weight is asked for, and the outputs agree; resident, streamed, and
// after put() replaced a part. The SelfAttention tests add a self-attention of x and run the
// pass's self-attention mode (PassOptions::stack_qkv) too: its Q, K and V from one stacked GEMM.
class StackedProjectionRunTest : public ::testing::Test {
 protected:
  // The WeightSet, recording the weights the executor streams (weight_host_all).
  struct Recording final : WeightSource {
    WeightSet& ws;
    std::vector<std::string> streamed;
    explicit Recording(WeightSet& w) : ws(w) {}
    Result<TensorRef> weight_get(const std::string& name, const TensorDesc& desc,
                                 WeightLayout layout) override {
      return ws.weight_get(name, desc, layout);
    }
    Result<TensorRef> weight_host(const std::string& name, const TensorDesc& desc,
                                  WeightLayout layout) override {
      streamed.push_back(name);
      return ws.weight_host(name, desc, layout);
    }
    Result<std::vector<TensorRef>> weight_host_all(const std::vector<WeightRequest>& requests,
                                                   size_t align) override {
      for (const WeightRequest& q : requests) streamed.push_back(q.name);
      return ws.weight_host_all(requests, align);
    }
    void weight_evict(const std::string& name, WeightLayout layout) override {
      ws.weight_evict(name, layout);
    }
    uint64_t resident_bytes() const override { return ws.resident_bytes(); }
    const Reclaimable* holder() const override { return ws.holder(); }
    void run_begin() override { ws.run_begin(); }
    void run_end() override { ws.run_end(); }
  };

  void SetUp() override {
    auto w = [&](const std::string& n, Shape s) {
      HostTensor t(DType::F32, s);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = uniform();
      ws.put(n, std::move(t));
      return g.weight(n, TensorDesc{DType::F32, s});
    };
    ValueId x = g.input("x", TensorDesc{DType::F32, Shape{2, 6, 16}});
    ValueId ctx = g.input("context", TensorDesc{DType::F32, Shape{2, 5, 12}});
    for (int i = 0; i < 2; ++i) {
      const std::string a = fmt::format("a{}", i);
      ValueId q = g.linear(x, w(a + ".to_q", {8, 16}), kNoValue, a + ".to_q");
      ValueId k = g.linear(ctx, w(a + ".to_k", {8, 12}), kNoValue, a + ".to_k");
      ValueId v = g.linear(ctx, w(a + ".to_v", {8, 12}), kNoValue, a + ".to_v");
      g.output(g.attention(q, k, v, 2, false, a + ".attn"), a);
    }
    // The largest weight (2048 bytes) lets both k/v pairs (768 bytes each) share one stack.
    g.output(g.linear(x, w("big", {32, 16}), kNoValue, "big"), "big");
    ASSERT_TRUE(g.ok()) << g.status().str();
    for (const char* n : {"x", "context"}) {
      HostTensor t(DType::F32, g.desc(g.find_input(n)).shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 4.0f * uniform();
      inputs.emplace(n, std::move(t));
    }
  }
  float uniform() {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(seed >> 40) % 2001 - 1000) / 2000.0f;  // [-0.5, 0.5]
  }
  HostInputs host_inputs() const {
    HostInputs in;
    for (const auto& [k, v] : inputs) in.emplace_back(k, &v);
    return in;
  }
  // A self-attention "s" of x (2 heads of 4) whose to_q, to_k and to_v the self-attention mode
  // stacks into kSelfStack. Call before the first run.
  void add_self_attention() {
    ValueId x = g.find_input("x");
    ValueId qkv[3];
    int i = 0;
    for (const char* p : {"s.to_q", "s.to_k", "s.to_v"}) {
      HostTensor t(DType::F32, Shape{8, 16});
      for (int64_t j = 0; j < t.numel(); ++j) t.f32()[j] = uniform();
      ws.put(p, std::move(t));
      qkv[i++] = g.linear(x, g.weight(p, TensorDesc{DType::F32, Shape{8, 16}}), kNoValue, p);
    }
    g.output(g.attention(qkv[0], qkv[1], qkv[2], 2, false, "s.attn"), "s");
    ASSERT_TRUE(g.ok()) << g.status().str();
    self = true;
  }
  // Runs g on `backend` with the stacking pass (and fusion; its self-attention mode when `qkv`)
  // or with no passes.
  std::vector<HostTensor> run(Backend& backend, Allocator& alloc, bool stack,
                              uint64_t budget = 0, std::vector<std::string>* streamed = nullptr) {
    Executor ex(backend, alloc, executor_policies_default(backend));
    if (stack) {
      ex.set_pass_options(PassOptions{false, true, true, qkv});
      auto c = ex.compile(g);
      EXPECT_TRUE(c.ok()) << c.status().str();
      if (c.ok()) {
        std::vector<std::string> stacks;
        for (const Value& v : (*c)->graph.values())
          if (v.kind == ValueKind::WEIGHT && v.layout == WeightLayout::STACK)
            stacks.push_back(v.name);
        std::vector<std::string> want{kStack};
        if (qkv && self) want.push_back(kSelfStack);
        EXPECT_EQ(stacks, want);
      }
    } else {
      ex.set_passes(false);
    }
    const uint64_t was = alloc.budget();
    if (budget) {
      ResidencyOptions o = ex.residency_options();
      o.depth = 2;
      o.small_bytes = 0;
      ex.set_residency_options(o);
      alloc.set_budget(budget);
    }
    Recording source(ws);
    auto out = ex.run(g, host_inputs(), source);
    EXPECT_TRUE(out.ok()) << out.status().str();
    if (streamed) *streamed = source.streamed;
    alloc.set_budget(was);
    return out.ok() ? std::move(out).value() : std::vector<HostTensor>{};
  }
  static double rel_err(const HostTensor& a, const HostTensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    if (a.shape() != b.shape()) return 1.0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < b.numel(); ++i) {
      const double d = double(a.f32()[i]) - double(b.f32()[i]);
      num += d * d;
      den += double(b.f32()[i]) * double(b.f32()[i]);
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
  void expect_same(const std::vector<HostTensor>& got, const std::vector<HostTensor>& ref,
                   const char* what) {
    ASSERT_EQ(got.size(), g.outputs().size()) << what;
    ASSERT_EQ(ref.size(), g.outputs().size()) << what;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_LT(rel_err(got[i], ref[i]), 1e-5) << what << " " << i;
  }

  static constexpr const char* kStack = "a0.to_k+a0.to_v+a1.to_k+a1.to_v";
  static constexpr const char* kSelfStack = "s.to_q+s.to_k+s.to_v";
  bool qkv = false;   // run() with PassOptions::stack_qkv
  bool self = false;  // add_self_attention() was called
  uint64_t seed = 12345;
  Graph g;
  WeightSet ws;
  std::map<std::string, HostTensor> inputs;
};

TEST_F(StackedProjectionRunTest, SameOutputsOnADevice) {
  OpaqueCpuBackend dev;
  Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
  ws.bind(&dev, &alloc);
  const std::vector<HostTensor> ref = run(dev, alloc, false);
  // Each weight of the graph as built is resident now (2x3 of 512 bytes, 2048 for big).
  const uint64_t plain_bytes = 3 * 2 * 512 + 2048;
  EXPECT_EQ(ws.device_bytes(), plain_bytes);
  int uploads = dev.uploads;
  expect_same(run(dev, alloc, false), ref, "plain again");
  const int per_run = dev.uploads - uploads;  // the inputs
  uploads = dev.uploads;
  const std::vector<HostTensor> got = run(dev, alloc, true);
  expect_same(got, ref, "resident");
  EXPECT_EQ(dev.uploads - uploads, per_run + 1) << "the stacked weight, uploaded once";
  EXPECT_EQ(ws.device_bytes(), plain_bytes + 4 * 8 * 12 * 4);
  uploads = dev.uploads;
  expect_same(run(dev, alloc, true), ref, "again");
  EXPECT_EQ(dev.uploads - uploads, per_run) << "and kept resident";

  // Streamed: a budget with room for the arena and a few weights only.
  ws.release_device();
  alloc.reclaim(UINT64_MAX);
  std::vector<std::string> streamed;
  const std::vector<HostTensor> low = run(dev, alloc, true, 8 * 1024, &streamed);
  std::string names;
  for (const std::string& n : streamed) names += n + " ";
  EXPECT_NE(std::find(streamed.begin(), streamed.end(), kStack), streamed.end())
      << "the budget should make the run stream the stacked weight; streamed: " << names;
  expect_same(low, ref, "streamed");
  expect_same(run(dev, alloc, true), ref, "resident once more");
  EXPECT_EQ(ws.device_bytes(), plain_bytes - 4 * 512 + 4 * 8 * 12 * 4)
      << "q, big and the stack resident (the separate k and v were released)";

  // A new to_v of a1: the stacked weight is made again from it.
  HostTensor fresh(DType::F32, Shape{8, 12});
  for (int64_t i = 0; i < fresh.numel(); ++i) fresh.f32()[i] = 2.0f * uniform();
  ws.put("a1.to_v", std::move(fresh));
  const std::vector<HostTensor> ref2 = run(dev, alloc, false);
  ASSERT_EQ(ref2.size(), 3u);
  EXPECT_GT(rel_err(ref2[1], ref[1]), 1e-2) << "a1's output depends on its to_v";
  expect_same(run(dev, alloc, true), ref2, "after put");
  ws.bind(nullptr, nullptr);
}

TEST_F(StackedProjectionRunTest, SameOutputsOnTheCpu) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);
  const std::vector<HostTensor> ref = run(*cpu, alloc, false);
  expect_same(run(*cpu, alloc, true), ref, "cpu");
  HostTensor fresh(DType::F32, Shape{8, 12});
  for (int64_t i = 0; i < fresh.numel(); ++i) fresh.f32()[i] = 2.0f * uniform();
  ws.put("a0.to_k", std::move(fresh));
  const std::vector<HostTensor> ref2 = run(*cpu, alloc, false);
  ASSERT_EQ(ref2.size(), 3u);
  EXPECT_GT(rel_err(ref2[0], ref[0]), 1e-2) << "a0's output depends on its to_k";
  expect_same(run(*cpu, alloc, true), ref2, "cpu after put");
  ws.bind(nullptr, nullptr);
}

TEST_F(StackedProjectionRunTest, SelfAttentionOnADevice) {
  add_self_attention();
  OpaqueCpuBackend dev;
  Allocator alloc(dev, Allocator::kUnlimited, eviction_policy());
  ws.bind(&dev, &alloc);
  const std::vector<HostTensor> ref = run(dev, alloc, false);
  ASSERT_EQ(ref.size(), 4u);
  // 2x3 + 3 projection weights of 512 bytes, 2048 for big.
  const uint64_t plain_bytes = 9 * 512 + 2048;
  EXPECT_EQ(ws.device_bytes(), plain_bytes);
  expect_same(run(dev, alloc, true), ref, "context stack only");
  qkv = true;
  int uploads = dev.uploads;
  expect_same(run(dev, alloc, false), ref, "plain again");
  const int per_run = dev.uploads - uploads;  // the inputs
  uploads = dev.uploads;
  expect_same(run(dev, alloc, true), ref, "qkv resident");
  EXPECT_EQ(dev.uploads - uploads, per_run + 1) << "the [Wq; Wk; Wv] stack, uploaded once";
  EXPECT_EQ(ws.device_bytes(), plain_bytes + 4 * 8 * 12 * 4 + 3 * 8 * 16 * 4);

  // Streamed: a budget with room for the arena and a few weights only.
  ws.release_device();
  alloc.reclaim(UINT64_MAX);
  std::vector<std::string> streamed;
  // (The arena and the staging ring take 8.5 KiB.)
  const std::vector<HostTensor> low = run(dev, alloc, true, 9 * 1024, &streamed);
  std::string names;
  for (const std::string& n : streamed) names += n + " ";
  EXPECT_NE(std::find(streamed.begin(), streamed.end(), kSelfStack), streamed.end())
      << "the budget should make the run stream the qkv stack; streamed: " << names;
  expect_same(low, ref, "qkv streamed");
  for (const char* n : {"s.to_q", "s.to_k", "s.to_v"})
    EXPECT_EQ(std::find(streamed.begin(), streamed.end(), n), streamed.end())
        << n << " is read only through the stack";

  // A new to_k of s: the stack is made again from it.
  HostTensor fresh(DType::F32, Shape{8, 16});
  for (int64_t i = 0; i < fresh.numel(); ++i) fresh.f32()[i] = 2.0f * uniform();
  ws.put("s.to_k", std::move(fresh));
  const std::vector<HostTensor> ref2 = run(dev, alloc, false);
  ASSERT_EQ(ref2.size(), 4u);
  EXPECT_GT(rel_err(ref2[3], ref[3]), 1e-2) << "s's output depends on its to_k";
  expect_same(run(dev, alloc, true), ref2, "qkv after put");
  ws.bind(nullptr, nullptr);
}

TEST_F(StackedProjectionRunTest, SelfAttentionOnTheCpu) {
  add_self_attention();
  qkv = true;
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  ws.bind(cpu.get(), &alloc);
  const std::vector<HostTensor> ref = run(*cpu, alloc, false);
  expect_same(run(*cpu, alloc, true), ref, "cpu qkv");
  ws.bind(nullptr, nullptr);
}

}  // namespace
}  // namespace hr
