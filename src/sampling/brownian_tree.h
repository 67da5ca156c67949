// ComfyUI's Brownian-tree noise for the SDE samplers (BrownianTreeNoiseSampler over one
// torchsde.BrownianTree), seeded the way torchsde seeds it (numpy.random.SeedSequence).
// See Note [SDE noise] in samplers.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hr {

// numpy.random.SeedSequence(entropy, spawn_key=..., pool_size=...): the entropy pool and
// generate_state(n) (uint32 words), for integer entropy and spawn-key entries.
class SeedSequence {
 public:
  SeedSequence(uint64_t entropy, const std::vector<uint64_t>& spawn_key = {},
               uint32_t pool_size = 4);
  std::vector<uint32_t> generate_state(size_t n_words) const;

 private:
  std::vector<uint32_t> pool_;
};

// torchsde.BrownianTree(t0, zeros(shape), t1, entropy) on the CPU in float32: a BrownianInterval
// with halfway_tree=True, tol=1e-6, pool_size=24 and no Levy area. Each interval of the dyadic
// tree over [t0, t1] (ends rounded to 6 decimals) draws its midpoint by a Brownian bridge from
// torch.randn seeded by its own SeedSequence, so increments depend only on the entropy and the
// query, never on the query order. Recently used interval values are cached (LRU).
class BrownianTree {
 public:
  BrownianTree(double t0, double t1, Shape shape, uint64_t entropy);
  BrownianTree(const BrownianTree&) = delete;
  BrownianTree& operator=(const BrownianTree&) = delete;

  // W(tb) - W(ta) for ta <= tb (clamped to [t0, t1] as torchsde does).
  Result<HostTensor> increment(double ta, double tb);
  const Shape& shape() const { return shape_; }

 private:
  struct Node {
    double start, end;
    int32_t parent;
    bool is_left;
    uint64_t spawn_key;
    uint32_t depth;
    // Set once split:
    int32_t left = -1, right = -1;
    double midway = 0;
    uint32_t w_seed = 0;
  };
  void node_split(int32_t id);
  Status node_locate(double ta, double tb, std::vector<int32_t>& out);
  const HostTensor& node_w(int32_t id);
  void cache_put(int32_t id, HostTensor w);

  Shape shape_;
  uint64_t entropy_;
  std::vector<Node> nodes_;  // nodes_[0] is [t0, t1]
  HostTensor root_w_;
  std::list<int32_t> lru_;  // most recent first
  std::unordered_map<int32_t, std::pair<HostTensor, std::list<int32_t>::iterator>> cache_;
};

// ComfyUI BrownianTreeNoiseSampler(x, sigma_min, sigma_max, seed, cpu=True) with its default
// identity transform, unbatched (one tree over the whole latent shape).
class BrownianTreeNoiseSampler {
 public:
  BrownianTreeNoiseSampler(const Shape& shape, float sigma_min, float sigma_max, uint64_t seed);
  // noise_sampler(sigma, sigma_next): tree(sorted) * sign / sqrt(|sigma_next - sigma|), ~N(0, 1).
  Result<HostTensor> draw(float sigma, float sigma_next);

 private:
  float sign_;
  BrownianTree tree_;
};

}  // namespace hr
