// The residency planner: resident set by cost, the staging ring, the copy schedule.
#include "graph/residency.h"

#include <algorithm>
#include <numeric>

#include "backend/op.h"
#include "core/bytes.h"
#include "graph/planner.h"

namespace hr {

// Note [residency plan]
// When a graph's weights and its arena do not fit the room the budget leaves, some weights
// stream: on every call they are copied from (pinned) host memory into a staging ring on a copy
// stream, ahead of the compute that reads them. The plan decides, once per compiled graph and
// room:
//  - which weights stay resident: small ones first (a copy of a few KiB costs its latency, not
//    its bytes), then those with the least reuse, i.e. the most bytes per FLOP (the deep
//    1280-channel blocks and the attention projections at low resolution), whose copies could
//    not hide behind their compute; high-resolution convolutions stream because their compute
//    covers their copy. The streamed bytes per call are the same either way (room decides them);
//    the order only decides how well copies overlap compute.
//  - the ring: `depth` times the largest streamed weight, grown when that cannot hold what
//    the graph reads at once. A larger ring leaves less room for resident weights, so the choice
//    is iterated until the ring stops shrinking.
//  - where each streamed weight goes: one after the other in first-use order, wrapping to the
//    start when the next does not fit before the end (a byte ring, not slots of the largest
//    size: many small weights are in flight at once, so the copy stream rarely waits), and the
//    node after which its copy may start: the last reader of the earlier weights it overwrites.
//    The executor records an event after that node and makes the copy wait for it, and makes
//    the weight's first reader wait for the copy (Note [streamed execution] in executor.cpp).
//    A copy that would have to wait for its own reader means the ring is too small.

namespace {

double node_flops(const Graph& g, const Node& n) {
  std::vector<TensorDesc> in;
  in.reserve(n.inputs.size());
  for (ValueId x : n.inputs) in.push_back(g.desc(x));
  return op_flops(n.kind, n.params, in, g.desc(n.output));
}

}  // namespace

ResidencyOptions residency_options_for(bool host_visible) {
  ResidencyOptions o;
  // Orders of magnitude, not measurements: an H200 sustains ~300 TFLOP/s in f16 against
  // ~55 GB/s over PCIe; two CPU cores ~50 GFLOP/s against ~5 GB/s of memcpy.
  o.flops_per_byte = host_visible ? 10.0 : 5000.0;
  return o;
}

std::vector<WeightUse> weight_uses(const Graph& g, const ArenaPlan& plan) {
  std::vector<int32_t> index(g.values().size(), -1);
  std::vector<WeightUse> uses;
  const std::vector<Node>& nodes = g.nodes();
  double flops = 0;  // of the nodes before node i
  for (size_t i = 0; i < nodes.size(); ++i) {
    const double before = flops;
    flops += node_flops(g, nodes[i]);
    if (plan.nodes[i].view) continue;
    for (ValueId x : nodes[i].inputs) {
      const ValueId s = g.storage_of(x);
      if (plan.values[size_t(s)].offset >= 0 || g.values()[size_t(s)].kind != ValueKind::WEIGHT)
        continue;
      int32_t& k = index[size_t(s)];
      if (k < 0) {
        k = int32_t(uses.size());
        WeightUse u;
        u.value = s;
        const uint64_t b = g.desc(s).bytes();
        u.bytes = std::max<uint64_t>(256, (b + 255) / 256 * 256);
        u.first = int32_t(i);
        const Shape& ws = g.desc(s).shape;
        const double rows = ws.rank > 0 && ws[0] > 0 ? double(ws[0]) : 1.0;
        u.reuse = double(g.desc(nodes[i].output).numel()) / rows;
        u.flops_first = before;
        uses.push_back(u);
      }
      uses[size_t(k)].last = int32_t(i);
      uses[size_t(k)].flops_last = flops;
    }
  }
  return uses;
}

namespace {

// Indices of `uses` in the order they should stay resident.
std::vector<size_t> resident_order(const std::vector<WeightUse>& uses, const ResidencyOptions& o) {
  std::vector<size_t> order(uses.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool sa = uses[a].bytes < o.small_bytes, sb = uses[b].bytes < o.small_bytes;
    if (sa != sb) return sa;
    return uses[a].reuse < uses[b].reuse;
  });
  return order;
}

// Places the streamed weights in a ring of `ring` bytes (Note [residency plan]); false when a
// copy would have to wait for a node at or after its own first reader. `after_flops[k]`: the
// FLOPs through the node weight k's copy waits for (0: none).
bool place(const std::vector<WeightUse>& uses, const std::vector<bool>& streamed, uint64_t ring,
           ResidencyPlan& p, std::vector<double>& after_flops) {
  struct Held {
    uint64_t begin, end;
    int32_t last;
    double flops_last;
  };
  std::vector<Held> held;  // this call's weights in the ring now
  after_flops.assign(uses.size(), 0);
  uint64_t head = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    if (!streamed[k]) continue;
    const uint64_t size = uses[k].bytes;
    if (size > ring) return false;
    if (head + size > ring) head = 0;
    int32_t after = -1;
    size_t kept = 0;
    for (const Held& h : held) {
      if (h.begin < head + size && head < h.end) {
        if (h.last > after) after_flops[k] = h.flops_last;
        after = std::max(after, h.last);
      } else {
        held[kept++] = h;
      }
    }
    held.resize(kept);
    if (after >= uses[k].first) return false;
    p.offset[k] = int64_t(head);
    p.copy_after[k] = after;
    held.push_back(Held{head, head + size, uses[k].last, uses[k].flops_last});
    head += size;
  }
  return true;
}

