// The named properties of Note [device properties] (backend/device.h): what the CPU backend
// answers, that the planning backend answers as its real backend does, and that `--dtype auto`
// follows compute_dtype_default.
#include <gtest/gtest.h>

#include "async_sim_backend.h"
#include "backend/backend.h"
#include "backend/backend_open.h"
#include "backend/plan/plan_backend.h"

namespace hr {
namespace {

TEST(DeviceProperties, CpuBackendIsTheHost) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  EXPECT_TRUE(cpu->memory_is_host());
  EXPECT_EQ(cpu->torch_generator(), TorchGenerator::CPU_MT19937);
  EXPECT_EQ(cpu->compute_dtype_default(), DType::F32);
  EXPECT_FALSE(cpu->prefers_stacked_weights());
  EXPECT_FALSE(cpu->prefers_channels_last(DType::F32));
  EXPECT_FALSE(cpu->capture_supported());
}

// A plan must make the decisions the run makes, so the planning backend answers every property
// as its real backend does (here one that answers as a GPU, and the CPU).
TEST(DeviceProperties, PlanBackendAnswersAsItsRealBackend) {
  AsyncSimBackend gpu_like(SimOrder::ROUND_ROBIN);
  gpu_like.set_discrete(true);
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  for (Backend* real : {static_cast<Backend*>(&gpu_like), cpu.get()}) {
    std::unique_ptr<Backend> plan = plan_backend_create(*real);
    EXPECT_EQ(plan->memory_is_host(), real->memory_is_host());
    EXPECT_EQ(plan->torch_generator(), real->torch_generator());
    EXPECT_EQ(plan->compute_dtype_default(), real->compute_dtype_default());
    EXPECT_EQ(plan->prefers_stacked_weights(), real->prefers_stacked_weights());
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      EXPECT_EQ(plan->prefers_channels_last(t), real->prefers_channels_last(t));
    EXPECT_EQ(plan->info().name, real->info().name);
  }
}

TEST(DeviceProperties, DtypeAutoIsTheComputeDefault) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  Result<DType> d = compute_dtype_pick("auto", *cpu);
  ASSERT_TRUE(d.ok()) << d.status().str();
  EXPECT_EQ(*d, cpu->compute_dtype_default());
  EXPECT_EQ(compute_dtype_pick("f16", *cpu).status().code(), ErrorCode::UNSUPPORTED);
}

// Code that needs one concern takes that interface: a Backend is each of them.
TEST(DeviceProperties, BackendIsEachInterface) {
  std::unique_ptr<Backend> cpu = cpu_backend_create(1);
  const BackendDevice& device = *cpu;
  BackendStreams& streams = *cpu;
  const BackendKernels& kernels = *cpu;
  const BackendCapture& capture = *cpu;
  EXPECT_EQ(device.info().kind, "cpu");
  EXPECT_EQ(streams.default_stream(), cpu->default_stream());
  EXPECT_TRUE(kernels.op_supported(OpKind::ADD, DType::F32));
  EXPECT_FALSE(capture.capture_supported());
}

}  // namespace
}  // namespace hr
