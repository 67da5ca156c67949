// PatchedWeights (Note [patched weights]): a weight store seen through LoRA patches gives the
// host reference's patched weights resident, in every layout, and streamed (patched in the ring
// after the copy, Note [patched streaming], on a simulated discrete device whose copies finish
// early or late); patched copies are made once, are derived data the eviction policy may drop,
// and the store's host copies never change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "async_sim_backend.h"
#include "core/fp8_round.h"
#include "graph/executor.h"
#include "graph/graph_test_util.h"
#include "memory/eviction.h"
#include "memory/executor_policies.h"
#include "memory/patched_weights.h"

namespace hr {
namespace {

constexpr int kLayers = 10;
constexpr int64_t kWidth = 96;

HostTensor random_f32(Shape s, std::mt19937& rng, float scale) {
  HostTensor t(DType::F32, s);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(rng);
  return t;
}

// A residual MLP whose layers each read one width x width weight.
Graph mlp() {
  Graph g;
  ValueId h = g.input("x", TensorDesc{DType::F32, Shape{4, kWidth}});
  for (int i = 0; i < kLayers; ++i) {
    ValueId w = g.weight(fmt::format("l{}.weight", i), TensorDesc{DType::F32, Shape{kWidth, kWidth}});
    h = g.add(h, g.unary(OpKind::SILU, g.linear(h, w)));
  }
  g.output(h, "y");
  return g;
}

WeightPatch lora(std::mt19937& rng, int64_t rows, int64_t offset = 0, bool slice = false) {
  WeightPatch p;
  p.kind = PatchKind::LOW_RANK;
  p.factors.push_back(random_f32(Shape{rows, 4}, rng, 0.2f));
  p.factors.push_back(random_f32(Shape{4, kWidth}, rng, 0.2f));
  p.source = "test";
  if (slice) {
    p.row_offset = offset;
    p.rows = rows;
  }
  return p;
}

// Patches on every other layer (one with two patches, one on a row slice only, one DoRA).
std::shared_ptr<PatchSet> patch_set(std::mt19937& rng) {
  auto s = std::make_shared<PatchSet>();
  s->id = "test";
  for (int i = 0; i < kLayers; i += 2) s->by_weight[fmt::format("l{}.weight", i)].push_back(lora(rng, kWidth));
  s->by_weight["l2.weight"].push_back(lora(rng, kWidth));
  s->by_weight["l4.weight"].clear();
  s->by_weight["l4.weight"].push_back(lora(rng, 32, 48, true));
  WeightPatch d = lora(rng, kWidth);
  d.dora_scale = random_f32(Shape{kWidth, 1}, rng, 1.0f);
  d.strength = 0.7f;
  s->by_weight["l6.weight"].push_back(std::move(d));
  return s;
}

struct Fixture {
  Graph g = mlp();
  std::mt19937 rng{11};
  std::shared_ptr<WeightSet> store = std::make_shared<WeightSet>();
  WeightSet reference;  // the host reference's patched weights
  std::shared_ptr<PatchSet> patches;
  HostTensor x;

  Fixture() {
    for (int i = 0; i < kLayers; ++i)
      store->put(fmt::format("l{}.weight", i), random_f32(Shape{kWidth, kWidth}, rng, 0.1f));
    patches = patch_set(rng);
    for (const std::string& n : store->names()) {
      HostTensor w = store->find(n)->clone();
      if (const auto* ps = patches->find(n)) {
        std::vector<HostTensor> ms;
        for (size_t i = 0; i < ps->size(); ++i)
          ms.push_back((*ps)[i].dora_scale.empty() ? HostTensor()
                                                   : dora_multiplier(w, *ps, i).value());
        EXPECT_TRUE(patches_apply_host(w, *ps, ms).ok());
      }
      reference.put(n, std::move(w));
    }
    x = random_f32(Shape{4, kWidth}, rng, 1.0f);
  }

