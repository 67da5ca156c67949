// The residency planner: resident set by cost, the staging ring, the copy schedule.
#include "graph/residency.h"

#include <algorithm>
#include <numeric>

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

std::vector<WeightUse> weight_uses(const Graph& g, const ArenaPlan& plan) {
  std::vector<int32_t> index(g.values().size(), -1);
  std::vector<WeightUse> uses;
  const std::vector<Node>& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
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
        uses.push_back(u);
      }
      uses[size_t(k)].last = int32_t(i);
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
// copy would have to wait for a node at or after its own first reader.
bool place(const std::vector<WeightUse>& uses, const std::vector<bool>& streamed, uint64_t ring,
           ResidencyPlan& p) {
  struct Held {
    uint64_t begin, end;
    int32_t last;
  };
  std::vector<Held> held;  // this call's weights in the ring now
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
        after = std::max(after, h.last);
      } else {
        held[kept++] = h;
      }
    }
    held.resize(kept);
    if (after >= uses[k].first) return false;
    p.offset[k] = int64_t(head);
    p.copy_after[k] = after;
    held.push_back(Held{head, head + size, uses[k].last});
    head += size;
  }
  return true;
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
  const std::vector<size_t> order = resident_order(uses, options);
  const uint64_t depth = std::max<uint32_t>(2, options.depth);
  // `depth` of the largest weights, or what the room allows down to two of them.
  uint64_t ring = std::min(depth * largest, std::max(2 * largest, room / 256 * 256));
  bool found = false;
  for (int round = 0; round < 16 && ring <= room; ++round) {
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
    ResidencyPlan q;
    q.room = room;
    q.offset.assign(uses.size(), -1);
    q.copy_after.assign(uses.size(), -1);
    if (!place(uses, streamed, ring, q)) {
      // The graph reads more streamed bytes at once than the ring holds: grow it.
      if (ring >= streamed_bytes + biggest) break;
      ring += biggest;
      continue;
    }
    if (!found || resident > p.resident_bytes) {
      p = std::move(q);
      p.ring_bytes = ring;
      p.resident_bytes = resident;
      p.streamed_bytes = streamed_bytes;
      p.largest_streamed = biggest;
      p.streamed_count = size_t(std::count(streamed.begin(), streamed.end(), true));
      found = true;
    }
    const uint64_t smaller = std::max<uint64_t>(depth * biggest, 256);
    if (smaller >= ring) break;
    ring = smaller;  // a smaller ring leaves more room for residents: plan again
  }
  return found;
}

}  // namespace

uint64_t residency_min_room(const std::vector<WeightUse>& uses, const ResidencyOptions& options) {
  // Weights are multiples of 256 bytes, so a plan within r bytes is the plan within r rounded
  // down to 256: search in those units.
  uint64_t lo = 0, hi = 0;
  for (const WeightUse& u : uses) hi += u.bytes / 256;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    ResidencyPlan p;
    if (plan_into(uses, mid * 256, options, p))
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
