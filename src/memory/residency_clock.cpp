// The residency clock and copy rate built from a device profile, and the fallback profiles used
// where none was measured (Note [device profile]).
#include "memory/residency_clock.h"

namespace hr {

// Note [device profile]
// The residency planner times a call on a clock (Note [node clock] in graph/residency.cpp) and
// copies on the device's host-to-device rate (Note [ring choice] in residency_planner.cpp); both
// come from a profile measured once per device (device_measure.h: a GEMM, a device copy, a tiny
// op and a copy from page-locked memory, cached on disk) instead of the H200's rates for every GPU, so that a
// consumer card whose PCIe link is slow next to its compute gets the plan it needs.
//  - The probes measure peaks: a 4096^3 GEMM and a copy of hundreds of MiB run closer to the
//    device's limits than a UNet's mix of GEMMs, convolutions, norms and small element-wise
//    ops. The clock was fitted to the H200's measured steps with 500 TFLOP/s and 1.2 TB/s, so
//    it takes the measured GEMM and memory rates at the fixed efficiencies that turn the H200's
//    probe figures into those (kGemmEfficiency, kMemoryEfficiency below). The H200's probe
//    figures are `headroom probe --json`'s on one (bench/PERF_NOTES.md, device profile), so
//    on an H200 the measured profile gives the fitted clock and its plans stay what they were.
//  - The host-to-device rate and the per-node cost are used as measured: the 55 GB/s the clock
//    assumed was itself the H200's page-locked copy rate.
//  - Attention is not measured: it runs at about a third of a GEMM's rate on the H200 (its
//    softmax and head dimensions of 64-128 keep the tensor cores below a GEMM's throughput), so
//    its rate is the GEMM rate times kAttentionShare. Measuring it would take an attention op
//    at real head dimensions in the probe for a figure that only orders the clock's nodes.
// A backend without timing events, or whose probe fails, gets device_profile_default: the H200
// for a GPU, two cores for the CPU.
namespace {

// The H200's probe figures (measured, above) and the clock fitted to its steps.
constexpr double kH200Gemm = 822e12, kH200ClockFlops = 500e12;
constexpr double kH200Memory = 3.75e12, kH200ClockBytes = 1.2e12;
constexpr double kGemmEfficiency = kH200ClockFlops / kH200Gemm;
constexpr double kMemoryEfficiency = kH200ClockBytes / kH200Memory;

}  // namespace

DeviceProfile device_profile_default(bool memory_is_host) {
  DeviceProfile p;
  if (memory_is_host) {  // two CPU cores: a clock of ~60 GFLOP/s and 10 GB/s, memcpy at ~5 GB/s
    p.device = "cpu";
    p.gemm_flops_per_s = 60e9 / kGemmEfficiency;
    p.attention_flops_per_s = 30e9 / kGemmEfficiency;
    p.memory_bytes_per_s = 10e9 / kMemoryEfficiency;
    p.node_s = 5e-6;
    p.copy_bytes_per_s = 5e9;
  } else {  // an unknown GPU: the H200, PCIe 5 x16 moving ~55 GB/s from page-locked memory
    p.device = "unknown GPU";
    p.gemm_flops_per_s = kH200Gemm;
    p.attention_flops_per_s = kH200Gemm * kAttentionShare;
    p.memory_bytes_per_s = kH200Memory;
    p.node_s = 1.5e-6;
    p.copy_bytes_per_s = 55e9;
  }
  return p;
}

ResidencyOptions residency_options_for(const DeviceProfile& p) {
  ResidencyOptions o;
  o.clock = NodeClock{p.gemm_flops_per_s * kGemmEfficiency,
                      p.attention_flops_per_s * kGemmEfficiency,
                      p.memory_bytes_per_s * kMemoryEfficiency, p.node_s};
  o.copy_bytes_per_s = p.copy_bytes_per_s;
  return o;
}

}  // namespace hr
