// Tests of the eviction policy (memory/eviction.h): the per-copy order, the order over holders
// (least recently used first, holders in use never asked), the steps an allocation that does not
// fit takes, and that an allocator without the policy frees only its own cached blocks.
#include "memory/eviction.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "backend/allocator.h"
#include "fake_backend.h"

namespace hr {
namespace {

constexpr size_t kA = kDeviceAlignment;

// Device memory from malloc; counts calls.
class MallocBackend final : public test::UnsupportedBackend {
 public:
  Result<void*> device_alloc(size_t bytes) override {
    ++allocs;
    return std::malloc(bytes);
  }
  void device_free(void* p) override {
    ++frees;
    std::free(p);
  }
  Status device_sync() override { return Status(); }
  int allocs = 0, frees = 0;
};

// A holder of whole blocks that records what it was asked.
class BlockHolder final : public Reclaimable {
 public:
  BlockHolder(Allocator& a, uint64_t last_use) : a_(a), last_use_(last_use) {
    a_.reclaimable_add(this);
  }
  ~BlockHolder() override { a_.reclaimable_remove(this); }
  BlockHolder(const BlockHolder&) = delete;
  BlockHolder& operator=(const BlockHolder&) = delete;

  void hold(size_t bytes, Pool pool) {
    Result<DeviceBuffer> b = a_.allocate(bytes, pool, "held");
    ASSERT_TRUE(b.ok()) << b.status().str();
    blocks_.push_back(std::move(b).value());
  }
  uint64_t reclaim(uint64_t bytes) override {
    ++asked;
    uint64_t freed = 0;
    while (freed < bytes && !blocks_.empty()) {
      freed += blocks_.back().size();
      blocks_.pop_back();
    }
    return freed;
  }
  uint64_t reclaim_block(uint64_t bytes) override {
    ++asked_block;
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->size() == bytes) {
        blocks_.erase(it);
        return bytes;
      }
    return 0;
  }
  uint64_t last_use() const override { return last_use_; }
  bool in_use() const override { return busy; }
  uint64_t reclaimable_bytes() const override {
    uint64_t n = 0;
    for (const DeviceBuffer& b : blocks_) n += b.size();
    return n;
  }
  size_t held() const { return blocks_.size(); }

  bool busy = false;
  int asked = 0, asked_block = 0;

 private:
  Allocator& a_;
  uint64_t last_use_;
  std::vector<DeviceBuffer> blocks_;
};

TEST(EvictionOrder, LeastRecentlyUsedFirstUntilTheBytesAreFound) {
  std::vector<EvictionCandidate> copies = {
      {"c", 30, 100}, {"a", 10, 100}, {"b", 10, 100}, {"d", 20, 100}};
  EXPECT_EQ(eviction_order(copies, 150), (std::vector<std::string>{"a", "b"}));  // ties by key
  EXPECT_EQ(eviction_order(copies, 201), (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_EQ(eviction_order(copies, UINT64_MAX).size(), 4u);
  EXPECT_TRUE(eviction_order(copies, 0).empty());
}

TEST(EvictionBlock, OldestFirstListedAmongEquals) {
  std::vector<EvictionCandidate> copies = {{"x", 5, kA}, {"y", 3, kA}, {"z", 3, kA}};
  ASSERT_NE(eviction_block(copies), nullptr);
  EXPECT_EQ(eviction_block(copies)->key, "y");
  EXPECT_EQ(eviction_block({}), nullptr);
}

// Note [eviction policy] step 3: the least recently used idle holder goes first; one in use is
// never asked.
TEST(EvictionPolicy, IdleHoldersLeastRecentlyUsedFirst) {
  MallocBackend dev;
  Allocator a(dev, 4 * kA, eviction_policy());
  BlockHolder old_one(a, 1), newer(a, 2), busy(a, 0);
  old_one.hold(kA, Pool::ACTIVATIONS);
  newer.hold(kA, Pool::ACTIVATIONS);
  busy.hold(kA, Pool::ACTIVATIONS);
  busy.busy = true;
  Result<DeviceBuffer> b = a.allocate(2 * kA, Pool::ACTIVATIONS, "arena");
  ASSERT_TRUE(b.ok()) << b.status().str();
  EXPECT_EQ(old_one.held(), 0u);
  EXPECT_EQ(newer.held(), 1u) << "one block was enough";
  EXPECT_EQ(busy.asked, 0);
  EXPECT_EQ(a.reclaimed(), kA);
  // What could go now: the idle holders' blocks, not the busy one's nor `keep`'s.
  EXPECT_EQ(a.reclaimable_bytes(), kA);
  EXPECT_EQ(a.reclaimable_bytes(&newer), 0u);
}

// Step 1: a weight that does not fit takes an idle holder's block of its size through the cache,
// before any other memory goes.
TEST(EvictionPolicy, AWeightTakesAnIdleHoldersBlockOfItsSize) {
  MallocBackend dev;
  Allocator a(dev, 3 * kA, eviction_policy());
  BlockHolder h(a, 1);
  h.hold(kA, Pool::WEIGHTS);
  h.hold(2 * kA, Pool::WEIGHTS);
  const int allocs = dev.allocs;
  Result<DeviceBuffer> w = a.allocate(2 * kA, Pool::WEIGHTS, "weight");
  ASSERT_TRUE(w.ok()) << w.status().str();
  EXPECT_EQ(h.asked_block, 1);
  EXPECT_EQ(h.asked, 0);
  EXPECT_EQ(h.held(), 1u) << "the block of the other size stays";
  EXPECT_EQ(dev.allocs, allocs) << "no device call: the block moved through the cache";
}

// After a run, weights above the cap go and the cache empties (--lowvram).
TEST(EvictionPolicy, TrimWeightsAboveTheCap) {
  MallocBackend dev;
  Allocator a(dev, Allocator::kUnlimited, eviction_policy());
  BlockHolder h(a, 1);
  for (int i = 0; i < 3; ++i) h.hold(kA, Pool::WEIGHTS);
  EXPECT_EQ(a.trim_weights(), 0u) << "no cap";
  a.set_weights_cap(kA);
  EXPECT_EQ(a.trim_weights(), 2 * kA);
  EXPECT_EQ(h.held(), 1u);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, 0u);
  EXPECT_EQ(a.stats(Pool::WEIGHTS).current, kA);
}

// The mechanism alone (no policy): holders are never asked; the allocator's own cached blocks
// still make room.
TEST(EvictionPolicy, WithoutItOnlyTheCacheGoes) {
  MallocBackend dev;
  Allocator a(dev, 2 * kA);
  BlockHolder h(a, 1);
  h.hold(kA, Pool::ACTIVATIONS);
  { Result<DeviceBuffer> w = a.allocate(kA, Pool::WEIGHTS, "cached when freed"); }
  EXPECT_EQ(a.stats(Pool::WEIGHTS).cached, kA);
  EXPECT_EQ(a.reclaimable_bytes(), kA);
  Result<DeviceBuffer> b = a.allocate(kA, Pool::ACTIVATIONS, "fits after the cache");
  ASSERT_TRUE(b.ok()) << b.status().str();
  Result<DeviceBuffer> c = a.allocate(kA, Pool::ACTIVATIONS, "does not fit");
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(h.asked, 0);
  EXPECT_EQ(h.asked_block, 0);
  EXPECT_EQ(a.reclaim(UINT64_MAX), 0u);
  EXPECT_EQ(a.trim_weights(), 0u);
}

}  // namespace
}  // namespace hr
