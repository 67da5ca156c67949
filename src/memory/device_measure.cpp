// The probes behind a device profile: GEMM, device copy, per-op cost, host-to-device copy.
#include "memory/device_measure.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "memory/residency_clock.h"

namespace hr {
namespace {

// Note [profile probes]
// A probe's size doubles from `first` until one repetition takes kEnoughMs or it reaches its
// cap: a GPU reaches its rates only at sizes that would take a CPU seconds, and a repetition
// too short to time says more about the timer than the device. Each size runs once untimed
// (first-call setup: library handles, page faults, clocks ramping up) and then kReps timed
// repetitions, of which the median counts (one repetition slowed by another process does not).
// The caps bound the device memory the probes take: ~100 MiB for the GEMM (4096^3 f16), 256 MiB
// for the device copy (128 MiB each way), 64 MiB for the copy from the host.
constexpr int kReps = 5;
constexpr double kEnoughMs = 1.0;
constexpr int kLaunches = 100;  // tiny ops in one timed repetition of the per-op probe

using Block = std::unique_ptr<void, std::function<void(void*)>>;

Result<Block> device_block(Backend& b, size_t bytes) {
  HR_ASSIGN_OR_RETURN(void* p, b.device_alloc(bytes));
  return Block(p, [&b](void* q) { b.device_free(q); });
}

Result<Block> pinned_block(Backend& b, size_t bytes) {
  HR_ASSIGN_OR_RETURN(void* p, b.host_alloc_pinned(bytes));
  std::memset(p, 0x3C, bytes);
  return Block(p, [&b](void* q) { b.host_free_pinned(q); });
}

// Device memory holding small finite values of any float dtype (every byte 0x3C: 1.06 in f16,
// 0.011 in f32 and bf16), so that GEMMs neither overflow nor run on zeros.
Result<Block> filled_block(Backend& b, size_t bytes) {
  HR_ASSIGN_OR_RETURN(Block d, device_block(b, bytes));
  std::vector<uint8_t> host(bytes, 0x3C);
  HR_TRY(b.copy_h2d(d.get(), host.data(), bytes, b.default_stream()));
  HR_TRY(b.stream_sync(b.default_stream()));
  return d;
}

// The median milliseconds of kReps timed repetitions of `work` on the default stream, after
// one untimed run.
Result<double> median_ms(Backend& b, const std::function<Status()>& work) {
  Stream* s = b.default_stream();
  HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> start, b.timing_event_create());
  HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> end, b.timing_event_create());
  HR_TRY(work());
  HR_TRY(b.stream_sync(s));
  std::array<double, kReps> ms{};
  for (double& m : ms) {
    HR_TRY(b.event_record(start.get(), s));
    HR_TRY(work());
    HR_TRY(b.event_record(end.get(), s));
    HR_TRY(b.event_sync(end.get()));
    HR_ASSIGN_OR_RETURN(m, b.event_elapsed_ms(start.get(), end.get()));
  }
  std::sort(ms.begin(), ms.end());
  return ms[kReps / 2];
}

struct Timed {
  uint64_t size = 0;
  double ms = 0;
};

// `probe(size)` for sizes doubling from `first` to `last` until one takes kEnoughMs.
Result<Timed> grown(uint64_t first, uint64_t last,
                    const std::function<Result<double>(uint64_t)>& probe) {
  Timed t;
  for (t.size = first;; t.size *= 2) {
    HR_ASSIGN_OR_RETURN(t.ms, probe(t.size));
    if (t.ms >= kEnoughMs || t.size * 2 > last) return t;
  }
}

