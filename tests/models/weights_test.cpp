// Tests of WeightSet: prefix loading with conversion, host pointers on the CPU backend, lazy
// upload (through the allocator) on a backend whose memory is not host-visible, and errors.
#include "models/weights.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "async_sim_backend.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

// The CPU backend presented as a device whose memory the host may not touch, so WeightSet
// takes its upload path. Counts uploads.
class OpaqueCpuBackend final : public Backend {
 public:
  OpaqueCpuBackend() : cpu_(cpu_backend_create(1)) {}
  DeviceInfo info() const override { return cpu_->info(); }
  bool host_visible() const override { return false; }
  Result<void*> device_alloc(size_t bytes) override {
    ++allocs;
    return cpu_->device_alloc(bytes);
  }
  void device_free(void* p) override {
    ++frees;
    cpu_->device_free(p);
  }
  Result<void*> host_alloc_pinned(size_t bytes) override { return cpu_->host_alloc_pinned(bytes); }
  void host_free_pinned(void* p) override { cpu_->host_free_pinned(p); }
  Stream* default_stream() override { return cpu_->default_stream(); }
  Result<std::unique_ptr<Stream>> stream_create() override { return cpu_->stream_create(); }
  Status stream_sync(Stream* s) override { return cpu_->stream_sync(s); }
  Result<std::unique_ptr<Event>> event_create() override { return cpu_->event_create(); }
  Status event_record(Event* e, Stream* s) override { return cpu_->event_record(e, s); }
  Status stream_wait_event(Stream* s, Event* e) override { return cpu_->stream_wait_event(s, e); }
  Status event_sync(Event* e) override { return cpu_->event_sync(e); }
  Status copy_h2d(void* d, const void* s, size_t n, Stream* st) override {
    ++uploads;
    return cpu_->copy_h2d(d, s, n, st);
  }
  Status copy_d2h(void* d, const void* s, size_t n, Stream* st) override {
    return cpu_->copy_d2h(d, s, n, st);
  }
  Status copy_d2d(void* d, const void* s, size_t n, Stream* st) override {
    return cpu_->copy_d2d(d, s, n, st);
  }
  Status memset_zero(void* d, size_t n, Stream* s) override { return cpu_->memset_zero(d, n, s); }
  bool op_supported(OpKind kind, DType dtype) const override {
    return cpu_->op_supported(kind, dtype);
  }
  size_t op_workspace(OpKind kind, const OpParams& params, std::span<const TensorDesc> inputs,
                      const TensorDesc& output) const override {
    return cpu_->op_workspace(kind, params, inputs, output);
  }
  Status op_run(const OpCall& call, Stream* s) override { return cpu_->op_run(call, s); }

  int uploads = 0;
  int allocs = 0, frees = 0;

 private:
  std::unique_ptr<Backend> cpu_;
};

class WeightSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("hr_weights_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "model.safetensors").string();

    HostTensor w(DType::F32, Shape{2, 3});
    for (int i = 0; i < 6; ++i) w.f32()[i] = 0.5f * float(i) - 1.0f;
    HostTensor b(DType::F32, Shape{3});
    for (int i = 0; i < 3; ++i) b.f32()[i] = 3.0f + float(i);
    HostTensor ids(DType::I64, Shape{1, 4});
    for (int i = 0; i < 4; ++i) static_cast<int64_t*>(ids.data())[i] = i;
    HostTensor idx(DType::I32, Shape{2});
    static_cast<int32_t*>(idx.data())[0] = 5;
    static_cast<int32_t*>(idx.data())[1] = -1;
    HostTensor other(DType::F32, Shape{1});
    w16_ = w.to(DType::F16);
    HostTensor b16 = b.to(DType::F16);
    Status s = safetensors_write(path_, {{"enc.layer.weight", &w16_},
                                         {"enc.layer.bias", &b16},
                                         {"enc.ids", &ids},
                                         {"enc.idx", &idx},
                                         {"dec.weight", &other}});
    ASSERT_TRUE(s.ok()) << s.str();
    auto r = SafetensorsFile::open(path_);
    ASSERT_TRUE(r.ok()) << r.status().str();
    file_ = std::move(r).value();
  }
  void TearDown() override {
    file_.reset();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  std::string path_;
  HostTensor w16_;
  std::unique_ptr<SafetensorsFile> file_;
};

