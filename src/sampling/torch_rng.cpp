// PyTorch's CPU normal kernel (mt19937 + Box-Muller in blocks of 16) and CUDA normal kernel
// (Philox4x32-10 + curand_normal4, grid-stride) reproduced on the host.
#include "sampling/torch_rng.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace hr {

// Note [torch cpu randn]
// aten/src/ATen/native/cpu/DistributionTemplates.h normal_kernel, float32 contiguous:
// * numel >= 16: every element gets a uniform u = (random() & 0xFFFFFF) * 2^-24; then each
//   block of 16 is transformed in place: u1 = 1 - d[j], u2 = d[j + 8], r = sqrt(-2 ln u1),
//   d[j] = r cos(theta), d[j + 8] = r sin(theta) for j < 8, theta = float(2 pi) * u2 in float
//   (the vectorised kernel's form; the scalar one rounds a double 2 pi u2, which matches the
//   golden noise far less often: 61% against 83% bit-exact). A tail that is not a multiple of
//   16 is handled by drawing 16 fresh uniforms into the LAST 16 elements and transforming them
//   again.
// * numel < 16: per element at::normal_distribution<double>: u1, u2 from random64() (53 bits),
//   r = sqrt(-2 log1p(-u2)), theta = 2 pi u1, returns r cos(theta) and caches r sin(theta) in
//   the generator for the next double-normal call.
// PyTorch's vectorised log/sin/cos differ from libm in the last bits, so about 83% of the values
// are bit-exact and the rest within 3 ulp (tests/sampling/torch_rng_test.cpp measures it).

void TorchCPUGenerator::manual_seed(uint64_t seed) {
  engine_.seed(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
  next_double_normal_.reset();
}

uint64_t TorchCPUGenerator::random64() {
  uint64_t hi = random();
  uint64_t lo = random();
  return (hi << 32) | lo;
}

double TorchCPUGenerator::normal_double() {
  if (next_double_normal_) {
    double v = *next_double_normal_;
    next_double_normal_.reset();
    return v;
  }
  constexpr uint64_t kMask = (uint64_t(1) << 53) - 1;
  constexpr double kDiv = 1.0 / double(uint64_t(1) << 53);
  double u1 = double(random64() & kMask) * kDiv;
  double u2 = double(random64() & kMask) * kDiv;
  double r = std::sqrt(-2.0 * std::log1p(-u2));
  double theta = 2.0 * M_PI * u1;
  next_double_normal_ = r * std::sin(theta);
  return r * std::cos(theta);
}

namespace {

float uniform24(TorchCPUGenerator& g) {
  return float(g.random() & 0xFFFFFFu) * (1.0f / 16777216.0f);
}

void normal_fill_16(float* d) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = float(2.0 * M_PI) * u2;  // float 2 pi, as the vectorised kernel
    d[j] = radius * std::cos(theta);
    d[j + 8] = radius * std::sin(theta);
  }
}

}  // namespace

void TorchCPUGenerator::randn(std::span<float> out) {
  const int64_t n = int64_t(out.size());
  float* d = out.data();
  if (n >= 16) {
    for (int64_t i = 0; i < n; ++i) d[i] = uniform24(*this);
    for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16(d + i);
    if (n % 16 != 0) {
      float* tail = d + n - 16;
      for (int i = 0; i < 16; ++i) tail[i] = uniform24(*this);
      normal_fill_16(tail);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(normal_double());
  }
}

// Note [torch cuda randn]
// aten/src/ATen/native/cuda/DistributionTemplates.h, normal_and_transform with
// curand_normal4 (unroll 4): block 256 threads, grid = min(ceil(numel / 256),
// SMs * (max threads per SM / 256)), stride = 256 * grid. Thread `idx` runs
// curand_init(seed, subsequence = idx, offset = the generator's philox offset) and, for
// linear_index = idx, idx + 4 stride, ..., draws one float4 and writes component ii to element
// linear_index + ii * stride. The generator's offset then grows by
// ((numel - 1) / (4 stride) + 1) * 4. The device uses __logf/__sincosf in Box-Muller; the
// host uses libm, so values agree to a few ulp, not bit for bit.

namespace {

struct U4 {
  uint32_t x, y, z, w;
};

inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

U4 philox4x32_10(U4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kM0, c.x, &hi0);
    uint32_t lo1 = mulhilo(kM1, c.z, &hi1);
    c = U4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
  }
  return c;
}

// curandStatePhilox4_32_10_t, the parts curand4 uses.
struct PhiloxState {
  U4 ctr{0, 0, 0, 0};
  uint32_t k0 = 0, k1 = 0;
  uint32_t state = 0;  // position inside the current 128-bit output
  U4 output{};