// One n x n x n GEMM (a LINEAR without bias), f16 where the backend has it.
Result<double> gemm_ms(Backend& b, DType dtype, int64_t n) {
  const TensorDesc d{dtype, Shape{n, n}};
  HR_ASSIGN_OR_RETURN(Block x, filled_block(b, d.bytes()));
  HR_ASSIGN_OR_RETURN(Block w, filled_block(b, d.bytes()));
  HR_ASSIGN_OR_RETURN(Block y, device_block(b, d.bytes()));
  OpParams params;
  const std::array<TensorDesc, 2> descs{d, d};
  const size_t ws = b.op_workspace(OpKind::LINEAR, params, descs, d);
  Block workspace;
  if (ws > 0) {
    HR_ASSIGN_OR_RETURN(workspace, device_block(b, ws));
  }
  const std::array<TensorRef, 2> in{TensorRef{d, x.get()}, TensorRef{d, w.get()}};
  OpCall c;
  c.kind = OpKind::LINEAR;
  c.params = &params;
  c.inputs = in;
  c.output = TensorRef{d, y.get()};
  c.workspace = workspace.get();
  c.workspace_bytes = ws;
  return median_ms(b, [&] { return b.op_run(c, b.default_stream()); });
}

// `repeat` COPY ops of `bytes` (f32) back to back.
Result<double> copy_op_ms(Backend& b, uint64_t bytes, int repeat) {
  const TensorDesc d{DType::F32, Shape{int64_t(bytes / 4)}};
  HR_ASSIGN_OR_RETURN(Block x, device_block(b, d.bytes()));
  HR_TRY(b.memset_zero(x.get(), d.bytes(), b.default_stream()));
  HR_ASSIGN_OR_RETURN(Block y, device_block(b, d.bytes()));
  OpParams params;
  const std::array<TensorRef, 1> in{TensorRef{d, x.get()}};
  OpCall c;
  c.kind = OpKind::COPY;
  c.params = &params;
  c.inputs = in;
  c.output = TensorRef{d, y.get()};
  return median_ms(b, [&] {
    for (int i = 0; i < repeat; ++i) HR_TRY(b.op_run(c, b.default_stream()));
    return Status();
  });
}

Result<double> h2d_ms(Backend& b, uint64_t bytes) {
  HR_ASSIGN_OR_RETURN(Block host, pinned_block(b, bytes));
  HR_ASSIGN_OR_RETURN(Block dev, device_block(b, bytes));
  return median_ms(b, [&] { return b.copy_h2d(dev.get(), host.get(), bytes, b.default_stream()); });
}

}  // namespace

Result<DeviceProfile> device_profile_measure(Backend& b) {
  HR_TRY(b.timing_event_create().status());  // UNSUPPORTED before anything is allocated
  DeviceProfile p;
  p.device = b.info().name;
  const DType dtype = b.op_supported(OpKind::LINEAR, DType::F16) ? DType::F16 : DType::F32;
  HR_ASSIGN_OR_RETURN(Timed gemm, grown(256, 4096, [&](uint64_t n) {
                        return gemm_ms(b, dtype, int64_t(n));
                      }));
  p.gemm_flops_per_s = 2.0 * double(gemm.size) * double(gemm.size) * double(gemm.size) /
                       (gemm.ms * 1e-3);
  p.attention_flops_per_s = p.gemm_flops_per_s * kAttentionShare;  // Note [device profile]
  HR_ASSIGN_OR_RETURN(Timed copy, grown(16ull << 20, 128ull << 20, [&](uint64_t bytes) {
                        return copy_op_ms(b, bytes, 1);
                      }));
  p.memory_bytes_per_s = 2.0 * double(copy.size) / (copy.ms * 1e-3);  // read and written
  HR_ASSIGN_OR_RETURN(double tiny_ms, copy_op_ms(b, 1024, kLaunches));
  p.node_s = tiny_ms * 1e-3 / kLaunches;
  HR_ASSIGN_OR_RETURN(Timed h2d, grown(8ull << 20, 64ull << 20, [&](uint64_t bytes) {
                        return h2d_ms(b, bytes);
                      }));
  p.copy_bytes_per_s = double(h2d.size) / (h2d.ms * 1e-3);
  p.measured = true;
  if (!p.valid())
    return make_error(ErrorCode::INTERNAL, "the probes of {} gave rates that are not positive: {}",
                      p.device, device_profile_describe(p));
  return p;
}

}  // namespace hr
