// Helpers shared by the CUDA micro-benchmarks (bench_attention, bench_norms): a check that
// exits with the failing call, event timing of a launch sequence, and f16/bf16 bits.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/dtype.h"

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace hr::bench {

// f (rounded to nearest) as the bits of an f16 or bf16, and back.
inline uint16_t half_bits(float f, DType t) {
  uint16_t x;
  if (t == DType::F16) {
    const __half h = __float2half_rn(f);
    x = *reinterpret_cast<const uint16_t*>(&h);
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(f);
    x = *reinterpret_cast<const uint16_t*>(&h);
  }
  return x;
}

inline float half_value(uint16_t x, DType t) {
  if (t == DType::F16) return __half2float(*reinterpret_cast<const __half*>(&x));
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&x));
}

// Mean milliseconds of fn() over enough launches for ~40 ms (at most max_reps), after warm-up
// launches, timed with events on the default stream.
template <typename Fn>
double time_ms(Fn&& fn, int max_reps = 2000) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) fn();
  CHECK_CUDA(cudaEventRecord(e0));
  fn();
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float one = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&one, e0, e1));
  const int reps = std::clamp(int(40.0 / std::max(one, 1e-3f)), 5, max_reps);
  CHECK_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) fn();
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return double(ms) / reps;
}

}  // namespace hr::bench
