// Channels-last group norm's choice of kernels (Note [single-pass group norm] in cuda_norm.cu),
// for tests and bench_norms: the backend calls group_norm_nhwc (cuda_common.h), which is AUTO.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_common.h"

namespace hr::cuda {

enum class GroupNormNhwcKernels : uint8_t {
  AUTO,         // SINGLE_PASS where a configuration fits (unless HEADROOM_GN_CLUSTER=0), else
                // THREE_PASS
  THREE_PASS,   // gn_partial, gn_finalize, gn_apply_rows: group_norm_nhwc_plan's workspace
  SINGLE_PASS,  // one cluster launch, no workspace; cudaErrorNotSupported where none fits
};
cudaError_t group_norm_nhwc_kernels(GroupNormNhwcKernels k, DType t, const void* x,
                                    const void* gamma, const void* beta, void* y, int64_t n,
                                    int64_t s, int64_t c, int groups, float eps, bool silu,
                                    void* workspace, cudaStream_t st);
// The single-pass configuration of [n, s, c] on the current device (16-byte aligned tensors),
// e.g. "tile 40 ch, 8 blocks/cluster x 448 threads x 24 packs", or "" where it takes the three
// kernels.
std::string group_norm_nhwc_single_pass_config(DType t, int64_t n, int64_t s, int64_t c,
                                               int groups, bool silu);

}  // namespace hr::cuda
