// Note [profile probes], Note [device profile cache]: measuring a profile on the CPU backend,
// and the cache file's round trip, its corruption and its name.
#include "memory/device_profile_cache.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "memory/device_measure.h"
#include "memory/residency_clock.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

class DeviceProfileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hr_profile_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path() const { return (dir_ / "headroom" / "device-profile-cpu.json").string(); }
  fs::path dir_;
};

bool rate(double x) { return std::isfinite(x) && x > 0; }

DeviceProfile known() {
  DeviceProfile p;
  p.device = "NVIDIA GeForce RTX 3060";
  p.gemm_flops_per_s = 25.3e12;
  p.attention_flops_per_s = 25.3e12 * kAttentionShare;
  p.memory_bytes_per_s = 361.7e9;
  p.node_s = 3.9e-6;
  p.copy_bytes_per_s = 12.1e9;
  p.measured = true;
  return p;
}

TEST(DeviceMeasure, CpuRatesArePositiveAndFinite) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  Result<DeviceProfile> p = device_profile_measure(*cpu);
  ASSERT_TRUE(p.ok()) << p.status().str();
  std::printf("measured %s\n", device_profile_describe(*p).c_str());
  EXPECT_EQ(p->device, cpu->info().name);
  EXPECT_TRUE(p->measured);
  EXPECT_TRUE(rate(p->gemm_flops_per_s));
  EXPECT_TRUE(rate(p->attention_flops_per_s));
  EXPECT_TRUE(rate(p->memory_bytes_per_s));
  EXPECT_TRUE(rate(p->copy_bytes_per_s));
  EXPECT_TRUE(std::isfinite(p->node_s) && p->node_s >= 0);
  EXPECT_LT(p->node_s, 1e-2);  // a 1 KiB copy is not 10 ms
  EXPECT_LT(p->gemm_flops_per_s, 1e15);  // the timing was not lost
  EXPECT_TRUE(p->valid());
}

TEST_F(DeviceProfileCache, WrittenProfileReadsBackEqual) {
  ASSERT_TRUE(device_profile_write(path(), known()).ok());
  Result<DeviceProfile> back = device_profile_read(path());
  ASSERT_TRUE(back.ok()) << back.status().str();
  EXPECT_EQ(*back, known());  // every double exactly
  EXPECT_FALSE(fs::exists(path() + ".tmp." + std::to_string(::getpid())));
}

TEST_F(DeviceProfileCache, AbsentIsNotFoundAndCorruptIsCorrupt) {
  EXPECT_EQ(device_profile_read(path()).status().code(), ErrorCode::NOT_FOUND);
  fs::create_directories(fs::path(path()).parent_path());
  for (const char* text : {"{\"version\": 1, \"device\": \"cpu\"", "[]",
                           "{\"version\": 1, \"device\": \"x\", \"measured\": true}",
                           "{\"version\": 2}"}) {
    std::ofstream(path()) << text;
    EXPECT_EQ(device_profile_read(path()).status().code(), ErrorCode::CORRUPT) << text;
  }
  DeviceProfile zero = known();
  zero.copy_bytes_per_s = 0;
  ASSERT_TRUE(device_profile_write(path(), zero).ok());
  EXPECT_EQ(device_profile_read(path()).status().code(), ErrorCode::CORRUPT);
}

TEST_F(DeviceProfileCache, MeasuredOnceThenRead) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  DeviceProfile first = device_profile_cached(*cpu, path());
  EXPECT_TRUE(first.measured);
  ASSERT_TRUE(fs::exists(path()));
  // A file that says something else of this device is what the next process starts with.
  DeviceProfile marked = first;
  marked.copy_bytes_per_s = 1234.5;
  ASSERT_TRUE(device_profile_write(path(), marked).ok());
  EXPECT_EQ(device_profile_cached(*cpu, path()), marked);
}

TEST_F(DeviceProfileCache, CorruptOrForeignFileIsMeasuredOver) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  fs::create_directories(fs::path(path()).parent_path());
  std::ofstream(path()) << "{ not json";
  DeviceProfile p = device_profile_cached(*cpu, path());
  EXPECT_TRUE(p.measured);
  EXPECT_EQ(p.device, cpu->info().name);
  Result<DeviceProfile> rewritten = device_profile_read(path());
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().str();
  EXPECT_EQ(*rewritten, p);
  // Another device's profile under this name is not taken either.
  ASSERT_TRUE(device_profile_write(path(), known()).ok());
  DeviceProfile q = device_profile_cached(*cpu, path());
  EXPECT_EQ(q.device, cpu->info().name);
  EXPECT_NE(q, known());
}

TEST_F(DeviceProfileCache, UnwritableCacheStillMeasures) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";  // a file where the folder would be
  DeviceProfile p = device_profile_cached(*cpu, (dir_ / "file" / "profile.json").string());
  EXPECT_TRUE(p.measured);
}

TEST(DeviceProfilePath, FollowsXdgAndSanitizesTheName) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "", home = std::getenv("HOME") ? std::getenv("HOME") : "";
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(device_profile_path("NVIDIA GeForce RTX 3060"),
            "/tmp/xdg/headroom/device-profile-nvidia-geforce-rtx-3060.json");
  EXPECT_EQ(device_profile_path("cpu (16 threads)"),
            "/tmp/xdg/headroom/device-profile-cpu-16-threads.json");
  EXPECT_EQ(device_profile_path("../.."), "/tmp/xdg/headroom/device-profile-device.json");
  ::setenv("XDG_CACHE_HOME", "", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(device_profile_path("NVIDIA H200"), "/home/u/.cache/headroom/device-profile-nvidia-h200.json");
  ::setenv("HOME", home.c_str(), 1);
  if (old)
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}

TEST(DeviceProfileLoad, HostVisibleBackendsPlanWithTheCpuProfile) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(2);
  EXPECT_EQ(device_profile_load(*cpu), device_profile_default(true));
}

}  // namespace
}  // namespace hr
