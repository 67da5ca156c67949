// The budget from the flags (Note [budget flags]) and sizes with units.
#include "memory/budget.h"

#include <gtest/gtest.h>

#include "core/bytes.h"

#include <unistd.h>

namespace hr {
namespace {

DeviceInfo gpu(uint64_t total, uint64_t free) {
  DeviceInfo d;
  d.name = "test gpu";
  d.kind = "cuda";
  d.memory_total = total;
  d.memory_free = free;
  return d;
}

constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

TEST(BytesParse, UnitsAndErrors) {
  EXPECT_EQ(*bytes_parse("6GiB"), 6 * GiB);
  EXPECT_EQ(*bytes_parse("6144MiB"), 6 * GiB);
  EXPECT_EQ(*bytes_parse("6g"), 6 * GiB);
  EXPECT_EQ(*bytes_parse("1.5 GB"), 3 * GiB / 2);
  EXPECT_EQ(*bytes_parse("40MiB"), 40 * MiB);
  EXPECT_EQ(*bytes_parse("512k"), 512 * 1024u);
  EXPECT_EQ(*bytes_parse("1073741824"), GiB);
  for (const char* bad : {"", "GiB", "6 parsecs", "-1GiB", "1e999", "6GiBs"}) {
    auto r = bytes_parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(bytes_parse("6 parsecs").status().message().find("6 parsecs"), std::string::npos);
  EXPECT_EQ(bytes_format(40 * MiB), "40.0 MiB");
}

TEST(MemoryPolicy, ExplicitBudgetSizeAndPercent) {
  MemoryArgs a;
  a.vram_budget = "4GiB";
  auto p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->budget, 4 * GiB);
  EXPECT_EQ(p->mode, ResidencyMode::AUTO);
  EXPECT_EQ(p->weights_cap, UINT64_MAX);
  EXPECT_NE(p->how.find("--vram-budget 4GiB"), std::string::npos);
  a.vram_budget = "40%";
  p = memory_policy_resolve(a, gpu(100 * GiB, 10 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->budget, 40 * GiB);  // of the total, as asked, whatever is free
  for (const char* bad : {"0%", "101%", "x%", "0"}) {
    a.vram_budget = bad;
    EXPECT_FALSE(memory_policy_resolve(a, gpu(100 * GiB, 10 * GiB)).ok()) << bad;
  }
}

TEST(MemoryPolicy, DefaultIsFreeLessReserve) {
  MemoryArgs a;
  auto p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->budget, 8 * GiB - kDefaultReserveVRAM);
  a.reserve_vram = 2.0;
  p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->budget, 6 * GiB);
  EXPECT_NE(p->how.find("reserved"), std::string::npos);
  a.reserve_vram = 9.0;  // more than is free: nothing left
  EXPECT_FALSE(memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB)).ok());
  a.reserve_vram = -1.0;
  EXPECT_FALSE(memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB)).ok());
}

TEST(MemoryPolicy, ComfyUIFlags) {
  MemoryArgs a;
  a.vram_budget = "8GiB";
  a.lowvram = true;
  auto p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->mode, ResidencyMode::LOW);
  EXPECT_EQ(p->weights_cap, 4 * GiB);
  a.lowvram = false;
  a.novram = true;
  p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->weights_cap, 0u);
  a.novram = false;
  a.gpu_only = true;
  p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->mode, ResidencyMode::GPU_ONLY);
  EXPECT_STREQ(residency_mode_name(p->mode), "gpu-only");
  a.highvram = true;  // two of them
  auto both = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exclude"), std::string::npos);
}

// ComfyUI's fp8 storage flags (Note [fp8 at load]): one dtype per component.
TEST(MemoryPolicy, Fp8StorageFlags) {
  MemoryArgs a;
  auto p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->unet_weights || p->text_encoder_weights);
  a.fp8_e4m3fn_unet = true;
  a.fp8_e5m2_text_enc = true;
  p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->unet_weights, DType::F8_E4M3);
  EXPECT_EQ(p->text_encoder_weights, DType::F8_E5M2);
  a.fp8_e5m2_unet = true;
  p = memory_policy_resolve(a, gpu(140 * GiB, 139 * GiB));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--fp8_e5m2-unet"), std::string::npos);
}

}  // namespace
}  // namespace hr

namespace hr {
namespace {

// Note [pinned budget]: half the RAM by default, a size or a percentage of RAM when given.
TEST(MemoryPolicy, PinnedBudgetDefaultsToHalfTheRam) {
  const uint64_t GiB = 1ull << 30;
  const uint64_t ram = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
  MemoryArgs a;
  auto p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_TRUE(p.ok()) << p.status().str();
  EXPECT_EQ(p->pinned_budget, ram / 2);
  a.pinned_budget = "3GiB";
  p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pinned_budget, 3 * GiB);
  a.pinned_budget = "25%";
  p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pinned_budget, ram / 4);
  a.pinned_budget = "lots";
  p = memory_policy_resolve(a, gpu(140 * GiB, 8 * GiB));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--pinned-budget"), std::string::npos) << p.status().str();
}

}  // namespace
}  // namespace hr
