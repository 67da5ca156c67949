// Benchmark of the compute-heavy CPU kernels at Stable Diffusion shapes, through the Backend
// interface, with each row's GFLOP/s shown against a plain 2048^3 sgemm measured in the same run.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/op.h"

namespace {

using hr::HostTensor;
using hr::OpKind;
using hr::OpParams;
using hr::Shape;
using hr::TensorDesc;
using hr::TensorRef;

constexpr int kMinReps = 3;
constexpr int kMaxReps = 15;
constexpr double kTargetSeconds = 1.5;  // per case, after the warm-up

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Median seconds of fn() over repetitions after one warm-up run.
template <typename Fn>
double time_median(Fn&& fn) {
  fn();
  std::vector<double> t;
  const double start = now_s();
  while (int(t.size()) < kMaxReps &&
         (int(t.size()) < kMinReps || now_s() - start < kTargetSeconds)) {
    const double t0 = now_s();
    fn();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

HostTensor random_tensor(Shape shape, std::mt19937& rng) {
  HostTensor t(hr::DType::F32, shape);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

struct Case {
  std::string name;
  OpKind kind;
  OpParams params;
  std::vector<Shape> inputs;
};

double baseline_gflops() {
  const int n = 2048;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  const double s = time_median([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                n, 0.0f, c.data(), n);
  });
  return 2.0 * double(n) * n * n / s / 1e9;
}

}  // namespace

int main() {
  std::unique_ptr<hr::Backend> backend = hr::cpu_backend_create();
  std::mt19937 rng(1234);
  OpParams conv3;
  conv3.pad[0] = conv3.pad[1] = conv3.pad[2] = conv3.pad[3] = 1;
  OpParams gn;
  gn.groups = 32;
  gn.eps = 1e-6f;
  gn.fuse_silu = true;
  OpParams attn;
  attn.heads = 8;

  const std::vector<Case> cases = {
      {"conv2d 320->320 3x3 [1,320,64,64]", OpKind::CONV2D, conv3,
       {{1, 320, 64, 64}, {320, 320, 3, 3}, {320}}},
      {"conv2d 320->320 3x3 [2,320,64,64]", OpKind::CONV2D, conv3,
       {{2, 320, 64, 64}, {320, 320, 3, 3}, {320}}},
      {"conv2d 4->320 3x3 [2,4,64,64]", OpKind::CONV2D, conv3,
       {{2, 4, 64, 64}, {320, 4, 3, 3}, {320}}},
      {"conv2d 1280->1280 3x3 [2,1280,8,8]", OpKind::CONV2D, conv3,
       {{2, 1280, 8, 8}, {1280, 1280, 3, 3}, {1280}}},
      {"linear 1280->1280 [1,4096,1280]", OpKind::LINEAR, OpParams{},
       {{1, 4096, 1280}, {1280, 1280}, {1280}}},
      {"linear 320->2560 [2,4096,320]", OpKind::LINEAR, OpParams{},
       {{2, 4096, 320}, {2560, 320}, {2560}}},
      {"attention 8h D40 Nq=Nk=4096 B2", OpKind::ATTENTION, attn,
       {{2, 4096, 320}, {2, 4096, 320}, {2, 4096, 320}}},
      {"group_norm 32g +silu [2,320,64,64]", OpKind::GROUP_NORM, gn,
       {{2, 320, 64, 64}, {320}, {320}}},
  };

  const double base = baseline_gflops();
  std::printf("%s\n", backend->info().name.c_str());
  std::printf("baseline: cblas_sgemm 2048^3 = %.1f GFLOP/s\n\n", base);
  std::printf("%-38s %10s %10s %9s %10s %12s\n", "case", "ms", "GFLOP/s", "vs sgemm", "GB/s",
              "workspace");
  for (const Case& c : cases) {
    std::vector<HostTensor> inputs;
    std::vector<TensorDesc> descs;
    std::vector<TensorRef> refs;
    for (const Shape& s : c.inputs) inputs.push_back(random_tensor(s, rng));
    for (const HostTensor& t : inputs) {
      descs.push_back(t.desc());
      refs.push_back(t.ref());
    }
    hr::Result<TensorDesc> out_desc = hr::op_infer(c.kind, c.params, descs);
    if (!out_desc.ok()) {
      std::printf("%-38s %s\n", c.name.c_str(), out_desc.status().str().c_str());
      continue;
    }
    HostTensor out(*out_desc);
    const size_t ws = backend->op_workspace(c.kind, c.params, descs, *out_desc);
    std::vector<unsigned char> workspace(ws);
    hr::OpCall call;
    call.kind = c.kind;
    call.params = &c.params;
    call.inputs = refs;
    call.output = out.ref();
    call.workspace = ws ? workspace.data() : nullptr;
    call.workspace_bytes = ws;
    hr::Status status;
    const double s = time_median([&] {
      hr::Status st = backend->op_run(call, nullptr);
      if (!st.ok()) status = st;
    });
    if (!status.ok()) {
      std::printf("%-38s %s\n", c.name.c_str(), status.str().c_str());
      continue;
    }
    const double flops = hr::op_flops(c.kind, c.params, descs, *out_desc);
    double bytes = double(out_desc->bytes());
    for (const TensorDesc& d : descs) bytes += double(d.bytes());
    char gf[32] = "-", ratio[32] = "-";
    if (flops > 0) {
      std::snprintf(gf, sizeof gf, "%.1f", flops / s / 1e9);
      std::snprintf(ratio, sizeof ratio, "%.2f", flops / s / 1e9 / base);
    }
    std::printf("%-38s %10.2f %10s %9s %10.2f %9.1f MiB\n", c.name.c_str(), s * 1e3, gf, ratio,
                bytes / s / 1e9, double(ws) / (1 << 20));
  }
  return 0;
}
