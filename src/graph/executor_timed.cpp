// The timed strategy: a run with a timing event after every node (Note [node timing]) and, when
// it streams, after every copy group (Note [streaming timeline]).
#include "graph/executor.h"

namespace hr {

// Note [node timing]
Result<std::vector<HostTensor>> Executor::run_timed(RunState& r) {
  const size_t n = r.g.nodes().size();
  const Capture* cap = captures_.find(r.compiled.get());
  // Three captured replays first, so that the GPU is busy while the host issues the timed step.
  if (cap && cap->work &&
      captures_.current(*cap, r.at.base, r.signature(), buffers_.gen, r.res.streams()))
    for (int k = 0; k < 3; ++k) HR_TRY(backend_.captured_launch(cap->work.get(), r.at.stream));
  while (timing_.events.size() < n + 1) {
    HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, backend_.timing_event_create());
    timing_.events.push_back(std::move(e));
  }
  for (size_t i = 0; i <= n; ++i) r.marks.nodes.push_back(timing_.events[i].get());
  HR_TRY(copy_marks_prepare(r));
  r.at.staging = nullptr;
  HR_TRY(ops_issue(r));
  HR_ASSIGN_OR_RETURN(std::vector<HostTensor> out, outputs_collect(r));
  timing_.node_ms.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    HR_ASSIGN_OR_RETURN(timing_.node_ms[i],
                        backend_.event_elapsed_ms(r.marks.nodes[i], r.marks.nodes[i + 1]));
  }
  HR_TRY(timeline_collect(r));
  r.marks.nodes.clear();
  return out;
}

// Note [streaming timeline]
// bench_streaming's floor ratio says how far a streamed step is from max(compute, copies), not
// why. A timed run (Note [node timing]) that streams also records a timing event on the copy
// stream after every copy group; elapsed times from the run's first mark give each node's and
// each group's end on one clock. A node that ends later than the resident run's node did waited
// for a copy; a group that ends long after the previous one while its `after` node ended early
// says the copy stream idled (nothing was permitted), one whose `after` node ended late says the
// ring held it back.
Status Executor::copy_marks_prepare(RunState& r) {
  timing_.timeline = StreamTimeline();
  if (!r.res.streams()) return Status();
  while (timing_.copy_events.size() < r.copies.order.size()) {
    HR_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, backend_.timing_event_create());
    timing_.copy_events.push_back(std::move(e));
  }
  for (size_t g = 0; g < r.copies.order.size(); ++g)
    r.marks.copies.push_back(timing_.copy_events[g].get());
  return Status();
}

Status Executor::timeline_collect(RunState& r) {
  if (r.marks.copies.empty() || r.marks.nodes.empty()) return Status();
  StreamTimeline& t = timing_.timeline;
  double at = 0;  // the nodes' ends: node_ms (marks[i] to marks[i + 1]) summed
  for (double ms : timing_.node_ms) t.node_end_ms.push_back(at += ms);
  for (const Node& n : r.g.nodes()) t.node_names.push_back(n.name);
  t.groups = r.marks.groups_issued;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    HR_ASSIGN_OR_RETURN(t.groups[g].end_ms,
                        backend_.event_elapsed_ms(r.marks.nodes[0], r.marks.copies[g]));
  }
  r.marks.copies.clear();
  return Status();
}

}  // namespace hr
