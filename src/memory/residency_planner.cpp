// The residency planner (memory policy): which weights of a compiled graph stream, the staging
// ring's size and where each streamed weight lies in it, and the copy schedule. Note [changing
// residency] in residency_planner.h says where its rules are.
#include "core/alignment.h"
#include "memory/residency_planner.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <tuple>

#include "core/bytes.h"

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
//    the weight's first reader wait for the copy (Note [streamed execution] in
//    graph/stream_copies.cpp). A copy that would have to wait for its own reader means the ring is too small.

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
// copy would have to wait for a node at or after its own first reader. `after_t[k]`: the clock
// time (Note [node clock]) through the node weight k's copy waits for (0: none).
bool place(const std::vector<WeightUse>& uses, const std::vector<bool>& streamed, uint64_t ring,
           ResidencyPlan& p, std::vector<double>& after_t) {
  struct Held {
    uint64_t begin, end;
    int32_t last;
    double t_last;
  };
  std::vector<Held> held;  // this call's weights in the ring now
  after_t.assign(uses.size(), 0);
  p.offset.assign(uses.size(), -1);
  p.copy_after.assign(uses.size(), -1);
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
        if (h.last > after) after_t[k] = h.t_last;
        after = std::max(after, h.last);
      } else {
        held[kept++] = h;
      }
    }
    held.resize(kept);
    if (after >= uses[k].first) return false;
    p.offset[k] = int64_t(head);
    p.copy_after[k] = after;
    held.push_back(Held{head, head + size, uses[k].last, uses[k].t_last});
    head += size;
  }
  return true;
}

// Note [ring choice]
// The smallest ring leaves the most bytes resident, but it also bounds how far copies run ahead:
// while the graph computes with resident weights (the deep low-resolution blocks of a UNet) the
// copy stream fills the ring and then idles, and the streamed weights of the next
// high-resolution blocks arrive later than their compute needs them. A larger ring streams a few
// more bytes but lets copies use that idle time. So with the device's copy rate the planner runs
// the call's schedule on the node clock (Note [node clock]): compute advances node by node, a
// copy of b bytes takes b / rate and starts when the copy stream is free and the node it waits
// for (copy_after) has ended, and a node starts only when its weights have arrived; what compute
// waits in total (the stall) decides between candidate rings. The clock is coarse, and on the
// H200 taking the least estimated stall alone once chose a 675 MiB ring for SDXL at 75 % that
// streamed 0.5 GiB more per step and ran 16 % slower than the smallest ring (with a clock of
// FLOPs alone). So a larger ring is taken only when its estimated stall plus the copy time of its
// extra bytes is clearly (10 %) below the smallest ring's stall (plan_score).
struct Schedule {
  double stall = 0;       // seconds compute waits in total
  size_t worst = SIZE_MAX;  // the streamed weight whose late copy made compute wait longest
  size_t busy_from = 0;   // the first of the back-to-back copies that ended with `worst`'s
  // The copy stream's idle intervals [from, to) in call seconds (stalls included), in order, and
  // the call's stall after each node (node, delay), increasing.
  std::vector<std::pair<double, double>> idle;
  std::vector<std::pair<int32_t, double>> stalls;

  double delay_at(int32_t node) const {
    auto it = std::upper_bound(stalls.begin(), stalls.end(), node,
                               [](int32_t n, const std::pair<int32_t, double>& s) { return n < s.first; });
    return it == stalls.begin() ? 0.0 : std::prev(it)->second;
  }
  // Seconds the copy stream idles within [from, to).
  double idle_within(double from, double to) const {
    double sum = 0;
    for (const auto& [a, b] : idle)
      if (b > from && a < to) sum += std::min(b, to) - std::max(a, from);
    return sum;
  }
};

