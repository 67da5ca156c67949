// Timed runs' state (Note [node timing] and Note [streaming timeline] in executor_timed.cpp):
// the timing events, the last timed run's per-node milliseconds and its streaming timeline.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace hr {

// When each node and each copy group of a timed run that streamed ended.
struct StreamTimeline {
  std::vector<double> node_end_ms;      // per node, from the run's first mark
  std::vector<std::string> node_names;  // per node, of the graph that ran (after the passes)
  struct Group {
    double end_ms = 0;   // from the run's first mark
    uint64_t bytes = 0;  // the group's weights (ring bytes)
    int32_t after = -1;  // the node its copy waited for (-1: none)
    int32_t first = -1;  // the first node reading one of its weights
  };
  std::vector<Group> groups;  // in issue order
};

// The executor's timing: on or off, the events it reuses, what the last timed run measured.
struct NodeTiming {
  bool on = false;
  std::vector<double> node_ms;
  std::vector<std::unique_ptr<Event>> events;       // node marks
  std::vector<std::unique_ptr<Event>> copy_events;  // Note [streaming timeline]
  StreamTimeline timeline;
};

// One timed run's marks; empty in untimed runs.
struct RunMarks {
  std::vector<Event*> nodes;   // Note [node timing]: nodes[i + 1] follows node i
  std::vector<Event*> copies;  // Note [streaming timeline]: one per copy group
  std::vector<StreamTimeline::Group> groups_issued;
};

}  // namespace hr
