// Tests for the driver-level lens: the host lens reads plausible /proc figures, a CUDA backend
// without NVML falls back to cudaMemGetInfo and says why, and opening never crashes.
#include "memory/driver_lens.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"

namespace hr {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A device that calls itself "cuda": the lens takes a BackendDevice and reads only info() (what
// cudaMemGetInfo answers through on the real backend); its memory is refused.
class FakeCudaDevice final : public BackendDevice {
 public:
  DeviceInfo device{"", "cuda", 0, 8 * kGiB, 6 * kGiB};

  DeviceInfo info() const override { return device; }
  bool memory_is_host() const override { return false; }
  Result<void*> device_alloc(size_t) override { return refused(); }
  void device_free(void*) override {}
  Result<void*> host_alloc_pinned(size_t) override { return refused(); }
  void host_free_pinned(void*) override {}

 private:
  static Status refused() { return Status(ErrorCode::UNSUPPORTED, "fake device"); }
};

TEST(DriverLens, HostLensReadsPlausibleRssAndMemAvailable) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  std::unique_ptr<DriverLens> lens = DriverLens::open(*cpu);
  EXPECT_EQ(lens->source(), "host (/proc)");
  DriverSample before = lens->sample();
  EXPECT_EQ(before.kind, DriverSource::HOST_PROC);
  EXPECT_EQ(before.source, "host (/proc)");
  ASSERT_TRUE(before.per_process);
  EXPECT_GT(before.total, 64 * kMiB);
  EXPECT_LE(before.used, before.total);
  EXPECT_GT(before.this_process, 1 * kMiB);  // a test binary's RSS
  EXPECT_LT(before.this_process, before.total);
  if (before.used >= before.this_process) {
    EXPECT_EQ(before.other_processes, before.used - before.this_process);
  }

  // Touching 64 MiB shows up in this process's RSS.
  std::vector<char> block(64 * kMiB);
  std::memset(block.data(), 1, block.size());
  DriverSample after = lens->sample();
  EXPECT_GE(after.this_process, before.this_process + 48 * kMiB);
  EXPECT_EQ(block[block.size() / 2], 1);
}

TEST(DriverLens, CudaWithoutNvmlFallsBackToCudaMemGetInfoAndSaysWhy) {
  FakeCudaDevice gpu;
  std::unique_ptr<DriverLens> lens = DriverLens::open(gpu, "libhr-no-such-nvml.so.1");
  DriverSample s = lens->sample();
  EXPECT_EQ(s.kind, DriverSource::CUDA_MEM_GET_INFO);
  EXPECT_EQ(s.source.rfind("cudaMemGetInfo (NVML not available: ", 0), 0u) << s.source;
  EXPECT_NE(s.source.find("libhr-no-such-nvml.so.1"), std::string::npos) << s.source;
  EXPECT_EQ(s.total, 8 * kGiB);
  EXPECT_EQ(s.used, 2 * kGiB);
  EXPECT_FALSE(s.per_process);
  EXPECT_EQ(lens->source(), s.source);

  gpu.device.memory_free = 1 * kGiB;  // another process took memory
  EXPECT_EQ(lens->sample().used, 7 * kGiB);
}

// With the real library name: NVML where this machine has it (then device 0's figures),
// otherwise the fallback, saying why. Either way nothing crashes.
TEST(DriverLens, CudaWithTheRealLibraryNameSaysWhichSourceItUsed) {
  FakeCudaDevice gpu;  // empty name: no name check, NVML device 0
  std::unique_ptr<DriverLens> lens = DriverLens::open(gpu);
  DriverSample s = lens->sample();
  if (s.kind == DriverSource::NVML) {
    EXPECT_EQ(s.source, "nvml");
    EXPECT_GT(s.total, 0u);
    EXPECT_LE(s.used, s.total);
    // Other tests of this binary may have made a CUDA context (then NVML lists this process).
    if (s.per_process) {
      EXPECT_LE(s.this_process, s.used);
    }
  } else {
    EXPECT_EQ(s.kind, DriverSource::CUDA_MEM_GET_INFO);
    EXPECT_EQ(s.source.rfind("cudaMemGetInfo (NVML not available: ", 0), 0u) << s.source;
  }
  std::printf("driver lens on this machine: %s\n", s.source.c_str());
}

TEST(DriverLens, NvmlNamingAnotherDeviceFallsBack) {
  FakeCudaDevice gpu;
  gpu.device.name = "headroom fake GPU";
  DriverSample s = DriverLens::open(gpu)->sample();
  EXPECT_EQ(s.kind, DriverSource::CUDA_MEM_GET_INFO);
  EXPECT_EQ(s.source.rfind("cudaMemGetInfo (NVML not available: ", 0), 0u) << s.source;
}

}  // namespace
}  // namespace hr
