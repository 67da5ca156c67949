// Kernel experiments kept beside the product (STYLE.md, "Kernel experiments live beside the
// product"): each measured no gain (or lost) against the production kernel and left
// src/backend/cuda; its benchmark in bench/dev compares it with the production kernel in one run.
// Each entry names the PERF_NOTES.md version that measured it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_common.h"

namespace hr::dev {

// attention_short.cu (Note [short-key attention]; PERF_NOTES v10, v11): the persistent kernel for
// Nk <= 80, `warps` 2 or 4 (tiles of 32 or 64 queries). Takes what
// cuda::attention_strided_supported takes, with 1 <= Nk <= 80. Was HEADROOM_ATTN_SHORT=1.
bool attention_short_supported(const cuda::AttentionArgs& a);
cudaError_t attention_short(const cuda::AttentionArgs& a, cudaStream_t s, int warps);

// group_norm_v1.cu (Note [vectorised norms] in src/backend/cuda/cuda_norm.cu; PERF_NOTES v6):
// the first channels-last group norm (gn_partial with column tiles of 256 packs, gn_finalize with
// 64-bit indices at 256 threads, gn_apply_kernel), which the vectorised three kernels and the
// single-pass kernel replaced. group_norm_nhwc_v1 needs group_norm_nhwc_plan_v1's workspace.
cuda::GroupNormNhwcPlan group_norm_nhwc_plan_v1(int64_t n, int64_t s, int64_t c, int groups);
cudaError_t group_norm_nhwc_v1(DType t, const void* x, const void* gamma, const void* beta,
                               void* y, int64_t n, int64_t s, int64_t c, int groups, float eps,
                               bool silu, void* workspace, cudaStream_t st);

}  // namespace hr::dev