TEST_F(WeightSetTest, LoadPrefixStripsAndConverts) {
  WeightSet ws;
  ASSERT_TRUE(ws.load_prefix(*file_, "enc.", DType::F32).ok());
  EXPECT_EQ(ws.size(), 4u);
  std::vector<std::string> want = {"ids", "idx", "layer.bias", "layer.weight"};
  EXPECT_EQ(ws.names(), want);
  EXPECT_FALSE(ws.contains("dec.weight"));
  EXPECT_FALSE(ws.contains("enc.layer.weight"));

  const HostTensor* w = ws.find("layer.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->desc(), (TensorDesc{DType::F32, Shape{2, 3}}));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(w->f32()[i], f16_to_f32(static_cast<const uint16_t*>(w16_.data())[i]));
  EXPECT_EQ(w->f32()[5], 1.5f);
  EXPECT_EQ(ws.find("layer.bias")->f32()[2], 5.0f);
  // Integer tensors keep an integer type.
  EXPECT_EQ(ws.find("ids")->dtype(), DType::I64);
  EXPECT_EQ(static_cast<const int64_t*>(ws.find("ids")->data())[3], 3);
  EXPECT_EQ(ws.find("idx")->dtype(), DType::I32);
  EXPECT_EQ(static_cast<const int32_t*>(ws.find("idx")->data())[1], -1);
  EXPECT_EQ(ws.bytes(), 6u * 4 + 3u * 4 + 4u * 8 + 2u * 4);

  // f16 as the compute dtype keeps the stored values.
  WeightSet half;
  ASSERT_TRUE(half.load_prefix(*file_, "enc.layer.", DType::F16).ok());
  EXPECT_EQ(half.names(), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_EQ(half.find("weight")->dtype(), DType::F16);
  EXPECT_EQ(std::memcmp(half.find("weight")->data(), w16_.data(), w16_.bytes()), 0);

  // A prefix that matches nothing loads nothing.
  WeightSet none;
  ASSERT_TRUE(none.load_prefix(*file_, "model.diffusion_model.", DType::F32).ok());
  EXPECT_EQ(none.size(), 0u);
}

TEST_F(WeightSetTest, WeightGetOnCpuReturnsHostPointers) {
  WeightSet ws;
  ASSERT_TRUE(ws.load_prefix(*file_, "enc.", DType::F32).ok());
  TensorDesc desc{DType::F32, Shape{2, 3}};

  // Unbound: host pointers.
  auto r0 = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r0.ok()) << r0.status().str();
  EXPECT_EQ(r0->data, ws.find("layer.weight")->data());

  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  ws.bind(cpu.get(), &alloc);
  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(r->data, ws.find("layer.weight")->data());
  EXPECT_EQ(r->desc, desc);
  // Note [adopted bytes]: no copy on a host-visible backend, but the bytes count.
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 256u) << "2x3 f32 rounded to the alignment";
  ws.weight_evict("layer.weight", WeightLayout::STORED);
  EXPECT_EQ(alloc.total().current, 0u);
  auto h = ws.weight_host("layer.weight", desc, WeightLayout::STORED);
  ASSERT_TRUE(h.ok()) << h.status().str();
  EXPECT_EQ(h->data, ws.find("layer.weight")->data());
  EXPECT_EQ(alloc.total().current, 0u) << "a streamed weight holds no device bytes";
}

TEST_F(WeightSetTest, WeightGetErrors) {
  WeightSet ws;
  ASSERT_TRUE(ws.load_prefix(*file_, "enc.", DType::F32).ok());
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Allocator alloc(*cpu);
  ws.bind(cpu.get(), &alloc);

  auto missing = ws.weight_get("layer.nope", TensorDesc{DType::F32, Shape{2}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("layer.nope"), std::string::npos);

  auto shape = ws.weight_get("layer.weight", TensorDesc{DType::F32, Shape{3, 2}});
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(shape.status().message().find("layer.weight"), std::string::npos);

  auto dtype = ws.weight_get("layer.weight", TensorDesc{DType::F16, Shape{2, 3}});
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.status().code(), ErrorCode::INVALID_ARGUMENT);

  // A missing file tensor surfaces as a load error with the file name.
  auto st = file_->load("enc.nope");
  EXPECT_EQ(st.status().code(), ErrorCode::NOT_FOUND);
}