  HostTensor run(Executor& ex, WeightSource& w) {
    auto r = ex.run(g, {{"x", &x}}, w);
    EXPECT_TRUE(r.ok()) << r.status().str();
    return r.ok() ? std::move((*r)[0]) : HostTensor();
  }
};

void expect_close(const HostTensor& got, const HostTensor& want, double tol) {
  ASSERT_EQ(got.desc(), want.desc());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, double(std::fabs(got.f32()[i] - want.f32()[i])));
    scale = std::max(scale, double(std::fabs(want.f32()[i])));
  }
  EXPECT_LE(worst, tol * scale);
}

TEST(PatchedWeightsTest, ResidentMatchesHostReferenceOnceAndHostCopiesStay) {
  Fixture f;
  auto cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  Executor ex(*cpu, alloc, executor_policies_default(*cpu));
  f.reference.bind(cpu.get(), &alloc);
  const HostTensor want = f.run(ex, f.reference);
  const HostTensor before = f.store->find("l0.weight")->clone();
  PatchedWeights view(f.store, f.patches);
  view.bind(cpu.get(), &alloc);
  expect_close(f.run(ex, view), want, 1e-5);
  EXPECT_EQ(view.patches_made(), 5u);  // l0, l2, l4, l6, l8
  expect_close(f.run(ex, view), want, 1e-5);
  EXPECT_EQ(view.patches_made(), 5u) << "a resident patched weight is made once";
  EXPECT_EQ(std::memcmp(before.data(), f.store->find("l0.weight")->data(), before.bytes()), 0);
  // Dropping the patched copies (derived data) loses nothing: the next run patches again.
  EXPECT_GT(view.reclaim(UINT64_MAX), 0u);
  expect_close(f.run(ex, view), want, 1e-5);
  EXPECT_EQ(view.patches_made(), 10u);
}

TEST(PatchedWeightsTest, LayoutsArePatchedInTheirRows) {
  std::mt19937 rng(3);
  auto store = std::make_shared<WeightSet>();
  store->put("a.weight", random_f32(Shape{8, 6, 3, 3}, rng, 0.1f));
  store->put("b.weight", random_f32(Shape{8, 6, 3, 3}, rng, 0.1f));
  auto set = std::make_shared<PatchSet>();
  WeightPatch p;
  p.kind = PatchKind::LOW_RANK;
  p.factors.push_back(random_f32(Shape{8, 2}, rng, 0.3f));
  p.factors.push_back(random_f32(Shape{2, 54}, rng, 0.3f));
  p.source = "conv";
  set->by_weight["b.weight"].push_back(std::move(p));
  auto cpu = cpu_backend_create(1);
  Allocator alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  PatchedWeights view(store, set);
  view.bind(cpu.get(), &alloc);
  HostTensor b = store->find("b.weight")->clone();
  ASSERT_TRUE(patches_apply_host(b, *set->find("b.weight"), {}).ok());
  // Channels-last filter: the patched weight rearranged.
  auto ohwi_desc = weight_layout_desc(b.desc(), WeightLayout::CONV_OHWI);
  auto ohwi = view.weight_get("b.weight", *ohwi_desc, WeightLayout::CONV_OHWI);
  ASSERT_TRUE(ohwi.ok()) << ohwi.status().str();
  HostTensor want_ohwi = weight_relayout(b, WeightLayout::CONV_OHWI).value();
  expect_close(HostTensor::view(want_ohwi.desc(), ohwi->data, nullptr).clone(), want_ohwi, 1e-6);
  // Stacked with an unpatched part: the patched part's rows only.
  const std::string stacked = weight_stack_name({"a.weight", "b.weight"});
  const TensorDesc sd{DType::F32, Shape{16, 6, 3, 3}};
  auto st = view.weight_get(stacked, sd, WeightLayout::STACK);
  ASSERT_TRUE(st.ok()) << st.status().str();
  const float* got = static_cast<const float*>(st->data);
  EXPECT_EQ(std::memcmp(got, store->find("a.weight")->data(), b.bytes()), 0);
  expect_close(HostTensor::view(b.desc(), got + b.numel(), nullptr).clone(), b, 1e-6);
}

