// Tests for the budget-aware Allocator: per-pool statistics, budget refusal with the segment
// breakdown, reset_peak, DeviceBuffer ownership, and device refusals via a fake backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#include <utility>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "fake_backend.h"

namespace hr {
namespace {

constexpr size_t kA = kDeviceAlignment;

// A backend whose device memory is host memory and which refuses allocations on demand.
// Only the memory calls matter here; the rest report UNSUPPORTED.
class FakeBackend final : public test::UnsupportedBackend {
 public:
  bool refuse = false;
  int device_allocs = 0;
  int device_frees = 0;
  std::set<void*> live;

  int device_syncs = 0;
  bool sync_fails = false;
  int delay_us = 0;  // a slow device call (the allocator drops its lock around it)
  Status device_sync() override {
    std::lock_guard<std::mutex> lock(mu);
    ++device_syncs;
    return sync_fails ? Status(ErrorCode::INTERNAL, "an earlier kernel failed") : Status();
  }
  std::mutex mu;
  Result<void*> device_alloc(size_t bytes) override {
    if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    std::lock_guard<std::mutex> lock(mu);
    ++device_allocs;
    if (refuse) return make_error(ErrorCode::OUT_OF_MEMORY, "fake device is full");
    void* p = std::malloc(bytes);
    live.insert(p);
    return p;
  }
  void device_free(void* p) override {
    std::lock_guard<std::mutex> lock(mu);
    ++device_frees;
    EXPECT_EQ(live.erase(p), 1u) << "freed a pointer the device never handed out";
    std::free(p);
  }
};

TEST(Allocator, StatsPerPoolOnCpu) {
  std::unique_ptr<Backend> cpu = cpu_backend_create();
  Allocator a(*cpu);
  a.set_weight_cache_cap(0);  // plain accounting: a freed weight block goes back at once
  EXPECT_EQ(a.budget(), Allocator::kUnlimited);
  {
    Result<DeviceBuffer> w = a.allocate(1000, Pool::WEIGHTS, "w");
    ASSERT_TRUE(w.ok()) << w.status().str();
    EXPECT_EQ(w->size(), 4 * kA);  // rounded up to the alignment
    EXPECT_EQ(w->pool(), Pool::WEIGHTS);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data()) % kA, 0u);
    std::memset(w->data(), 0xab, w->size());  // the memory is really there

    Result<DeviceBuffer> act = a.allocate(kA, Pool::ACTIVATIONS, "arena");
    ASSERT_TRUE(act.ok());
    Result<DeviceBuffer> zero = a.allocate(0, Pool::ACTIVATIONS, "empty");
    ASSERT_TRUE(zero.ok());
    EXPECT_EQ(zero->size(), kA);  // a zero-byte request still gets a distinct buffer
    EXPECT_NE(zero->data(), act->data());

    PoolStats ws = a.stats(Pool::WEIGHTS);
    EXPECT_EQ(ws.current, 4 * kA);
    EXPECT_EQ(ws.peak, 4 * kA);
    EXPECT_EQ(ws.allocated, 4 * kA);
    EXPECT_EQ(ws.freed, 0u);
    EXPECT_EQ(ws.allocations, 1u);
    EXPECT_EQ(ws.failures, 0u);
    PoolStats as = a.stats(Pool::ACTIVATIONS);
    EXPECT_EQ(as.current, 2 * kA);
    EXPECT_EQ(as.allocations, 2u);
    EXPECT_EQ(a.stats(Pool::CONTEXT).current, 0u);
    PoolStats t = a.total();
    EXPECT_EQ(t.current, 6 * kA);
    EXPECT_EQ(t.peak, 6 * kA);
    EXPECT_EQ(t.allocations, 3u);

    act->reset();  // explicit early free
    EXPECT_FALSE(*act);
    EXPECT_EQ(a.stats(Pool::ACTIVATIONS).current, kA);
    EXPECT_EQ(a.stats(Pool::ACTIVATIONS).freed, kA);
    EXPECT_EQ(a.stats(Pool::ACTIVATIONS).peak, 2 * kA);
    act->reset();  // resetting an empty buffer changes nothing
    EXPECT_EQ(a.stats(Pool::ACTIVATIONS).freed, kA);
  }
  PoolStats t = a.total();
  EXPECT_EQ(t.current, 0u);
  EXPECT_EQ(t.peak, 6 * kA);
  EXPECT_EQ(t.allocated, 6 * kA);
  EXPECT_EQ(t.freed, 6 * kA);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).freed, 4 * kA);
}

