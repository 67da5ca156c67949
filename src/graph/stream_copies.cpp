// The copy schedule of a streamed run on the copy stream: coalesced host-to-device copies into
// the staging ring, ordered against compute by events.
#include "graph/stream_copies.h"

#include <algorithm>

#include <fmt/format.h>

#include "graph/executor.h"

namespace hr {

// Note [streamed execution]
// When a graph's weights do not fit the room the budget leaves (Executor::weights_room), the
// residency plan (Note [residency plan] in memory/residency_planner.cpp) keeps some resident and
// streams the rest through a staging ring (Pool::STAGING) on a copy stream of its own:
//  - at the start the compute stream records `start` and the copy stream waits for it, so no
//    copy of this run overwrites ring bytes that the previous run may still read;
//  - a weight's copy is issued right after the node named by copy_after (the last reader of the
//    earlier weights whose bytes it overwrites) and waits for that node's `freed` event; it then
//    records its group's `copied` event (Note [coalesced copies]), and the weight's first reader
//    waits for it. CUDA events refer to their latest record when a wait is issued, and every
//    wait here is issued after the record it needs and before the next one (once per run), so
//    one event per node and one per copy group suffice;
//  - at the end the compute stream waits for `copies_done` (the copy stream's last record), which
//    also joins the copy stream back when the run is captured: a streamed step replays as one
//    CUDA graph, copies and their event edges included (the ring and the pinned host copies
//    keep their addresses).
// The copy stream runs as far ahead of compute as the ring allows; when copies are slower than
// compute the step takes streamed bytes / bandwidth, which is the floor.

// Note [inputs before the ring]
// A streamed run's first copies fill the whole ring (every weight whose ring bytes no earlier
// weight of the run uses may start at once), tens to hundreds of MiB. Host-to-device copies of
// one direction share the copy engine, so an input copied on the compute stream after them (the
// latent before the first convolution, the text context before the first cross-attention)
// waited for all of them: on the H200 the first tenth of a streamed SD1.5 step took 1.4-3.5 ms
// longer than resident, and SDXL's latent copy 2.7-4.1 ms (Note [streaming timeline]). Inputs
// therefore live from the first node (Note [inputs in the arena] in planner.cpp) and are all
// copied before the ring's first copies are issued (ops_issue in executor_run.cpp).

// Note [coalesced copies]
// Streamed weights lie one after the other in the ring (Note [residency plan]) and, since the
// weight source lays out their page-locked host copies in the same order and padding
// (WeightSource::weight_host_all), one after the other in host memory too. Each transfer costs
// ~10 us beyond its bytes on the H200 (an SD1.5 step streams 686 tensors, many of a few KiB), so
// the copies that may start after the same node and are neighbours on both sides go as one
// transfer of up to ResidencyOptions::group_bytes, with one event; a copy never waits for a
// later node than its own. The compute stream waits for a group once (the copy stream is in
// order, so a wait for a later group covers the earlier ones), and the copy stream waits for a
// node's `freed` event only when no later one was waited for already.

Status CopyLane::prepare(size_t weights, size_t nodes) {
  auto make = [&] { return backend_.event_create(); };
  if (!stream_) {
    HR_ASSIGN_OR_RETURN(stream_, backend_.stream_create());
    HR_ASSIGN_OR_RETURN(start_, make());
    HR_ASSIGN_OR_RETURN(done_, make());
  }
  for (auto v : {std::pair{&copied_, weights}, std::pair{&freed_, nodes}})
    while (v.first->size() < v.second) {
      HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, make());
      v.first->push_back(std::move(e));
    }
  return Status();
}

void CopyLane::sync() {
  if (stream_) (void)backend_.stream_sync(stream_.get());
}

void CopyLane::schedule(RunState& r) {
  const size_t n = std::max<size_t>(r.g.nodes().size(), 1);
  r.copies.first_at.assign(n, {});
  r.copies.last_at.assign(n, {});
  for (size_t k = 0; k < r.uses.size(); ++k)
    if (r.res.streamed(k)) {
      r.copies.first_at[size_t(r.uses[k].first)].push_back(k);
      r.copies.last_at[size_t(r.uses[k].last)].push_back(k);
      r.copies.order.push_back(k);  // uses are in first-use order already
    }
}

