// A few SD- and Flux-sized f16 ops on the CUDA backend (attention, conv3x3, GEMM, GroupNorm+SiLU,
// Flux's QK RMS norm and RoPE, T5's RMS norm) through the Backend interface: TFLOP/s against an
// 8192^3 f16 LINEAR of the same run, and GB/s (the bandwidth-bound ops' measure).
// (Formerly the test CudaBackend.TimingsAtSdShapes, which timed inside the suite.)
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/backend.h"
#include "backend/op.h"

namespace {

using hr::DType;
using hr::OpKind;
using hr::OpParams;
using hr::Shape;
using hr::TensorDesc;

struct Case {
  std::string name;
  OpKind kind;
  OpParams p;
  std::vector<TensorDesc> in;
};

TensorDesc f16(Shape s) { return TensorDesc{DType::F16, s}; }
TensorDesc f32(Shape s) { return TensorDesc{DType::F32, s}; }

std::vector<Case> sd_cases() {
  OpParams att;
  att.heads = 8;
  OpParams conv;
  conv.pad[0] = conv.pad[1] = conv.pad[2] = conv.pad[3] = 1;
  OpParams gn;
  gn.groups = 32;
  gn.fuse_silu = true;
  OpParams rms;
  rms.eps = 1e-6f;
  return {
      {"attention sd1 L1 [2,4096,8x40]", OpKind::ATTENTION, att,
       {f16({2, 4096, 320}), f16({2, 4096, 320}), f16({2, 4096, 320})}},
      {"attention sd1 L3 [2,256,8x160]", OpKind::ATTENTION, att,
       {f16({2, 256, 1280}), f16({2, 256, 1280}), f16({2, 256, 1280})}},
      {"conv3x3 [2,320,64,64]->320", OpKind::CONV2D, conv,
       {f16({2, 320, 64, 64}), f16({320, 320, 3, 3}), f16({320})}},
      {"linear [2,4096,320]x[1280,320]", OpKind::LINEAR, {},
       {f16({2, 4096, 320}), f16({1280, 320}), f16({1280})}},
      {"group_norm+silu [2,320,64,64]", OpKind::GROUP_NORM, gn,
       {f16({2, 320, 64, 64}), f16({320}), f16({320})}},
      // Flux.1 at 1024^2: 4096 image + 512 text tokens, 24 heads of 128; T5-XXL over 256 tokens.
      {"rms_norm flux qk [1,4608,24,128]", OpKind::RMS_NORM, rms,
       {f16({1, 4608, 24, 128}), f16({128})}},
      {"rope flux [1,4608,24,128]", OpKind::ROPE, {},
       {f16({1, 4608, 24, 128}), f32({4608, 64, 2})}},
      {"rms_norm t5 [1,256,4096]", OpKind::RMS_NORM, rms, {f16({1, 256, 4096}), f16({4096})}},
  };
}

// Milliseconds per run of `c` on zeroed inputs (20 runs after one warm-up that lets the backend
// choose its algorithm), or a negative value after printing why it could not run.
double case_ms(hr::Backend& gpu, hr::Allocator& alloc, const Case& c) {
  hr::Result<TensorDesc> out = hr::op_infer(c.kind, c.p, c.in);
  if (!out.ok()) {
    std::printf("%s: %s\n", c.name.c_str(), out.status().str().c_str());
    return -1;
  }
  std::vector<hr::DeviceBuffer> bufs;
  std::vector<hr::TensorRef> refs;
  auto take = [&](size_t bytes) -> void* {
    hr::Result<hr::DeviceBuffer> b = alloc.allocate(bytes, hr::Pool::ACTIVATIONS, "bench");
    if (!b.ok() || !gpu.memset_zero(b->data(), bytes, nullptr).ok()) return nullptr;
    bufs.push_back(std::move(b).value());
    return bufs.back().data();
  };
  for (const TensorDesc& d : c.in) refs.push_back(hr::TensorRef{d, take(d.bytes())});
  const size_t ws = gpu.op_workspace(c.kind, c.p, c.in, *out);
  hr::OpCall call;
  call.kind = c.kind;
  call.params = &c.p;
  call.inputs = refs;
  call.output = hr::TensorRef{*out, take(out->bytes())};
  call.workspace = ws ? take(ws) : nullptr;
  call.workspace_bytes = ws;
  hr::Status st = gpu.op_run(call, nullptr);
  if (st.ok()) st = gpu.stream_sync(nullptr);
  constexpr int kReps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps && st.ok(); ++i) st = gpu.op_run(call, nullptr);
  if (st.ok()) st = gpu.stream_sync(nullptr);
  if (!st.ok()) {
    std::printf("%s: %s\n", c.name.c_str(), st.str().c_str());
    return -1;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         kReps;
}

double tflops(const Case& c, double ms) {
  hr::Result<TensorDesc> out = hr::op_infer(c.kind, c.p, c.in);
  return out.ok() ? hr::op_flops(c.kind, c.p, c.in, *out) / (ms * 1e-3) / 1e12 : 0.0;
}

// Bytes of the inputs and the output, each once, per second.
double gb_per_s(const Case& c, double ms) {
  hr::Result<TensorDesc> out = hr::op_infer(c.kind, c.p, c.in);
  double bytes = out.ok() ? double(out->bytes()) : 0.0;
  for (const TensorDesc& d : c.in) bytes += double(d.bytes());
  return bytes / (ms * 1e-3) / 1e9;
}

}  // namespace

int main() {
  hr::Result<std::unique_ptr<hr::Backend>> b = hr::cuda_backend_create(0);
  if (!b.ok()) {
    std::printf("bench_cuda_ops: no CUDA device: %s\n", b.status().str().c_str());
    return 1;
  }
  hr::Backend& gpu = **b;
  hr::Allocator alloc(gpu);
  const Case base{"linear 8192^3", OpKind::LINEAR, {},
                  {f16({8192, 8192}), f16({8192, 8192}), f16({8192})}};
  const double base_ms = case_ms(gpu, alloc, base);
  if (base_ms <= 0) return 1;
  const double base_tf = tflops(base, base_ms);
  std::printf("%s\nbaseline: f16 %s = %.1f TFLOP/s\n\n", gpu.info().name.c_str(),
              base.name.c_str(), base_tf);
  std::printf("%-34s %9s %9s %9s %9s\n", "case (f16)", "ms", "TFLOP/s", "vs base", "GB/s");
  for (const Case& c : sd_cases()) {
    const double ms = case_ms(gpu, alloc, c);
    if (ms <= 0) continue;
    const double tf = tflops(c, ms);
    std::printf("%-34s %9.3f %9.1f %9.2f %9.0f\n", c.name.c_str(), ms, tf, tf / base_tf,
                gb_per_s(c, ms));
  }
  return 0;
}
