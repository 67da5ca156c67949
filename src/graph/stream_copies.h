// The copy lane of streamed runs (Note [streamed execution] in stream_copies.cpp): the copy
// stream and its events, and the issue of a residency plan's copies on it, coalesced into
// groups (Note [coalesced copies]) and ordered against compute by events.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "graph/run_state.h"

namespace hr {

class CopyLane {
 public:
  explicit CopyLane(Backend& backend) : backend_(backend) {}
  CopyLane(const CopyLane&) = delete;
  CopyLane& operator=(const CopyLane&) = delete;

  // The copy stream and its events, enough for `weights` copy groups and `nodes` nodes.
  Status prepare(size_t weights, size_t nodes);
  Stream* stream() const { return stream_.get(); }
  // Waits for the copy stream where it exists (Note [arena reuse]: after a failed run).
  void sync();

  // Fills r.copies' per-node lists and issue order from r's residency plan.
  static void schedule(RunState& r);
  // The steps of ops_issue for a streamed run, in order: begin (the start event and the copies
  // that overwrite nothing of this run), before node i (compute waits for the groups it reads
  // first), after node i (its `freed` event and the copies it permits), end (compute waits for
  // the copy stream's last copy). `group_bytes` bounds a coalesced copy.
  Status begin(RunState& r, uint64_t group_bytes);
  Status before_node(RunState& r, size_t i);
  Status after_node(RunState& r, size_t i, uint64_t group_bytes);
  Status end(RunState& r);

  // Bytes streamed into the ring since construction; a captured replay adds its plan's bytes.
  uint64_t streamed_total() const { return streamed_total_.load(); }
  void replayed(uint64_t bytes) { streamed_total_ += bytes; }

 private:
  // Issues the copies whose ring bytes are free once node `after_node` has run (-1: at the
  // start).
  Status issue(RunState& r, int32_t after_node, uint64_t group_bytes);

  Backend& backend_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> start_, done_;
  std::vector<std::unique_ptr<Event>> copied_;  // per copy group (at most one per weight use)
  std::vector<std::unique_ptr<Event>> freed_;   // per node
  std::atomic<uint64_t> streamed_total_{0};
};

}  // namespace hr