TEST_F(WeightSetTest, UploadOnceOnOpaqueBackend) {
  WeightSet ws;
  ASSERT_TRUE(ws.load_prefix(*file_, "enc.", DType::F32).ok());
  OpaqueCpuBackend dev;
  Allocator alloc(dev);
  ws.bind(&dev, &alloc);
  TensorDesc desc{DType::F32, Shape{2, 3}};

  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_NE(r->data, ws.find("layer.weight")->data());
  EXPECT_EQ(std::memcmp(r->data, ws.find("layer.weight")->data(), desc.bytes()), 0);
  EXPECT_EQ(dev.uploads, 1);
  EXPECT_GT(alloc.stats(Pool::WEIGHTS).current, 0u);

  auto again = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data, r->data) << "device copy is kept resident";
  EXPECT_EQ(dev.uploads, 1);

  // put() replaces the host copy and drops the stale device copy.
  HostTensor fresh(DType::F32, Shape{2, 3});
  fresh.f32()[0] = 42.0f;
  ws.put("layer.weight", std::move(fresh));
  auto after = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(static_cast<const float*>(after->data)[0], 42.0f);
  EXPECT_EQ(dev.uploads, 2);

  ws.release_device();
  const PoolStats w = alloc.stats(Pool::WEIGHTS);
  EXPECT_EQ(w.current, w.cached) << "only an idle cached block is left (Note [weight block cache])";
  EXPECT_EQ(alloc.reclaim(UINT64_MAX), w.cached);
  EXPECT_EQ(alloc.stats(Pool::WEIGHTS).current, 0u);
  EXPECT_TRUE(ws.contains("layer.weight")) << "host copies stay";
}

// Note [mapped weights]: tensors stored in the target dtype are views of the file's mapping
// (nothing copied), which stays valid after the caller drops the file, and uploads read them;
// converted tensors are copies.
TEST_F(WeightSetTest, MappedWhenNoConversionIsNeeded) {
  auto opened = SafetensorsFile::open(path_);
  ASSERT_TRUE(opened.ok());
  std::shared_ptr<const SafetensorsFile> file(std::move(opened).value());
  WeightSet half, full;
  ASSERT_TRUE(half.load_prefix(file, "enc.", DType::F16).ok());
  ASSERT_TRUE(full.load_prefix(file, "enc.", DType::F32).ok());
  file.reset();  // the views keep the mapping
  ASSERT_NE(half.find("layer.weight"), nullptr);
  EXPECT_TRUE(half.find("layer.weight")->is_view());
  EXPECT_TRUE(half.find("layer.bias")->is_view());
  EXPECT_FALSE(full.find("layer.weight")->is_view()) << "f16 to f32 is a copy";
  // Integer tensors are views in both when the file aligns them for their type.
  EXPECT_EQ(half.mapped_bytes(), 12u + 6u + full.mapped_bytes());
  EXPECT_EQ(std::memcmp(half.find("layer.weight")->data(), w16_.data(), 12), 0);

  OpaqueCpuBackend dev;
  Allocator alloc(dev);
  half.bind(&dev, &alloc);
  TensorDesc desc{DType::F16, Shape{2, 3}};
  auto r = half.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(std::memcmp(r->data, w16_.data(), 12), 0);
  half.release_device();  // uploaded again from the mapping (its pages were given back)
  auto again = half.weight_get("layer.weight", desc);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::memcmp(again->data, w16_.data(), 12), 0);
  EXPECT_EQ(dev.uploads, 2);
  half.bind(nullptr, nullptr);
}

// A model still bound to an allocator that is destroyed gives its device copies back while the
// allocator can take them, and can be bound again.
TEST_F(WeightSetTest, OutlivesItsAllocator) {
  WeightSet ws;
  ASSERT_TRUE(ws.load_prefix(*file_, "enc.", DType::F32).ok());
  OpaqueCpuBackend dev;
  TensorDesc desc{DType::F32, Shape{2, 3}};
  {
    Allocator alloc(dev);
    ws.bind(&dev, &alloc);
    ASSERT_TRUE(ws.weight_get("layer.weight", desc).ok());
    EXPECT_GT(alloc.stats(Pool::WEIGHTS).current, 0u);
  }
  EXPECT_EQ(ws.device_bytes(), 0u);
  Allocator again(dev);
  ws.bind(&dev, &again);
  auto r = ws.weight_get("layer.weight", desc);
  ASSERT_TRUE(r.ok()) << r.status().str();
  EXPECT_EQ(std::memcmp(r->data, ws.find("layer.weight")->data(), desc.bytes()), 0);
  EXPECT_EQ(dev.uploads, 2);
  ws.bind(nullptr, nullptr);
}

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
  Allocator alloc(dev_, 5 * kBytes);
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
  Allocator alloc(dev_, 4 * kBytes);
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
  Allocator alloc(dev_);
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
  Allocator alloc(dev_, 3 * kBytes);
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
  Allocator alloc(dev_);
  Executor ex(dev_, alloc);
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
  Allocator alloc(dev_, 5 * kBytes);
  Executor ex(dev_, alloc);
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
  sim.set_host_visible(false);
  Allocator alloc(sim);
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
  sim.set_host_visible(false);
  Allocator alloc(sim);
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

}  // namespace
}  // namespace hr
