// The residency planner: resident set by cost, ring slots, copy schedule.
#include "graph/residency.h"

#include <algorithm>
#include <numeric>

#include "core/bytes.h"
#include "graph/planner.h"

namespace hr {

// Note [residency plan]
// When a graph's weights and its arena do not fit the room the budget leaves, some weights
// stream: on every call they are copied from (pinned) host memory into a ring of equal staging
// slots on a copy stream, a few weights ahead of the compute that reads them. The plan decides,
// once per compiled graph and room:
//  - which weights stay resident: small ones first (a copy of a few KiB costs its latency, not
//    its bytes), then those with the least reuse, i.e. the most bytes per FLOP (the deep
//    1280-channel blocks and the attention projections at low resolution), whose copies could
//    not hide behind their compute; high-resolution convolutions stream because their compute
//    covers their copy. The streamed bytes per call are the same either way (room decides them);
//    the order only decides how well copies overlap compute.
//  - the ring: `depth` slots (more when one node reads more streamed weights at once), each as
//    large as the largest streamed weight. A larger ring leaves less room for resident weights,
//    so the choice is iterated until the slot size stops shrinking.
//  - for each streamed weight its slot (the one freed earliest) and the node after which its
//    copy may start: the last reader of the slot's previous occupant. The executor records an
//    event after that node and makes the copy wait for it, and makes the weight's first reader
//    wait for the copy (Note [streamed execution] in executor.cpp).

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

// The most streamed weights any one node range holds at once (slots the ring needs at least).
uint32_t max_overlap(const std::vector<WeightUse>& uses, const std::vector<bool>& streamed) {
  std::vector<std::pair<int32_t, int>> ev;  // (node, +1 at first / -1 after last)
  for (size_t k = 0; k < uses.size(); ++k)
    if (streamed[k]) {
      ev.emplace_back(uses[k].first, 1);
      ev.emplace_back(uses[k].last + 1, -1);
    }
  std::sort(ev.begin(), ev.end());  // -1 before +1 at the same node: a slot freed is reusable
  int cur = 0, best = 0;
  for (auto [t, d] : ev) best = std::max(best, cur += d);
  return uint32_t(best);
}

// Slots and copy_after for the streamed weights, in first-use order (Note [residency plan]).
void assign_slots(const std::vector<WeightUse>& uses, ResidencyPlan& p) {
  std::vector<int32_t> free_after(p.slots, -1);  // last reader of each slot's occupant
  for (size_t k = 0; k < uses.size(); ++k) {
    if (p.slot[k] < 0) continue;
    const auto it = std::min_element(free_after.begin(), free_after.end());
    const int32_t j = int32_t(it - free_after.begin());
    p.slot[k] = j;
    p.copy_after[k] = *it;
    *it = uses[k].last;
  }
}

// residency_plan without the error message: false when nothing fits.
bool plan_into(const std::vector<WeightUse>& uses, uint64_t room, const ResidencyOptions& options,
               ResidencyPlan& p) {
  p = ResidencyPlan();
  p.room = room;
  p.slot.assign(uses.size(), -1);
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
  uint32_t min_slots = 2;
  const uint32_t depth = std::max(min_slots, options.depth);
  uint64_t slot_bytes = largest;
  std::vector<bool> best;  // the valid streamed set with the most resident bytes
  uint64_t best_resident = 0, best_slot = 0;
  uint32_t best_slots = 0;
  for (int round = 0; round < 8; ++round) {
    uint32_t slots = std::max(depth, min_slots);
    while (slots > min_slots && uint64_t(slots) * slot_bytes > room) --slots;
    if (uint64_t(slots) * slot_bytes > room) break;
    uint64_t left = room - uint64_t(slots) * slot_bytes, resident = 0;
    std::vector<bool> streamed(uses.size(), true);
    for (size_t k : order)
      if (uses[k].bytes <= left) {
        streamed[k] = false;
        left -= uses[k].bytes;
        resident += uses[k].bytes;
      }
    uint64_t biggest = 0;
    for (size_t k = 0; k < uses.size(); ++k)
      if (streamed[k]) biggest = std::max(biggest, uses[k].bytes);
    const uint32_t need = std::max(slots, max_overlap(uses, streamed));
    if (resident + uint64_t(need) * biggest <= room && (best.empty() || resident > best_resident)) {
      best = streamed;
      best_resident = resident;
      best_slot = biggest;
      best_slots = need;
    }
    if (need > slots) {
      min_slots = need;  // one node reads more streamed weights at once: widen the ring
      continue;
    }
    if (biggest == slot_bytes) break;
    slot_bytes = biggest;  // smaller slots leave more room for residents: plan again
  }
  if (best.empty()) return false;
  p.slots = best_slots;
  p.slot_bytes = best_slot;
  p.resident_bytes = best_resident;
  for (size_t k = 0; k < uses.size(); ++k)
    if (best[k]) {
      p.slot[k] = 0;
      p.streamed_bytes += uses[k].bytes;
      ++p.streamed_count;
    }
  assign_slots(uses, p);
  return true;
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
                    "weights need at least {} on the device (a ring of staging slots for the "
                    "largest weights, {} each) but only {} are left for them",
                    bytes_format(residency_min_room(uses, options)), bytes_format(largest),
                    bytes_format(room));
}



std::string residency_describe(const ResidencyPlan& p, const std::vector<WeightUse>& uses) {
  const uint64_t total = p.resident_bytes + p.streamed_bytes;
  if (!p.streams())
    return fmt::format("all {} weights resident ({} tensors)", bytes_format(total), uses.size());
  return fmt::format("streams {} of {} weights ({} of {} tensors) through {} slots of {}; {} resident",
                     bytes_format(p.streamed_bytes), bytes_format(total), p.streamed_count,
                     uses.size(), p.slots, bytes_format(p.slot_bytes),
                     bytes_format(p.resident_bytes));
}

}  // namespace hr