  void incr() {
    if (++ctr.x) return;
    if (++ctr.y) return;
    if (++ctr.z) return;
    ++ctr.w;
  }
  void incr(uint64_t n) {
    uint32_t nlo = uint32_t(n), nhi = uint32_t(n >> 32);
    ctr.x += nlo;
    if (ctr.x < nlo) nhi++;
    ctr.y += nhi;
    if (nhi <= ctr.y) return;
    if (++ctr.z) return;
    ++ctr.w;
  }
  void incr_hi(uint64_t n) {
    uint32_t nlo = uint32_t(n), nhi = uint32_t(n >> 32);
    ctr.z += nlo;
    if (ctr.z < nlo) nhi++;
    ctr.w += nhi;
  }
  // curand_init(seed, subsequence, offset)
  void init(uint64_t seed, uint64_t subsequence, uint64_t offset) {
    ctr = U4{0, 0, 0, 0};
    k0 = uint32_t(seed);
    k1 = uint32_t(seed >> 32);
    state = 0;
    incr_hi(subsequence);
    output = philox4x32_10(ctr, k0, k1);
    // skipahead(offset)
    state += uint32_t(offset & 3);
    uint64_t n = offset / 4;
    if (state > 3) {
      n += 1;
      state -= 4;
    }
    incr(n);
    output = philox4x32_10(ctr, k0, k1);
  }
  U4 next4() {
    U4 tmp = output;
    incr();
    output = philox4x32_10(ctr, k0, k1);
    switch (state) {
      case 0:
        return tmp;
      case 1:
        return U4{tmp.y, tmp.z, tmp.w, output.x};
      case 2:
        return U4{tmp.z, tmp.w, output.x, output.y};
      default:
        return U4{tmp.w, output.x, output.y, output.z};
    }
  }
};

// curand's _curand_box_muller (the compiler contracts the affine maps into FMAs).
void box_muller(uint32_t a, uint32_t b, float* o0, float* o1) {
  constexpr float kInv = 2.3283064e-10f;                  // CURAND_2POW32_INV
  constexpr float kInv2Pi = 2.3283064e-10f * 6.2831855f;  // CURAND_2POW32_INV_2PI
  const float u = std::fma(float(a), kInv, kInv / 2.0f);
  const float v = std::fma(float(b), kInv2Pi, kInv2Pi / 2.0f);
  const float s = std::sqrt(-2.0f * std::log(u));
  *o0 = std::sin(v) * s;
  *o1 = std::cos(v) * s;
}

}  // namespace

void TorchCUDAGenerator::randn(std::span<float> out) {
  const uint64_t numel = out.size();
  if (numel == 0) return;
  constexpr uint64_t kBlock = 256, kUnroll = 4;
  uint64_t grid = (numel + kBlock - 1) / kBlock;
  const uint64_t blocks_per_sm = limits_.max_threads_per_multiprocessor / kBlock;
  grid = std::min<uint64_t>(grid, uint64_t(limits_.multiprocessor_count) * blocks_per_sm);
  const uint64_t stride = kBlock * grid;
  const uint64_t counter_offset = ((numel - 1) / (stride * kUnroll) + 1) * 4;
  const uint64_t offset = offset_;
  offset_ += counter_offset;

  const uint64_t rounded = ((numel - 1) / (stride * kUnroll) + 1) * stride * kUnroll;
  float* d = out.data();
  for (uint64_t idx = 0; idx < stride; ++idx) {
    PhiloxState st;
    st.init(seed_, idx, offset);
    for (uint64_t li = idx; li < rounded; li += stride * kUnroll) {
      U4 r = st.next4();
      float v[4];
      box_muller(r.x, r.y, &v[0], &v[1]);
      box_muller(r.z, r.w, &v[2], &v[3]);
      for (uint64_t ii = 0; ii < kUnroll; ++ii) {
        uint64_t e = li + stride * ii;
        if (e < numel) d[e] = v[ii];
      }
    }
  }
}

void NoiseGenerator::draw_into(std::span<float> out) {
  if (device_ == NoiseDevice::CPU) {
    cpu_.randn(out);
  } else {
    cuda_.randn(out);
  }
}

HostTensor NoiseGenerator::draw(const Shape& shape) {
  HostTensor t(DType::F32, shape);
  draw_into(std::span<float>(t.f32(), size_t(t.numel())));
  return t;
}

HostTensor randn_cpu(uint64_t seed, const Shape& shape) {
  return NoiseGenerator(seed, NoiseDevice::CPU).draw(shape);
}

HostTensor randn_cuda(uint64_t seed, const Shape& shape, CUDAGridLimits limits) {
  return NoiseGenerator(seed, NoiseDevice::CUDA, limits).draw(shape);
}

HostTensor prepare_noise(const Shape& latent_shape, uint64_t seed,
                         std::span<const int64_t> batch_index) {
  if (batch_index.empty()) return randn_cpu(seed, latent_shape);
  Shape one = latent_shape;
  one[0] = 1;
  const int64_t per = one.numel();
  int64_t max_index = 0;
  for (int64_t b : batch_index) max_index = std::max(max_index, b);
  // Draw 0..max_index in order (earlier draws advance the generator even when unused).
  TorchCPUGenerator gen(seed);
  std::map<int64_t, std::vector<float>> kept;
  for (int64_t i = 0; i <= max_index; ++i) {
    std::vector<float> buf(static_cast<size_t>(per));
    gen.randn(buf);
    if (std::find(batch_index.begin(), batch_index.end(), i) != batch_index.end()) {
      kept[i] = std::move(buf);
    }
  }
  Shape out_shape = latent_shape;
  out_shape[0] = int64_t(batch_index.size());
  HostTensor out(DType::F32, out_shape);
  for (size_t k = 0; k < batch_index.size(); ++k) {
    const auto& src = kept[batch_index[k]];
    std::copy(src.begin(), src.end(), out.f32() + int64_t(k) * per);
  }
  return out;
}

}  // namespace hr