// Note [ring choice]
// The smallest ring leaves the most bytes resident, but it also bounds how far copies run ahead:
// while the graph computes with resident weights (the deep low-resolution blocks of a UNet) the
// copy stream fills the ring and then idles, and the streamed weights of the next
// high-resolution blocks arrive later than their compute needs them. A larger ring streams a few
// more bytes but lets copies use that idle time. So with a device's FLOP-per-copied-byte rate
// the planner runs the call's schedule on a clock measured in FLOPs: compute advances by each
// node's FLOPs, a copy of b bytes takes b x rate and starts when the copy stream is free and
// the node it waits for (copy_after) has ended, and a node starts only when its weights have
// arrived; what compute waits in total (the stall) decides between candidate rings. FLOPs are a
// coarse clock (attention runs below the GEMM rate, small copies below the bandwidth): on the
// H200, taking the least estimated stall alone chose a 675 MiB ring for SDXL at 75 % that
// streamed 0.5 GiB more per step and ran 16 % slower than the smallest ring. So a larger ring
// is taken only when its estimated stall plus the copy time of its extra bytes is clearly (10 %)
// below the smallest ring's stall (plan_score).
double stall_estimate(const std::vector<WeightUse>& uses, const ResidencyPlan& p,
                      const std::vector<double>& after_flops, double rate) {
  std::vector<std::pair<int32_t, double>> stalls;  // (node, delay from then on), increasing
  auto delay_at = [&stalls](int32_t node) {
    auto it = std::upper_bound(stalls.begin(), stalls.end(), node,
                               [](int32_t n, const std::pair<int32_t, double>& s) { return n < s.first; });
    return it == stalls.begin() ? 0.0 : std::prev(it)->second;
  };
  double copy_free = 0, delay = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    if (!p.streamed(k)) continue;
    const int32_t after = p.copy_after[k];
    const double source = after < 0 ? 0 : after_flops[k] + delay_at(after);
    copy_free = std::max(copy_free, source) + double(uses[k].bytes) * rate;
    const double need = uses[k].flops_first + delay;
    if (copy_free > need) {
      delay += copy_free - need;
      stalls.emplace_back(uses[k].first, delay);
    }
  }
  return delay;
}

// Fills `room - ring` with resident weights in `order` and places the rest in the ring; false
// when the ring cannot hold what the graph reads at once (`grow` then says by how much to grow).
bool plan_ring(const std::vector<WeightUse>& uses, const std::vector<size_t>& order, uint64_t room,
               uint64_t ring, const ResidencyOptions& options, ResidencyPlan& q, uint64_t& grow) {
  uint64_t left = room - ring, resident = 0, biggest = 0, streamed_bytes = 0;
  std::vector<bool> streamed(uses.size(), true);
  for (size_t k : order)
    if (uses[k].bytes <= left) {
      streamed[k] = false;
      left -= uses[k].bytes;
      resident += uses[k].bytes;
    }
  for (size_t k = 0; k < uses.size(); ++k)
    if (streamed[k]) {
      biggest = std::max(biggest, uses[k].bytes);
      streamed_bytes += uses[k].bytes;
    }
  q = ResidencyPlan();
  q.room = room;
  q.offset.assign(uses.size(), -1);
  q.copy_after.assign(uses.size(), -1);
  grow = biggest;
  std::vector<double> after_flops;
  if (!place(uses, streamed, ring, q, after_flops)) return false;
  q.ring_bytes = ring;
  q.resident_bytes = resident;
  q.streamed_bytes = streamed_bytes;
  q.largest_streamed = biggest;
  q.streamed_count = size_t(std::count(streamed.begin(), streamed.end(), true));
  if (options.flops_per_byte > 0)
    q.stall_bytes = stall_estimate(uses, q, after_flops, options.flops_per_byte) /
                    options.flops_per_byte;
  return true;
}

// The score of a plan against the smallest ring's `base` (lower is better): its estimated stall
// plus the copy time of the bytes it streams beyond base's. The estimate is coarse (FLOPs are
// not time, copies of many small tensors do not reach the measured bandwidth), so a larger ring
// must save more estimated stall than its extra bytes cost outright (Note [ring choice]).
double plan_score(const ResidencyPlan& q, const ResidencyPlan& base) {
  return q.stall_bytes + double(q.streamed_bytes - std::min(q.streamed_bytes, base.streamed_bytes));
}

