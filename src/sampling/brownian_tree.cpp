// SeedSequence (numpy/random/bit_generator.pyx), the halfway Brownian interval tree
// (torchsde/_brownian/brownian_interval.py) and ComfyUI's noise sampler over it.
#include "sampling/brownian_tree.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "sampling/torch_rng.h"

namespace hr {

namespace {

constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr uint32_t kXShift = 16;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

// _int_to_uint32_array: low word first, one zero word for 0.
void append_words(uint64_t n, std::vector<uint32_t>& out) {
  if (n == 0) out.push_back(0);
  while (n > 0) {
    out.push_back(uint32_t(n & 0xFFFFFFFFu));
    n >>= 32;
  }
}

// torchsde's BrownianTree settings (derived.py) and the cache size BrownianInterval would use
// (45; values do not depend on it, so a larger one only trades memory for speed).
constexpr uint32_t kPoolSize = 24;
constexpr size_t kCacheSize = 96;
constexpr uint32_t kMaxDepth = 60;  // tol 1e-6 ends the halving long before this

// Python's round(x, 6) (tol=1e-6 gives ndigits = -int(log10(tol)) = 6): the decimal nearest
// to the exact binary value, ties to even; printf("%.6f") rounds the same way.
double round6(double x) {
  if (!std::isfinite(x) || std::fabs(x) >= 1e15) return x;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6f", x);
  return std::strtod(buf, nullptr);
}

}  // namespace

SeedSequence::SeedSequence(uint64_t entropy, const std::vector<uint64_t>& spawn_key,
                           uint32_t pool_size)
    : pool_(pool_size, 0) {
  std::vector<uint32_t> e;
  append_words(entropy, e);
  std::vector<uint32_t> spawn;
  for (uint64_t k : spawn_key) append_words(k, spawn);
  // numpy >= 1.19 pads the run entropy to the pool size when there is a spawn key.
  if (!spawn.empty() && e.size() < pool_size) e.resize(pool_size, 0);
  e.insert(e.end(), spawn.begin(), spawn.end());

  uint32_t hc = kInitA;
  for (size_t i = 0; i < pool_.size(); ++i) pool_[i] = hashmix(i < e.size() ? e[i] : 0, hc);
  for (size_t src = 0; src < pool_.size(); ++src) {
    for (size_t dst = 0; dst < pool_.size(); ++dst) {
      if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src], hc));
    }
  }
  for (size_t src = pool_.size(); src < e.size(); ++src) {
    for (size_t dst = 0; dst < pool_.size(); ++dst)
      pool_[dst] = mix(pool_[dst], hashmix(e[src], hc));
  }
}

std::vector<uint32_t> SeedSequence::generate_state(size_t n_words) const {
  std::vector<uint32_t> out(n_words);
  uint32_t hc = kInitB;
  for (size_t i = 0; i < n_words; ++i) {
    uint32_t v = pool_[i % pool_.size()];
    v ^= hc;
    hc *= kMultB;
    v *= hc;
    v ^= v >> kXShift;
    out[i] = v;
  }
  return out;
}

// ---- BrownianTree -------------------------------------------------------------------------

BrownianTree::BrownianTree(double t0, double t1, Shape shape, uint64_t entropy)
    : shape_(std::move(shape)), entropy_(entropy) {
  // The root's increment uses the unrounded ends; its interval the rounded ones.
  const uint32_t w_seed = SeedSequence(entropy, {}, kPoolSize).generate_state(3)[0];
  root_w_ = randn_cpu(w_seed, shape_);
  const float scale = float(std::sqrt(t1 - t0));
  float* w = root_w_.f32();
  for (int64_t i = 0; i < root_w_.numel(); ++i) w[i] = w[i] * scale;
  nodes_.push_back(Node{round6(t0), round6(t1), -1, false, 0, 0});
}

// _split_exact at the rounded halfway point; the node's spawn key and depth seed its bridge.
void BrownianTree::node_split(int32_t id) {
  Node& n = nodes_[size_t(id)];
  if (n.parent >= 0) {
    const Node& p = nodes_[size_t(n.parent)];
    n.spawn_key = 2 * p.spawn_key + (n.is_left ? 0 : 1);
    n.depth = p.depth + 1;
  }
  n.midway = round6(0.5 * (n.end + n.start));
  n.w_seed = SeedSequence(entropy_, {n.spawn_key, n.depth}, kPoolSize).generate_state(4)[0];
  const double start = n.start, end = n.end, mid = n.midway;
  n.left = int32_t(nodes_.size());
  n.right = n.left + 1;
  nodes_.push_back(Node{start, mid, id, true, 0, 0});  // invalidates n
  nodes_.push_back(Node{mid, end, id, false, 0, 0});
}