Schedule simulate(const std::vector<WeightUse>& uses, const ResidencyPlan& p,
                  const std::vector<double>& after_t, double rate) {
  Schedule s;
  double copy_free = 0, worst_jump = 0;
  size_t busy_from = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    if (!p.streamed(k)) continue;
    const int32_t after = p.copy_after[k];
    const double source = after < 0 ? 0 : after_t[k] + s.delay_at(after);
    if (source > copy_free) {
      s.idle.emplace_back(copy_free, source);
      busy_from = k;
    }
    copy_free = std::max(copy_free, source) + double(uses[k].bytes) / rate;
    const double need = uses[k].t_first + s.stall;
    if (copy_free > need) {
      const double jump = copy_free - need;
      s.stall += jump;
      s.stalls.emplace_back(uses[k].first, s.stall);
      if (jump > worst_jump) {
        worst_jump = jump;
        s.worst = k;
        s.busy_from = busy_from;
      }
    }
  }
  s.idle.emplace_back(copy_free, 1e30);  // idle after the last copy
  return s;
}

// The plan for a given streamed set in a ring of `ring` bytes: offsets, the copy schedule, the
// byte counts and (with a copy rate) the estimated stall; false when the ring cannot hold what
// the graph reads at once. `sched`, when given, receives the simulated schedule.
bool plan_streamed(const std::vector<WeightUse>& uses, const std::vector<bool>& streamed,
                   uint64_t room, uint64_t ring, const ResidencyOptions& options, ResidencyPlan& q,
                   Schedule* sched = nullptr) {
  q = ResidencyPlan();
  q.room = room;
  std::vector<double> after_t;
  if (!place(uses, streamed, ring, q, after_t)) return false;
  q.ring_bytes = ring;
  for (size_t k = 0; k < uses.size(); ++k) {
    if (streamed[k]) {
      q.largest_streamed = std::max(q.largest_streamed, uses[k].bytes);
      q.streamed_bytes += uses[k].bytes;
      ++q.streamed_count;
    } else {
      q.resident_bytes += uses[k].bytes;
    }
  }
  if (options.copy_bytes_per_s > 0) {
    Schedule s = simulate(uses, q, after_t, options.copy_bytes_per_s);
    q.stall_s = s.stall;
    q.stall_bytes = s.stall * options.copy_bytes_per_s;
    if (sched) *sched = std::move(s);
  }
  return true;
}

