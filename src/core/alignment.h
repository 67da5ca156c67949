// The one device alignment: every allocation, arena offset and slot, workspace slice and staging
// slot headroom lays out is a multiple of kDeviceAlignment (Note [device alignment]).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hr {

// Note [device alignment]
// 256 bytes: cudaMalloc returns at least this alignment, cuBLASLt and cuDNN want their operands
// and workspaces 16- to 256-byte aligned, and the vectorised kernels read 16-byte packs. Slices
// of one allocation (arena slots, workspace parts, ring slots, coalesced page-locked blocks) keep
// that alignment only if every size before them is rounded to it, so the allocator, the arena
// planner, the residency planner and the backends' workspace layouts all round with align_up.
// A plan's bytes equal the allocator's only because both round the same way: change it here.
inline constexpr size_t kDeviceAlignment = 256;

// `n` rounded up to a multiple of `a` (0 stays 0).
constexpr uint64_t align_up(uint64_t n, uint64_t a = kDeviceAlignment) {
  return (n + a - 1) / a * a;
}

}  // namespace hr