TEST(Allocator, ResetPeak) {
  std::unique_ptr<Backend> cpu = cpu_backend_create();
  Allocator a(*cpu);
  Result<DeviceBuffer> keep = a.allocate(kA, Pool::ACTIVATIONS, "keep");
  ASSERT_TRUE(keep.ok());
  {
    Result<DeviceBuffer> big = a.allocate(10 * kA, Pool::ACTIVATIONS, "big");
    ASSERT_TRUE(big.ok());
  }
  EXPECT_EQ(a.stats(Pool::ACTIVATIONS).peak, 11 * kA);
  EXPECT_EQ(a.total().peak, 11 * kA);
  a.reset_peak();
  EXPECT_EQ(a.stats(Pool::ACTIVATIONS).peak, kA);  // peak drops to what is held now
  EXPECT_EQ(a.total().peak, kA);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).peak, 0u);
  EXPECT_EQ(a.stats(Pool::ACTIVATIONS).allocated, 11 * kA);  // lifetime counters survive
  Result<DeviceBuffer> more = a.allocate(2 * kA, Pool::ACTIVATIONS, "more");
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(a.stats(Pool::ACTIVATIONS).peak, 3 * kA);
}

TEST(Allocator, BudgetRefusalCarriesSegments) {
  std::unique_ptr<Backend> cpu = cpu_backend_create();
  Allocator a(*cpu, 10 * kA);
  Result<DeviceBuffer> ctx = a.allocate(kA, Pool::CONTEXT, "cublas workspace");
  Result<DeviceBuffer> w = a.allocate(4 * kA, Pool::WEIGHTS, "unet weights");
  Result<DeviceBuffer> st = a.allocate(kA, Pool::STAGING, "ring");
  Result<DeviceBuffer> act = a.allocate(3 * kA, Pool::ACTIVATIONS, "arena");
  ASSERT_TRUE(ctx.ok() && w.ok() && st.ok() && act.ok());
  // 9 of 10 units held: one more unit fits exactly, then nothing does.
  Result<DeviceBuffer> fits = a.allocate(kA - 10, Pool::OTHER, "last");
  ASSERT_TRUE(fits.ok()) << fits.status().str();
  Result<DeviceBuffer> refused = a.allocate(1, Pool::ACTIVATIONS, "vae decode");
  ASSERT_FALSE(refused.ok());
  const Status& s = refused.status();
  EXPECT_EQ(s.code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(s.message().find("vae decode"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("activations"), std::string::npos) << s.message();
  ASSERT_TRUE(s.segments().has_value());
  const MemorySegments& m = *s.segments();
  EXPECT_EQ(m.requested, kA);  // the rounded request
  EXPECT_EQ(m.budget, 10 * kA);
  EXPECT_EQ(m.context, kA);
  EXPECT_EQ(m.weights, 4 * kA);
  EXPECT_EQ(m.activations, 3 * kA);
  EXPECT_EQ(m.other, 2 * kA);  // staging + other
  EXPECT_NE(s.str().find("weights 1.0 KiB"), std::string::npos) << s.str();

  EXPECT_EQ(a.stats(Pool::ACTIVATIONS).failures, 1u);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).failures, 0u);
  EXPECT_EQ(a.total().failures, 1u);
  EXPECT_EQ(a.total().current, 10 * kA);  // a refusal holds nothing

  // Freeing makes room again; raising the budget does too.
  fits->reset();
  EXPECT_TRUE(a.allocate(1, Pool::ACTIVATIONS, "retry").ok());
  a.set_budget(20 * kA);
  EXPECT_EQ(a.budget(), 20 * kA);
  Result<DeviceBuffer> after = a.allocate(9 * kA, Pool::ACTIVATIONS, "bigger");
  EXPECT_TRUE(after.ok()) << after.status().str();
}