// Streamed on a simulated discrete device: the ring gets the unpatched host copy and the patch
// ops run after the copy lands, whichever way the copies race the compute.
TEST(PatchedWeightsTest, StreamedWeightsArePatchedInTheRing) {
  for (SimOrder order : {SimOrder::COPIES_EARLY, SimOrder::COPIES_LATE, SimOrder::RANDOM}) {
    AsyncSimBackend sim(order);  // first: the store's page-locked copies go back to it last
    sim.set_discrete(true);
    Fixture f;
    auto cpu = cpu_backend_create(1);
    Allocator ref_alloc(*cpu, Allocator::kUnlimited, eviction_policy());
    Executor ref_ex(*cpu, ref_alloc, executor_policies_default(*cpu));
    f.reference.bind(cpu.get(), &ref_alloc);
    const HostTensor want = f.run(ref_ex, f.reference);

    const uint64_t weight = uint64_t(kWidth * kWidth * 4);
    Allocator alloc(sim, 6 * weight + (64u << 10), eviction_policy());
    Executor ex(sim, alloc, executor_policies_default(sim));
    ResidencyOptions o;
    o.depth = 2;
    o.small_bytes = 0;
    ex.set_residency_options(o);
    PatchedWeights view(f.store, f.patches);
    view.bind(&sim, &alloc);
    expect_close(f.run(ex, view), want, 1e-5);
    ASSERT_TRUE(ex.last_residency().streams()) << "the budget should make it stream";
    EXPECT_GT(view.streamed_patches(), 0u) << "no patched weight streamed";
    expect_close(f.run(ex, view), want, 1e-5);  // the factors stay prepared
    EXPECT_LE(alloc.total().peak, 6 * weight + (64u << 10));
  }
}

// Note [fp8 patches]: fp8 weights with LoRA patches (patched once on the host, as ComfyUI
// rounds them) give the same output resident (a patched device copy) and streamed (the patched
// host copy through the ring), on a simulated discrete device.
TEST(PatchedWeightsTest, Fp8WeightsPatchedResidentAndStreamedAlike) {
  Fixture f;
  auto store = std::make_shared<WeightSet>();
  auto storage = std::make_shared<WeightStorageMap>();
  for (const std::string& n : f.store->names()) {
    const HostTensor* w = f.store->find(n);
    HostTensor q(DType::F8_E4M3, w->shape());
    for (int64_t i = 0; i < w->numel(); ++i)
      static_cast<uint8_t*>(q.data())[i] = f32_to_f8e4m3(w->f32()[i] * 40.0f);
    store->put(n, std::move(q));
    store->put(n + ".scale", [] {
      HostTensor s(DType::F32, Shape{1});
      s.f32()[0] = 1.0f / 40.0f;
      return s;
    }());
    (*storage)[n] = WeightStorage{DType::F8_E4M3, n + ".scale"};
  }
  store->set_storage(storage);
  auto set = std::make_shared<PatchSet>();
  for (int i = 0; i < kLayers; i += 3) set->by_weight[fmt::format("l{}.weight", i)].push_back(lora(f.rng, kWidth));
  set->comfy_prefix = "diffusion_model.";
  Graph g;
  g.set_weight_storage(storage);
  ValueId h = g.input("x", TensorDesc{DType::F32, Shape{4, kWidth}});
  for (int i = 0; i < kLayers; ++i)
    h = g.add(h, g.unary(OpKind::SILU, g.linear(h, g.weight(fmt::format("l{}.weight", i),
                                                            TensorDesc{DType::F32, Shape{kWidth, kWidth}}))));
  g.output(h, "y");
  std::vector<HostTensor> outs;
  for (bool streamed : {false, true}) {
    AsyncSimBackend sim(SimOrder::COPIES_LATE);
    sim.set_discrete(true);
    const uint64_t weight = uint64_t(kWidth * kWidth);  // fp8
    Allocator alloc(sim, streamed ? 6 * weight + (64u << 10) : Allocator::kUnlimited,
                    eviction_policy());
    Executor ex(sim, alloc, executor_policies_default(sim));
    ResidencyOptions o;
    o.depth = 2;
    o.small_bytes = 0;
    ex.set_residency_options(o);
    PatchedWeights view(store, set);
    view.bind(&sim, &alloc);
    auto r = ex.run(g, {{"x", &f.x}}, view);
    ASSERT_TRUE(r.ok()) << r.status().str();
    EXPECT_EQ(ex.last_residency().streams(), streamed);
    outs.push_back(std::move((*r)[0]));
    view.bind(nullptr, nullptr);
  }
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].bytes()), 0);
}