// Note [spreading copies]
// Resident by reuse alone (Note [residency plan]) keeps the deep low-resolution blocks resident
// and streams the high-resolution ends of a UNet, so a step's copies cluster at its start and
// end while the copy stream idles through the middle: on the H200 an SD1.5 step with 82 % of its
// weights resident waited 2.5 ms for copies although its 297 MiB need 5.4 ms of copying against
// 7.6 ms of compute. With a copy rate the planner then improves the streamed set by swaps: the
// simulated schedule names the copy that made compute wait longest and the run of back-to-back
// copies before it; the largest weight of that run becomes resident, paid for by streaming
// resident weights (not the small ones) whose first reader comes where the copy stream idles
// within a ring's length of copying before it, the idlest first, until as many bytes are freed.
// A swap is kept only when the whole schedule's estimated stall drops (every candidate is
// simulated); a weight whose swap was refused is not tried again. The ring and the room are
// unchanged, so the plan still fits exactly where it did. A second candidate comes from the
// clock directly (streamed_on_clock); the one that waits least is kept.
//
// On by default. Spread plans once looked fast only when timed node by node and slow as captured
// replays or plain runs: the executor made the residency plan on the host before every run, and
// planning on the clock costs tens of ms of CPU for SDXL's 1680 weights, time the GPU idled in
// untimed runs (a timed run's clock starts after it). With plans made once per (compiled graph,
// room) (Note [residency cache] in planned_residency.cpp) the captured replays run as their timed
// runs do, faster than by reuse at every budget (bench/PERF_NOTES.md, Streaming v3 and v4).
// ResidencyOptions::spread = false keeps the set by reuse alone (the ring choice still uses the
// clock).
//
// Plans `streamed` into q and improves it by swaps; false when the ring cannot hold it at all.
bool spread_copies(const std::vector<WeightUse>& uses, std::vector<bool>& streamed, uint64_t room,
                   uint64_t ring, const ResidencyOptions& options, ResidencyPlan& q) {
  const double rate = options.copy_bytes_per_s;
  Schedule s;
  if (!plan_streamed(uses, streamed, room, ring, options, q, &s)) return false;
  size_t swaps = 0;
  std::vector<bool> tried(uses.size(), false);
  const double lead = double(ring) / rate;  // how far ahead of its reader a copy can run
  for (int round = 0; round < 256 && s.worst != SIZE_MAX && s.stall > 1e-6; ++round) {
    size_t take = SIZE_MAX;  // the largest untried streamed weight of the late run
    for (size_t k = s.busy_from; k <= s.worst; ++k)
      if (streamed[k] && !tried[k] && (take == SIZE_MAX || uses[k].bytes > uses[take].bytes))
        take = k;
    if (take == SIZE_MAX) break;
    tried[take] = true;
    // Resident weights by the copy stream's idle time before their reader, idlest first (then
    // released earliest), among those released before the late copy's reader needs it.
    std::vector<std::tuple<double, double, size_t>> idle;
    for (size_t k = 0; k < uses.size(); ++k) {
      if (streamed[k] || uses[k].bytes < options.small_bytes) continue;
      if (uses[k].t_last >= uses[s.worst].t_first) continue;
      const double need = uses[k].t_first + s.delay_at(uses[k].first);
      const double free_s = s.idle_within(need - lead, need);
      if (free_s * rate > double(uses[k].bytes)) idle.emplace_back(-free_s, uses[k].t_last, k);
    }
    std::sort(idle.begin(), idle.end());
    std::vector<bool> next = streamed;
    next[take] = false;
    uint64_t freed = 0;
    for (const auto& [idle_s, released, k] : idle) {
      if (freed >= uses[take].bytes) break;
      next[k] = true;
      freed += uses[k].bytes;
    }
    if (freed < uses[take].bytes) continue;
    ResidencyPlan candidate;
    Schedule cs;
    if (!plan_streamed(uses, next, room, ring, options, candidate, &cs)) continue;
    if (cs.stall >= s.stall * 0.99 || candidate.device_bytes() > room) continue;
    streamed = std::move(next);
    q = std::move(candidate);
    q.swaps = ++swaps;
    s = std::move(cs);
  }
  return true;
}

// The streamed set chosen on the clock (Note [spreading copies]): in first-use order, a weight
// streams when the copy stream, running as far ahead as a ring of `ring` bytes allows (a FIFO of
// the weights streamed so far), can deliver it before its reader, until as many bytes stream as
// the room requires; if that is not enough, the rest stream in reverse `order` (the most reuse
// first). Empty when even that cannot free enough room.
std::vector<bool> streamed_on_clock(const std::vector<WeightUse>& uses,
                                    const std::vector<size_t>& order, uint64_t room, uint64_t ring,
                                    const ResidencyOptions& options) {
  uint64_t total = 0;
  for (const WeightUse& u : uses) total += u.bytes;
  const uint64_t keep = room - ring, need = total > keep ? total - keep : 0;
  std::vector<bool> streamed(uses.size(), false);
  std::deque<std::pair<uint64_t, double>> held;  // (bytes, released at) in copy order
  uint64_t occupied = 0, streamed_bytes = 0;
  double copy_free = 0;
  for (size_t k = 0; k < uses.size() && streamed_bytes < need; ++k) {
    const uint64_t b = uses[k].bytes;
    if (b < options.small_bytes || b > ring) continue;
    double release = 0;
    uint64_t occ = occupied;
    size_t popped = 0;
    while (occ + b > ring && popped < held.size()) {
      release = std::max(release, held[popped].second);
      occ -= held[popped++].first;
    }
    const double done = std::max(copy_free, release) + double(b) / options.copy_bytes_per_s;
    if (done > uses[k].t_first) continue;
    held.erase(held.begin(), held.begin() + std::ptrdiff_t(popped));
    held.emplace_back(b, uses[k].t_last);
    occupied = occ + b;
    copy_free = done;
    streamed[k] = true;
    streamed_bytes += b;
  }
  for (auto it = order.rbegin(); it != order.rend() && streamed_bytes < need; ++it)
    if (!streamed[*it] && uses[*it].bytes <= ring) {
      streamed[*it] = true;
      streamed_bytes += uses[*it].bytes;
    }
  if (streamed_bytes < need) return {};
  return streamed;
}