// residency_plan without the error message: false when nothing fits.
bool plan_into(const std::vector<WeightUse>& uses, uint64_t room, const ResidencyOptions& options,
               ResidencyPlan& p) {
  p = ResidencyPlan();
  p.room = room;
  p.offset.assign(uses.size(), -1);
  p.copy_after.assign(uses.size(), -1);
  uint64_t total = 0, largest = 0;
  for (const WeightUse& u : uses) {
    total += u.bytes;
    largest = std::max(largest, u.bytes);
  }
  if (total <= room) {
    p.resident_bytes = total;
    return true;
  }
  if (!options.stream) return false;  // --gpu-only, `headroom bench`'s resident mode
  const std::vector<size_t> order = resident_order(uses, options);
  const uint64_t depth = std::max<uint32_t>(2, options.depth);
  // `depth` of the largest weights that would stream if the room held no ring (a large weight
  // that stays resident does not size the ring), or what the room allows down to two of them.
  uint64_t streamed_largest = 0, left = room;
  for (size_t k : order) {
    if (uses[k].bytes <= left)
      left -= uses[k].bytes;
    else
      streamed_largest = std::max(streamed_largest, uses[k].bytes);
  }
  uint64_t ring = std::min(depth * streamed_largest, std::max(2 * streamed_largest, room / 256 * 256));
  bool found = false;
  uint64_t smallest_ring = 0;
  for (int round = 0; round < 16 && ring <= room; ++round) {
    ResidencyPlan q;
    uint64_t grow = 0;
    if (!plan_ring(uses, order, room, ring, options, q, grow)) {
      // The graph reads more streamed bytes at once than the ring holds: grow it.
      if (ring >= total + grow) break;
      ring += grow;
      continue;
    }
    if (!found || q.resident_bytes > p.resident_bytes) {
      p = std::move(q);
      found = true;
    }
    smallest_ring = p.ring_bytes;
    const uint64_t smaller = std::max<uint64_t>(depth * p.largest_streamed, 256);
    if (smaller >= ring) break;
    ring = smaller;  // a smaller ring leaves more room for residents: plan again
  }
  if (!found || options.flops_per_byte <= 0) return found;
  // Note [ring choice]: larger rings, kept when they score better than the smallest.
  const ResidencyPlan base = p;
  double best = plan_score(p, base);
  for (uint64_t r = smallest_ring * 2; r <= room && r <= 2 * total; r *= 2) {
    ResidencyPlan q;
    uint64_t grow = 0;
    if (!plan_ring(uses, order, room, r / 256 * 256, options, q, grow)) continue;
    const double score = plan_score(q, base);
    if (score < 0.9 * best) {
      best = score;
      p = std::move(q);
    }
  }
  return true;
}

}  // namespace

uint64_t residency_min_room(const std::vector<WeightUse>& uses, const ResidencyOptions& options) {
  // Weights are multiples of 256 bytes, so a plan within r bytes is the plan within r rounded
  // down to 256: search in those units.
  // Whether a plan exists does not depend on the rate (Note [ring choice] only picks among
  // plans that fit), so the search skips the stall estimates.
  ResidencyOptions fit_only = options;
  fit_only.flops_per_byte = 0;
  uint64_t lo = 0, hi = 0;
  for (const WeightUse& u : uses) hi += u.bytes / 256;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    ResidencyPlan p;
    if (plan_into(uses, mid * 256, fit_only, p))
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi * 256;
}

Result<ResidencyPlan> residency_plan(const std::vector<WeightUse>& uses, uint64_t room,
                                     const ResidencyOptions& options) {
  ResidencyPlan p;
  if (plan_into(uses, room, options, p)) return p;
  uint64_t largest = 0;
  for (const WeightUse& u : uses) largest = std::max(largest, u.bytes);
  if (!options.stream)
    return make_error(ErrorCode::OUT_OF_MEMORY,
                      "weights need {} resident on the device (streaming is off) but only {} are "
                      "left for them",
                      bytes_format(residency_min_room(uses, options)), bytes_format(room));
  return make_error(ErrorCode::OUT_OF_MEMORY,
                    "weights need at least {} on the device (a staging ring for the largest "
                    "weights, {} each) but only {} are left for them",
                    bytes_format(residency_min_room(uses, options)), bytes_format(largest),
                    bytes_format(room));
}



std::string residency_describe(const ResidencyPlan& p, const std::vector<WeightUse>& uses) {
  const uint64_t total = p.resident_bytes + p.streamed_bytes;
  if (!p.streams())
    return fmt::format("all {} weights resident ({} tensors)", bytes_format(total), uses.size());
  return fmt::format("streams {} of {} weights ({} of {} tensors) through a {} ring; {} resident",
                     bytes_format(p.streamed_bytes), bytes_format(total), p.streamed_count,
                     uses.size(), bytes_format(p.ring_bytes), bytes_format(p.resident_bytes));
}

}  // namespace hr