// Note [stacked fp8 projections] (graph/pass_stack.cpp): the K and V weights of two
// cross-attentions, stored as unscaled e4m3 and stacked by the pass, with LoRA patches on some
// parts: each patched part is patched on the host as it is alone, so every run (stacked or not,
// resident or streamed) gives the bits of the unstacked resident run, and the patches count.
TEST(PatchedWeightsTest, StackedFp8PartsPatchedAsAlone) {
  std::mt19937 rng(5);
  auto store = std::make_shared<WeightSet>();
  auto storage = std::make_shared<WeightStorageMap>();
  Graph g;
  g.set_weight_storage(storage);
  auto w = [&](const std::string& n) {
    const HostTensor f = random_f32(Shape{kWidth, kWidth}, rng, 0.1f);
    HostTensor q(DType::F8_E4M3, f.shape());
    f32_to_f8(f.f32(), DType::F8_E4M3, static_cast<uint8_t*>(q.data()), q.numel());
    store->put(n, std::move(q));
    (*storage)[n] = WeightStorage{DType::F8_E4M3};
    return g.weight(n, TensorDesc{DType::F32, Shape{kWidth, kWidth}});
  };
  const ValueId x = g.input("x", TensorDesc{DType::F32, Shape{2, 4, kWidth}});
  const ValueId ctx = g.input("context", TensorDesc{DType::F32, Shape{2, 5, kWidth}});
  for (int a = 0; a < 2; ++a) {
    const std::string n = fmt::format("a{}", a);
    const ValueId q = g.linear(x, w(n + ".q"), kNoValue, n + ".q");
    const ValueId k = g.linear(ctx, w(n + ".k"), kNoValue, n + ".k");
    const ValueId v = g.linear(ctx, w(n + ".v"), kNoValue, n + ".v");
    g.output(g.attention(q, k, v, 2, false, n + ".attn"), n);
  }
  store->set_storage(storage);
  auto set = std::make_shared<PatchSet>();
  set->comfy_prefix = "diffusion_model.";
  set->by_weight["a0.k"].push_back(lora(rng, kWidth));
  set->by_weight["a1.v"].push_back(lora(rng, kWidth));
  const HostTensor xs = random_f32(Shape{2, 4, kWidth}, rng, 1.0f);
  const HostTensor cs = random_f32(Shape{2, 5, kWidth}, rng, 1.0f);
  auto run = [&](std::shared_ptr<const PatchSet> patches, bool stack, bool streamed) {
    AsyncSimBackend sim(SimOrder::COPIES_LATE);
    sim.set_discrete(true);
    // Streamed: an ~89 KiB arena and a 36 KiB staging ring leave less than the 54 KiB of weights.
    Allocator alloc(sim, streamed ? uint64_t(136u << 10) : Allocator::kUnlimited,
                    eviction_policy());
    Executor ex(sim, alloc, executor_policies_default(sim));
    ex.set_pass_options(PassOptions{false, false, stack, false});
    ResidencyOptions o;
    o.depth = 2;
    o.small_bytes = 0;
    ex.set_residency_options(o);
    PatchedWeights view(store, std::move(patches));
    view.bind(&sim, &alloc);
    auto r = ex.run(g, {{"x", &xs}, {"context", &cs}}, view);
    EXPECT_TRUE(r.ok()) << r.status().str();
    if (r.ok()) {
      EXPECT_EQ(ex.last_residency().streams(), streamed);
    }
    view.bind(nullptr, nullptr);
    return r.ok() ? std::move(*r) : std::vector<HostTensor>{};
  };
  const std::vector<HostTensor> want = run(set, false, false);
  const std::vector<HostTensor> plain = run(std::make_shared<PatchSet>(), false, false);
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(plain.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_NE(std::memcmp(want[i].data(), plain[i].data(), want[i].bytes()), 0) << "patched " << i;
  for (bool streamed : {false, true}) {
    SCOPED_TRACE(streamed);
    const std::vector<HostTensor> got = run(set, true, streamed);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].bytes()), 0) << i;
  }
}

