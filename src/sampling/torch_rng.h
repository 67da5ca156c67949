// Torch-compatible random normal streams: PyTorch's CPU generator (mt19937) and CUDA
// generator (Philox4x32-10, computed on the host), so a seed gives ComfyUI's noise on any backend.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>

#include "core/shape.h"
#include "core/tensor.h"

namespace hr {

// torch.Generator('cpu'): mt19937 seeded with the low 32 bits of the seed (torch.manual_seed).
class TorchCPUGenerator {
 public:
  explicit TorchCPUGenerator(uint64_t seed) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint32_t random() { return static_cast<uint32_t>(engine_()); }
  // Two draws, the first one the high word (CPUGeneratorImpl::random64).
  uint64_t random64();
  // torch.randn(n) (float32) into out; see Note [torch cpu randn].
  void randn(std::span<float> out);

 private:
  double normal_double();  // at::normal_distribution<double>, with its cached second value
  std::mt19937 engine_;
  std::optional<double> next_double_normal_;
};

// The device properties torch's CUDA launch configuration depends on.
struct CUDAGridLimits {
  uint32_t multiprocessor_count = 132;  // H200 (the golden noise was made on one)
  uint32_t max_threads_per_multiprocessor = 2048;
};

// torch.Generator('cuda'): Philox4x32-10 keyed by the 64-bit seed, with torch's per-call
// counter offset; see Note [torch cuda randn].
class TorchCUDAGenerator {
 public:
  explicit TorchCUDAGenerator(uint64_t seed, CUDAGridLimits limits = {})
      : seed_(seed), limits_(limits) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void randn(std::span<float> out);
  uint64_t offset() const { return offset_; }

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;  // philox_offset_per_thread
  CUDAGridLimits limits_;
};

enum class NoiseDevice : uint8_t { CPU, CUDA };

// Successive torch.randn(shape, generator=g) draws from one generator: ComfyUI's
// default_noise_sampler (ancestral samplers) and prepare_noise.
class NoiseGenerator {
 public:
  explicit NoiseGenerator(uint64_t seed, NoiseDevice device = NoiseDevice::CPU,
                          CUDAGridLimits limits = {})
      : device_(device), cpu_(seed), cuda_(seed, limits) {}
  HostTensor draw(const Shape& shape);
  void draw_into(std::span<float> out);
  NoiseDevice device() const { return device_; }

 private:
  NoiseDevice device_;
  TorchCPUGenerator cpu_;
  TorchCUDAGenerator cuda_;
};

// torch.randn(shape, generator=torch.manual_seed(seed)) on the CPU.
HostTensor randn_cpu(uint64_t seed, const Shape& shape);
// torch.randn(shape, generator=torch.Generator('cuda').manual_seed(seed), device='cuda').
HostTensor randn_cuda(uint64_t seed, const Shape& shape, CUDAGridLimits limits = {});

// ComfyUI comfy/sample.py prepare_noise: one CPU generator seeded with `seed`; without
// batch_index one draw for the whole latent shape; with batch_index (one per batch entry),
// draws of shape [1, ...] for indices 0..max(batch_index), keeping the ones asked for.
HostTensor prepare_noise(const Shape& latent_shape, uint64_t seed,
                         std::span<const int64_t> batch_index = {});

}  // namespace hr