TEST(Allocator, BudgetLoweredBelowCurrent) {
  std::unique_ptr<Backend> cpu = cpu_backend_create();
  Allocator a(*cpu);
  Result<DeviceBuffer> w = a.allocate(8 * kA, Pool::WEIGHTS, "w");
  ASSERT_TRUE(w.ok());
  a.set_budget(4 * kA);  // already over: every request is refused, none underflows
  Result<DeviceBuffer> r = a.allocate(1, Pool::OTHER, "tiny");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_EQ(a.stats(Pool::OTHER).failures, 1u);
  // A request larger than the whole budget is refused even when nothing is held.
  w->reset();
  EXPECT_FALSE(a.allocate(5 * kA, Pool::WEIGHTS, "too big").ok());
  EXPECT_TRUE(a.allocate(4 * kA, Pool::WEIGHTS, "exact").ok());
}

TEST(DeviceBuffer, MoveTransfersOwnership) {
  FakeBackend dev;
  Allocator a(dev);
  a.set_weight_cache_cap(0);  // every release reaches the device
  Result<DeviceBuffer> r1 = a.allocate(kA, Pool::WEIGHTS, "one");
  Result<DeviceBuffer> r2 = a.allocate(2 * kA, Pool::ACTIVATIONS, "two");
  ASSERT_TRUE(r1.ok() && r2.ok());
  DeviceBuffer b1 = std::move(r1).value();
  void* p1 = b1.data();

  DeviceBuffer moved(std::move(b1));  // move construction: no free, no alloc
  EXPECT_FALSE(b1);                   // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b1.data(), nullptr);      // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b1.size(), 0u);           // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.data(), p1);
  EXPECT_EQ(moved.size(), kA);
  EXPECT_EQ(dev.device_frees, 0);

  DeviceBuffer b2 = std::move(r2).value();
  moved = std::move(b2);  // move assignment frees what `moved` held (the weights buffer)
  EXPECT_EQ(dev.device_frees, 1);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).current, 0u);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).freed, kA);
  EXPECT_EQ(moved.pool(), Pool::ACTIVATIONS);
  EXPECT_EQ(moved.size(), 2 * kA);

  DeviceBuffer& self = moved;
  moved = std::move(self);  // self-move keeps the buffer
  EXPECT_TRUE(moved);
  EXPECT_EQ(dev.device_frees, 1);

  DeviceBuffer empty;
  EXPECT_FALSE(empty);
  moved = std::move(empty);  // assigning an empty buffer releases the old one
  EXPECT_FALSE(moved);
  EXPECT_EQ(dev.device_frees, 2);
  EXPECT_EQ(a.total().current, 0u);
  EXPECT_TRUE(dev.live.empty());
}

TEST(Allocator, DeviceRefusalIsCounted) {
  FakeBackend dev;
  Allocator a(dev);  // unlimited budget: only the device can say no
  Result<DeviceBuffer> ok = a.allocate(kA, Pool::WEIGHTS, "w");
  ASSERT_TRUE(ok.ok());
  dev.refuse = true;
  Result<DeviceBuffer> r = a.allocate(3 * kA, Pool::ACTIVATIONS, "unet arena");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::OUT_OF_MEMORY);
  EXPECT_NE(r.status().message().find("unet arena"), std::string::npos);
  EXPECT_NE(r.status().message().find("fake device is full"), std::string::npos)
      << r.status().message();
  ASSERT_TRUE(r.status().segments().has_value());
  EXPECT_EQ(r.status().segments()->requested, 3 * kA);
  EXPECT_EQ(r.status().segments()->weights, kA);
  EXPECT_EQ(r.status().segments()->budget, Allocator::kUnlimited);
  EXPECT_EQ(dev.device_allocs, 2);  // the request did reach the device

  PoolStats as = a.stats(Pool::ACTIVATIONS);
  EXPECT_EQ(as.failures, 1u);
  EXPECT_EQ(as.current, 0u);
  EXPECT_EQ(as.allocations, 0u);
  EXPECT_EQ(as.allocated, 0u);
  EXPECT_EQ(as.peak, 0u);  // the refused reservation left no peak behind
  EXPECT_EQ(a.total().peak, kA);
  EXPECT_EQ(a.total().failures, 1u);
  EXPECT_EQ(a.total().current, kA);

  // A budget refusal never reaches the device.
  dev.refuse = false;
  a.set_budget(2 * kA);
  EXPECT_FALSE(a.allocate(2 * kA, Pool::OTHER, "over").ok());
  EXPECT_EQ(dev.device_allocs, 2);
  EXPECT_EQ(a.total().failures, 2u);
  EXPECT_TRUE(a.allocate(kA, Pool::OTHER, "fits").ok());
  EXPECT_EQ(dev.device_allocs, 3);
}