// Note [patched streaming room]: the room the weights get is the budget less the factors of
// the weights the plan streams, not of every patched weight: with the patches on the first two
// layers only and the budget of the old rule, the plan keeps more resident than that rule could
// and still runs within the budget, with the reference's result.
TEST(PatchedWeightsTest, StreamingReservesOnlyTheStreamedWeightsFactors) {
  AsyncSimBackend sim(SimOrder::COPIES_LATE);
  sim.set_discrete(true);
  Fixture f;
  auto few = std::make_shared<PatchSet>();
  few->id = "few";
  for (const char* n : {"l0.weight", "l1.weight"}) {
    WeightPatch p = lora(f.rng, kWidth);
    p.factors[0] = random_f32(Shape{kWidth, 32}, f.rng, 0.2f);  // rank 32: factors worth reserving
    p.factors[1] = random_f32(Shape{32, kWidth}, f.rng, 0.2f);
    few->by_weight[n].push_back(std::move(p));
  }
  WeightSet reference;
  for (const std::string& n : f.store->names()) {
    HostTensor w = f.store->find(n)->clone();
    if (const auto* ps = few->find(n)) {
      const std::vector<HostTensor> none(ps->size());
      ASSERT_TRUE(patches_apply_host(w, *ps, none).ok());
    }
    reference.put(n, std::move(w));
  }
  auto cpu = cpu_backend_create(1);
  Allocator ref_alloc(*cpu, Allocator::kUnlimited, eviction_policy());
  Executor ref_ex(*cpu, ref_alloc, executor_policies_default(*cpu));
  reference.bind(cpu.get(), &ref_alloc);
  const HostTensor want = f.run(ref_ex, reference);

  PatchedWeights view(f.store, few);
  Allocator probe_alloc(sim, Allocator::kUnlimited, eviction_policy());
  Executor probe(sim, probe_alloc, executor_policies_default(sim));
  view.bind(&sim, &probe_alloc);
  auto c = probe.compile(f.g);
  ASSERT_TRUE(c.ok());
  std::vector<WeightRequest> every;  // the old rule: the factors of every weight, streamed
  for (const WeightUse& u : (*c)->weights) {
    const Value& v = (*c)->graph.values()[size_t(u.value)];
    every.push_back(WeightRequest{v.name, v.desc, v.layout});
  }
  const uint64_t weight = uint64_t(kWidth * kWidth * 4), all = view.patch_room_bytes(every, {});
  const uint64_t budget = (*c)->plan->arena_bytes + 6 * weight + all;
  Allocator alloc(sim, budget, eviction_policy());
  Executor ex(sim, alloc, executor_policies_default(sim));
  ResidencyOptions o;
  o.depth = 2;
  o.small_bytes = 0;
  ex.set_residency_options(o);
  view.bind(&sim, &alloc);
  for (int i = 0; i < 2; ++i) expect_close(f.run(ex, view), want, 1e-5);
  const ResidencyPlan& p = ex.last_residency();
  ASSERT_TRUE(p.streams()) << "the budget should make it stream";
  EXPECT_LT(Executor::patch_room(**c, view, &p), all);  // the resident ones are patched by now
  EXPECT_GT(p.resident_bytes + p.ring_bytes, 6 * weight) << "no more resident than the old rule";
  EXPECT_LE(alloc.total().peak, budget);
}

