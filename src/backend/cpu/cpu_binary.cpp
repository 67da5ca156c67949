// CPU ADD/SUB/MUL/DIV with NumPy broadcasting (f32). Shapes are first reduced to the fewest
// dims with the same broadcast pattern, so the common cases (same shape, a bias [C,1,1]
// against [N,C,H,W], a per-sample scale [N,1,1,1]) become a flat loop or a short row loop.
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace hr::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

// Output dims with each operand's element strides (0 where it is broadcast), after merging
// neighbouring dims that broadcast alike and dropping dims of size 1.
struct BroadcastPlan {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
};

BroadcastPlan broadcast_plan(const Shape& a, const Shape& b, const Shape& out) {
  // Per output dim: whether a / b vary along it.
  bool va[kMaxDims], vb[kMaxDims];
  int64_t d[kMaxDims];
  int r = 0;
  for (int i = 0; i < out.rank; ++i) {
    if (out.dims[i] == 1) continue;
    int ia = a.rank - out.rank + i, ib = b.rank - out.rank + i;
    va[r] = ia >= 0 && a.dims[ia] != 1;
    vb[r] = ib >= 0 && b.dims[ib] != 1;
    d[r] = out.dims[i];
    ++r;
  }
  BroadcastPlan p;
  for (int i = 0; i < r; ++i) {
    if (p.rank > 0 && va[i] == (p.sa[p.rank - 1] != 0) && vb[i] == (p.sb[p.rank - 1] != 0)) {
      p.dims[p.rank - 1] *= d[i];
    } else {
      p.dims[p.rank] = d[i];
      p.sa[p.rank] = va[i] ? 1 : 0;  // marks for now; real strides below
      p.sb[p.rank] = vb[i] ? 1 : 0;
      ++p.rank;
    }
  }
  int64_t ra = 1, rb = 1;
  for (int i = p.rank - 1; i >= 0; --i) {
    if (p.sa[i]) {
      p.sa[i] = ra;
      ra *= p.dims[i];
    }
    if (p.sb[i]) {
      p.sb[i] = rb;
      rb *= p.dims[i];
    }
  }
  return p;
}

// One innermost row of `n` elements; the stride patterns are compile-time so each loop
// vectorises.
template <typename F>
inline void row(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n, F f) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (sa) {
    const float bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (sb) {
    const float av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    const float v = f(*a, *b);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

template <typename F>
void run(const BroadcastPlan& p, const float* a, const float* b, float* y, F f) {
  if (p.rank == 0) {  // every dim is 1
    y[0] = f(a[0], b[0]);
    return;
  }
  const int last = p.rank - 1;
  const int64_t n = p.dims[last];
  int64_t rows = 1;
  for (int i = 0; i < last; ++i) rows *= p.dims[i];
  if (rows == 1) {
    // One long row: split it across threads.
    const int64_t sa = p.sa[last], sb = p.sb[last];
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      int64_t lo = ch * kChunk, len = n - lo < kChunk ? n - lo : kChunk;
      row(a + lo * sa, sa, b + lo * sb, sb, y + lo, len, f);
    }
    return;
  }
#pragma omp parallel for if (rows * n >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, oa = 0, ob = 0;
    for (int i = last - 1; i >= 0; --i) {
      int64_t idx = rem % p.dims[i];
      rem /= p.dims[i];
      oa += idx * p.sa[i];
      ob += idx * p.sb[i];
    }
    row(a + oa, p.sa[last], b + ob, p.sb[last], y + r * n, n, f);
  }
}

}  // namespace

Status binary(const OpCall& c) {
  if (c.inputs.size() != 2)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: expects 2 inputs, got {}",
                      op_name(c.kind), c.inputs.size());
  const TensorDesc& da = c.inputs[0].desc;
  const TensorDesc& db = c.inputs[1].desc;
  if (da.dtype != DType::F32 || db.dtype != DType::F32 || c.output.desc.dtype != DType::F32)
    return make_error(ErrorCode::UNSUPPORTED, "cpu {}: only f32 is supported, got {} and {}",
                      op_name(c.kind), dtype_name(da.dtype), dtype_name(db.dtype));
  const Shape& out = c.output.desc.shape;
  // The output must be the broadcast shape, or the strides below would read out of bounds.
  for (int i = 0; i < out.rank; ++i) {
    int ia = da.shape.rank - out.rank + i, ib = db.shape.rank - out.rank + i;
    int64_t ea = ia >= 0 ? da.shape.dims[ia] : 1, eb = ib >= 0 ? db.shape.dims[ib] : 1;
    int64_t want = ea == 1 ? eb : ea;
    if ((ea != eb && ea != 1 && eb != 1) || out.dims[i] != want)
      return make_error(ErrorCode::INVALID_ARGUMENT, "{}: {} and {} do not broadcast to {}",
                        op_name(c.kind), da.str(), db.str(), c.output.desc.str());
  }
  if (out.rank < da.shape.rank || out.rank < db.shape.rank)
    return make_error(ErrorCode::INVALID_ARGUMENT, "{}: output {} has lower rank than inputs",
                      op_name(c.kind), c.output.desc.str());
  if (out.numel() == 0) return Status();

  BroadcastPlan p = broadcast_plan(da.shape, db.shape, out);
  const float* a = c.inputs[0].as<const float>();
  const float* b = c.inputs[1].as<const float>();
  float* y = c.output.as<float>();
  switch (c.kind) {
    case OpKind::ADD: run(p, a, b, y, [](float u, float v) { return u + v; }); break;
    case OpKind::SUB: run(p, a, b, y, [](float u, float v) { return u - v; }); break;
    case OpKind::MUL: run(p, a, b, y, [](float u, float v) { return u * v; }); break;
    case OpKind::DIV: run(p, a, b, y, [](float u, float v) { return u / v; }); break;
    default:
      return make_error(ErrorCode::INTERNAL, "cpu binary: {} is not a binary op", op_name(c.kind));
  }
  return Status();
}

}  // namespace hr::cpu