// Fills `room - ring` with resident weights in `order`, places the rest in the ring and, with a
// copy rate, also plans the streamed set on the clock and spreads the copies of both (Note
// [spreading copies]), keeping the one that waits least; false when the ring cannot hold what
// the graph reads at once (`grow` then says by how much to grow it).
bool plan_ring(const std::vector<WeightUse>& uses, const std::vector<size_t>& order, uint64_t room,
               uint64_t ring, const ResidencyOptions& options, ResidencyPlan& q, uint64_t& grow) {
  uint64_t left = room - ring;
  std::vector<bool> streamed(uses.size(), true);
  for (size_t k : order)
    if (uses[k].bytes <= left) {
      streamed[k] = false;
      left -= uses[k].bytes;
    }
  grow = 0;
  for (size_t k = 0; k < uses.size(); ++k)
    if (streamed[k]) grow = std::max(grow, uses[k].bytes);
  if (options.copy_bytes_per_s <= 0 || !options.spread)
    return plan_streamed(uses, streamed, room, ring, options, q);
  if (!spread_copies(uses, streamed, room, ring, options, q)) return false;
  std::vector<bool> timed = streamed_on_clock(uses, order, room, ring, options);
  ResidencyPlan t;
  if (!timed.empty() && spread_copies(uses, timed, room, ring, options, t) &&
      t.device_bytes() <= room && t.stall_s < q.stall_s)
    q = std::move(t);
  return true;
}

// The score of a plan against the smallest ring's `base` (lower is better): its estimated stall
// plus the copy time of the bytes it streams beyond base's, as bytes. The estimate is coarse
// (the clock is a model, copies of many small tensors do not reach the measured bandwidth), so
// a larger ring must save more estimated stall than its extra bytes cost outright (Note [ring
// choice]).
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
  uint64_t total = 0;
  for (const WeightUse& u : uses) total += u.bytes;
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
  // The smallest ring is searched without the copy rate (feasibility does not depend on it).
  ResidencyOptions fit_only = options;
  fit_only.copy_bytes_per_s = 0;
  uint64_t ring = std::min(depth * streamed_largest, std::max(2 * streamed_largest, room / 256 * 256));
  bool found = false;
  uint64_t smallest_ring = 0;
  for (int round = 0; round < 16 && ring <= room; ++round) {
    ResidencyPlan q;
    uint64_t grow = 0;
    if (!plan_ring(uses, order, room, ring, fit_only, q, grow)) {
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
    const uint64_t smaller = std::max<uint64_t>(depth * p.largest_streamed, kDeviceAlignment);
    if (smaller >= ring) break;
    ring = smaller;  // a smaller ring leaves more room for residents: plan again
  }
  if (!found || options.copy_bytes_per_s <= 0) return found;
  // Note [ring choice]: the smallest ring with its copies spread (Note [spreading copies]), then
  // larger rings, kept when they score better.
  uint64_t grow = 0;
  if (!plan_ring(uses, order, room, smallest_ring, options, p, grow)) return false;
  const ResidencyPlan base = p;
  double best = plan_score(p, base);
  for (uint64_t r = smallest_ring * 2; r <= room && r <= 2 * total; r *= 2) {
    ResidencyPlan q;
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
  fit_only.copy_bytes_per_s = 0;
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

}  // namespace hr