// Note [budget commit]: many threads allocating at once against a budget that fits only some
// of them never hold more than the budget, even with a slow device call between check and use.
TEST(Allocator, ConcurrentAllocationsNeverOvershootTheBudget) {
  FakeBackend dev;
  dev.delay_us = 200;
  Allocator a(dev, 5 * kA);
  std::vector<std::thread> threads;
  std::mutex mu;
  int granted = 0, refused = 0;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        Result<DeviceBuffer> b = a.allocate(2 * kA, Pool::ACTIVATIONS, "racer");
        std::lock_guard<std::mutex> lock(mu);
        (b.ok() ? granted : refused) += 1;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_LE(a.total().peak, 5 * kA);
  EXPECT_EQ(a.total().current, 0u);
  EXPECT_GT(granted, 0);
  EXPECT_GT(refused, 0);  // with 8 racers and room for 2, some must have been refused
}

// Note [weight block cache]: a freed weight block waits for the next weight of its size; other
// pools and other sizes go to the device.
TEST(Allocator, FreedWeightBlocksAreReusedBySize) {
  FakeBackend dev;
  Allocator a(dev);
  void* p1 = nullptr;
  {
    Result<DeviceBuffer> w1 = a.allocate(4 * kA, Pool::WEIGHTS, "w1");
    Result<DeviceBuffer> act = a.allocate(4 * kA, Pool::ACTIVATIONS, "arena");
    ASSERT_TRUE(w1.ok() && act.ok());
    p1 = w1->data();
  }
  EXPECT_EQ(dev.device_allocs, 2);
  EXPECT_EQ(dev.device_frees, 1);  // the arena; the weight block stays cached
  PoolStats w = a.stats(Pool::WEIGHTS);
  EXPECT_EQ(w.current, 4 * kA);  // still held from the device, still in the budget
  EXPECT_EQ(w.cached, 4 * kA);
  EXPECT_EQ(a.total().current, 4 * kA);
  EXPECT_EQ(a.reclaimable_bytes(), 4 * kA);

  Result<DeviceBuffer> other = a.allocate(2 * kA, Pool::WEIGHTS, "another size");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(dev.device_allocs, 3);
  EXPECT_EQ(dev.device_syncs, 0);
  Result<DeviceBuffer> same = a.allocate(4 * kA - 7, Pool::WEIGHTS, "same size");  // rounds up
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->data(), p1);
  EXPECT_EQ(dev.device_allocs, 3);  // no device call
  EXPECT_EQ(dev.device_syncs, 1);   // but a wait for the block's last reader
  w = a.stats(Pool::WEIGHTS);
  EXPECT_EQ(w.cached, 0u);
  EXPECT_EQ(w.reused, 1u);
  EXPECT_EQ(w.current, 6 * kA);
  EXPECT_EQ(a.total().peak, 8 * kA);

  // Not an activation's: the cache serves weights only.
  other->reset();
  Result<DeviceBuffer> arena = a.allocate(2 * kA, Pool::ACTIVATIONS, "arena");
  ASSERT_TRUE(arena.ok());
  EXPECT_EQ(dev.device_allocs, 4);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, 2 * kA);
  // Given back on request, and when the allocator goes.
  EXPECT_EQ(a.reclaim(1), 2 * kA);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).current, 4 * kA);
  EXPECT_EQ(dev.device_frees, 2);
}