Status CopyLane::begin(RunState& r, uint64_t group_bytes) {
  HR_TRY(backend_.event_record(start_.get(), r.at.stream));
  HR_TRY(backend_.stream_wait_event(stream_.get(), start_.get()));
  return issue(r, -1, group_bytes);
}

Status CopyLane::before_node(RunState& r, size_t i) {
  CopySchedule& c = r.copies;
  for (size_t k : c.first_at[i])
    if (c.group[k] > c.compute_waited) {  // Note [coalesced copies]
      HR_TRY(backend_.stream_wait_event(r.at.stream, copied_[size_t(c.group[k])].get()));
      c.compute_waited = c.group[k];
    }
  for (size_t k : c.first_at[i]) {  // Note [patched streaming]: patched in the ring, in order
    if (!r.at.patched[k]) continue;
    const Value& v = r.g.values()[size_t(r.uses[k].value)];
    HR_TRY(r.at.source->weight_patch_streamed(WeightRequest{v.name, v.desc, v.layout},
                                              r.at.ptr[size_t(r.uses[k].value)], r.at.stream));
  }
  return Status();
}

Status CopyLane::after_node(RunState& r, size_t i, uint64_t group_bytes) {
  if (r.copies.last_at[i].empty()) return Status();
  HR_TRY(backend_.event_record(freed_[i].get(), r.at.stream));
  return issue(r, int32_t(i), group_bytes);
}

Status CopyLane::end(RunState& r) {
  HR_TRY(backend_.event_record(done_.get(), stream_.get()));
  return backend_.stream_wait_event(r.at.stream, done_.get());
}

Status CopyLane::issue(RunState& r, int32_t after_node, uint64_t group_bytes) {
  CopySchedule& c = r.copies;
  while (c.next < c.order.size()) {
    const size_t k = c.order[c.next];
    if (r.res.copy_after[k] > after_node) break;
    // The group: k and the permitted neighbours that follow it in both the ring and host memory.
    size_t end = c.next + 1;
    uint64_t bytes = r.uses[k].bytes;
    int32_t after = r.res.copy_after[k];
    for (; end < c.order.size(); ++end) {
      const size_t prev = c.order[end - 1], m = c.order[end];
      const uint64_t step = r.uses[prev].bytes;
      if (r.res.copy_after[m] > after_node || bytes + r.uses[m].bytes > group_bytes ||
          r.res.offset[m] != r.res.offset[prev] + int64_t(step) ||
          static_cast<const char*>(r.at.host[m]) !=
              static_cast<const char*>(r.at.host[prev]) + step)
        break;
      bytes += r.uses[m].bytes;
      after = std::max(after, r.res.copy_after[m]);
    }
    if (after > c.copy_waited) {
      HR_TRY(backend_.stream_wait_event(stream_.get(), freed_[size_t(after)].get()));
      c.copy_waited = after;
    }
    const size_t last = c.order[end - 1];
    const Value& lv = r.g.values()[size_t(r.uses[last].value)];
    const size_t n = size_t(r.res.offset[last] - r.res.offset[k]) + lv.desc.bytes();
    const Value& v = r.g.values()[size_t(r.uses[k].value)];
    HR_TRY(backend_.copy_h2d(r.at.ptr[size_t(r.uses[k].value)], r.at.host[k], n, stream_.get())
               .with_context(end - c.next == 1
                                 ? fmt::format("streaming weight '{}'", v.name)
                                 : fmt::format("streaming weights '{}' .. '{}'", v.name, lv.name)));
    HR_TRY(backend_.event_record(copied_[size_t(c.groups)].get(), stream_.get()));
    if (size_t(c.groups) < r.marks.copies.size()) {  // Note [streaming timeline]
      HR_TRY(backend_.event_record(r.marks.copies[size_t(c.groups)], stream_.get()));
      r.marks.groups_issued.push_back({0, bytes, after, r.uses[k].first});
    }
    for (size_t j = c.next; j < end; ++j) {
      const size_t m = c.order[j];
      c.group[m] = int64_t(c.groups);
      streamed_total_ += r.uses[m].bytes;  // as a replay counts them (ResidencyPlan::streamed_bytes)
    }
    ++c.groups;
    c.next = end;
  }
  return Status();
}

}  // namespace hr