// _loc: the canonical decomposition of [ta, tb] into tree intervals, left to right. It does not
// depend on which intervals exist already, since every split is at the halfway point.
Status BrownianTree::node_locate(double ta, double tb, std::vector<int32_t>& out) {
  struct Item {
    int32_t id;
    double a, b;
  };
  std::vector<Item> stack{{0, ta, tb}};
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    if (it.a == nodes_[size_t(it.id)].start && it.b == nodes_[size_t(it.id)].end) {
      out.push_back(it.id);
      continue;
    }
    if (nodes_[size_t(it.id)].left < 0) {
      if (nodes_[size_t(it.id)].depth >= kMaxDepth) {
        return make_error(ErrorCode::INTERNAL, "Brownian tree: [{}, {}] not resolved", ta, tb);
      }
      node_split(it.id);
    }
    const Node& n = nodes_[size_t(it.id)];
    if (it.b <= n.midway) {
      stack.push_back({n.left, it.a, it.b});
    } else if (it.a >= n.midway) {
      stack.push_back({n.right, it.a, it.b});
    } else {  // left part first: pushed last
      stack.push_back({n.right, n.midway, it.b});
      stack.push_back({n.left, it.a, n.midway});
    }
  }
  return Status();
}

void BrownianTree::cache_put(int32_t id, HostTensor w) {
  lru_.push_front(id);
  cache_.emplace(id, std::make_pair(std::move(w), lru_.begin()));
  while (cache_.size() > kCacheSize) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
}

// An interval's increment from its parent's by the Brownian bridge (no Levy area):
// left = left_diff * W * (1/h) + sqrt(left_diff * right_diff / h) * randn(parent W seed),
// right = W - left; float32 tensors times Python floats, as torch computes them.
const HostTensor& BrownianTree::node_w(int32_t id) {
  if (id == 0) return root_w_;
  auto hit = cache_.find(id);
  if (hit != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second.second);
    return hit->second.first;
  }
  const int32_t pid = nodes_[size_t(id)].parent;
  const Node& p = nodes_[size_t(pid)];
  const double h_reciprocal = 1.0 / (p.end - p.start);
  const double left_diff = p.midway - p.start;
  const double right_diff = p.end - p.midway;
  const float c_mean = float(left_diff), c_h = float(h_reciprocal);
  const float c_noise = float(std::sqrt(left_diff * right_diff * h_reciprocal));
  const int32_t left_id = p.left, right_id = p.right;
  HostTensor noise = randn_cpu(p.w_seed, shape_);
  const HostTensor& w = node_w(pid);
  HostTensor left(w.desc()), right(w.desc());
  const float* pw = w.f32();
  const float* pn = noise.f32();
  float *pl = left.f32(), *pr = right.f32();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float mean = (c_mean * pw[i]) * c_h;
    const float dev = c_noise * pn[i];
    pl[i] = mean + dev;
    pr[i] = pw[i] - pl[i];
  }
  cache_put(left_id, std::move(left));
  cache_put(right_id, std::move(right));
  return cache_.at(id).first;
}

Result<HostTensor> BrownianTree::increment(double ta, double tb) {
  const Node& root = nodes_[0];
  ta = std::min(std::max(ta, root.start), root.end);
  tb = std::min(std::max(tb, root.start), root.end);
  if (ta > tb) {
    return make_error(ErrorCode::INVALID_ARGUMENT, "Brownian tree query [{}, {}] is reversed", ta,
                      tb);
  }
  if (ta == tb) return HostTensor(DType::F32, shape_);
  ta = round6(ta);
  tb = round6(tb);
  if (ta == tb) return HostTensor(DType::F32, shape_);  // torchsde recurses without end here
  std::vector<int32_t> parts;
  HR_TRY(node_locate(ta, tb, parts));
  HostTensor sum = node_w(parts[0]).clone();
  for (size_t k = 1; k < parts.size(); ++k) {
    const HostTensor& wi = node_w(parts[k]);
    float* ps = sum.f32();
    const float* pw = wi.f32();
    for (int64_t i = 0; i < sum.numel(); ++i) ps[i] = ps[i] + pw[i];
  }
  return sum;
}

// ---- ComfyUI noise sampler ----------------------------------------------------------------

BrownianTreeNoiseSampler::BrownianTreeNoiseSampler(const Shape& shape, float sigma_min,
                                                   float sigma_max, uint64_t seed)
    : sign_(sigma_min < sigma_max ? 1.0f : -1.0f),
      tree_(sigma_min < sigma_max ? sigma_min : sigma_max,
            sigma_min < sigma_max ? sigma_max : sigma_min, shape, seed) {}

Result<HostTensor> BrownianTreeNoiseSampler::draw(float sigma, float sigma_next) {
  const bool ordered = sigma < sigma_next;
  const float lo = ordered ? sigma : sigma_next, hi = ordered ? sigma_next : sigma;
  const float sign = sign_ * (ordered ? 1.0f : -1.0f);
  HR_ASSIGN_OR_RETURN(HostTensor w, tree_.increment(double(lo), double(hi)));
  const float denom = std::sqrt(std::fabs(sigma_next - sigma));
  float* p = w.f32();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = (p[i] * sign) / denom;
  return w;
}

}  // namespace hr