// A block goes out again only after a device-wide wait that began after it was cached; one wait
// covers all blocks cached before it.
TEST(Allocator, OneDeviceWaitCoversEveryBlockCachedBeforeIt) {
  FakeBackend dev;
  Allocator a(dev);
  {
    Result<DeviceBuffer> x = a.allocate(kA, Pool::WEIGHTS, "x");
    Result<DeviceBuffer> y = a.allocate(kA, Pool::WEIGHTS, "y");
    ASSERT_TRUE(x.ok() && y.ok());
  }
  Result<DeviceBuffer> x2 = a.allocate(kA, Pool::WEIGHTS, "x2");
  Result<DeviceBuffer> y2 = a.allocate(kA, Pool::WEIGHTS, "y2");
  ASSERT_TRUE(x2.ok() && y2.ok());
  EXPECT_EQ(dev.device_allocs, 2);
  EXPECT_EQ(dev.device_syncs, 1);
  x2->reset();  // cached after that wait: needs a new one
  Result<DeviceBuffer> x3 = a.allocate(kA, Pool::WEIGHTS, "x3");
  ASSERT_TRUE(x3.ok());
  EXPECT_EQ(dev.device_syncs, 2);
  EXPECT_EQ(dev.device_allocs, 2);
}

// A failed device-wide wait fails the allocation with the device's error; the block stays cached.
TEST(Allocator, FailedWaitBeforeReuseKeepsTheBlockCached) {
  FakeBackend dev;
  Allocator a(dev);
  { ASSERT_TRUE(a.allocate(kA, Pool::WEIGHTS, "w").ok()); }
  dev.sync_fails = true;
  Result<DeviceBuffer> r = a.allocate(kA, Pool::WEIGHTS, "weight x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::INTERNAL);
  EXPECT_NE(r.status().message().find("weight x"), std::string::npos) << r.status().str();
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, kA);
  dev.sync_fails = false;
  EXPECT_TRUE(a.allocate(kA, Pool::WEIGHTS, "weight x").ok());
  EXPECT_EQ(dev.device_allocs, 1);
}

// Cached blocks are the first room an allocation that does not fit the budget gets, and the
// cache never holds more than its cap.
TEST(Allocator, CachedBlocksYieldToTheBudgetAndTheCap) {
  FakeBackend dev;
  Allocator a(dev, 8 * kA);
  { Result<DeviceBuffer> w = a.allocate(6 * kA, Pool::WEIGHTS, "w"); ASSERT_TRUE(w.ok()); }
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, 6 * kA);
  Result<DeviceBuffer> arena = a.allocate(4 * kA, Pool::ACTIVATIONS, "arena");
  ASSERT_TRUE(arena.ok()) << arena.status().str();
  EXPECT_EQ(a.stats(Pool::WEIGHTS).current, 0u);
  EXPECT_EQ(dev.device_frees, 1);
  EXPECT_LE(a.total().peak, 8 * kA);
  EXPECT_EQ(a.total().failures, 1u);  // the first try, before the cache gave way

  arena->reset();
  a.set_weight_cache_cap(3 * kA);
  {
    Result<DeviceBuffer> big = a.allocate(4 * kA, Pool::WEIGHTS, "over the cap");
    Result<DeviceBuffer> small = a.allocate(2 * kA, Pool::WEIGHTS, "within it");
    ASSERT_TRUE(big.ok() && small.ok());
  }
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, 2 * kA);
  EXPECT_EQ(dev.device_frees, 3);  // the arena and the block over the cap
  a.set_weight_cache_cap(0);  // lowering the cap gives back what is above it
  EXPECT_EQ(a.stats(Pool::WEIGHTS).current, 0u);
  EXPECT_EQ(dev.device_frees, 4);
}

TEST(Allocator, PoolNames) {
  std::set<std::string> names;
  for (int p = 0; p < int(Pool::COUNT_); ++p) names.insert(pool_name(Pool(p)));
  EXPECT_EQ(names.size(), size_t(Pool::COUNT_));
  EXPECT_STREQ(pool_name(Pool::ACTIVATIONS), "activations");
}

}  // namespace
}  // namespace hr