// On a discrete device plain LoRAs take the fused form (Note [fused low-rank patches]): a
// weight patched in row slices only (q and v inside a fused projection, k not) keeps its other
// rows, and a stacked weight's unpatched part is the original's.
// Note [fused low-rank patches]: below float32 each scaled up is split into a high and a low
// part, unless every scaled up is exact in the dtype already (alpha = rank on an f16 file): then
// the fused factors are half as wide, and fused_bytes says so.
TEST(PatchedWeightsTest, FusedUpsSplitOnlyWhenInexact) {
  std::mt19937 rng(9);
  auto ups_in_f16 = [](WeightPatch p) {
    for (int64_t i = 0; i < p.factors[0].numel(); ++i)
      p.factors[0].f32()[i] = f16_to_f32(f32_to_f16(p.factors[0].f32()[i]));
    for (int64_t i = 0; i < p.factors[1].numel(); ++i)
      p.factors[1].f32()[i] = f16_to_f32(f32_to_f16(p.factors[1].f32()[i]));
    return p;
  };
  const Shape stored{kWidth, kWidth};
  std::vector<WeightPatch> exact, inexact;
  exact.push_back(ups_in_f16(lora(rng, kWidth)));
  inexact.push_back(ups_in_f16(lora(rng, kWidth)));
  inexact[0].factors[0].f32()[0] *= 1.0f + 1e-6f;  // a scale the f16 up does not carry exactly
  ASSERT_TRUE(patches_fusable(exact, DType::F16, false));
  ASSERT_TRUE(patches_fusable(inexact, DType::F16, false));
  const auto one = patches_fuse(exact, stored, DType::F16);
  const auto two = patches_fuse(inexact, stored, DType::F16);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(one[0].up.shape()[1], 4);  // rank 4: the high parts only
  EXPECT_EQ(two[0].up.shape()[1], 8);  // high and low
  EXPECT_EQ(one[0].down_t.shape()[1], 4);
  EXPECT_EQ(fused_bytes(exact, DType::F16), one[0].up.bytes() + one[0].down_t.bytes());
  EXPECT_EQ(fused_bytes(inexact, DType::F16), two[0].up.bytes() + two[0].down_t.bytes());
}

TEST(PatchedWeightsTest, FusedFormKeepsUnpatchedRows) {
  AsyncSimBackend sim(SimOrder::COPIES_LATE);
  sim.set_discrete(true);
  std::mt19937 rng(5);
  auto store = std::make_shared<WeightSet>();
  store->put("qkv.weight", random_f32(Shape{3 * 32, kWidth}, rng, 0.1f));
  store->put("other.weight", random_f32(Shape{32, kWidth}, rng, 0.1f));
  auto set = std::make_shared<PatchSet>();
  set->by_weight["qkv.weight"].push_back(lora(rng, 32, 0, true));   // q
  set->by_weight["qkv.weight"].push_back(lora(rng, 32, 64, true));  // v
  set->by_weight["qkv.weight"].push_back(lora(rng, 32, 64, true));  // v again (stacked LoRAs)
  ASSERT_TRUE(patches_fusable(*set->find("qkv.weight"), DType::F32, false));
  HostTensor want = store->find("qkv.weight")->clone();
  ASSERT_TRUE(patches_apply_host(want, *set->find("qkv.weight"), {}).ok());
  Allocator alloc(sim, Allocator::kUnlimited, eviction_policy());
  PatchedWeights view(store, set);
  view.bind(&sim, &alloc);
  auto device_read = [&](const TensorRef& r) {
    HostTensor h(r.desc);
    EXPECT_TRUE(sim.copy_d2h(h.data(), r.data, h.bytes(), nullptr).ok());
    EXPECT_TRUE(sim.stream_sync(nullptr).ok());
    return h;
  };
  auto got = view.weight_get("qkv.weight", want.desc(), WeightLayout::STORED);
  ASSERT_TRUE(got.ok()) << got.status().str();
  expect_close(device_read(*got), want, 1e-6);
  const std::string stacked = weight_stack_name({"other.weight", "qkv.weight"});
  const TensorDesc sd{DType::F32, Shape{4 * 32, kWidth}};
  auto st = view.weight_get(stacked, sd, WeightLayout::STACK);
  ASSERT_TRUE(st.ok()) << st.status().str();
  const HostTensor both = device_read(*st);
  EXPECT_EQ(std::memcmp(both.data(), store->find("other.weight")->data(),
                        store->find("other.weight")->bytes()), 0);
  expect_close(HostTensor::view(want.desc(), both.f32() + 32 * kWidth, nullptr).clone(), want, 1e-6);
  view.bind(nullptr, nullptr);
}

}  // namespace
}  // namespace hr
