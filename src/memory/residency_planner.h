// The residency planner (memory policy): given a compiled graph's weight uses and the room a run
// has, which weights stay resident and which stream, the staging ring's size and the copy
// schedule (Note [residency plan] in residency_planner.cpp). The plan is data the executor
// carries out (graph/residency.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "graph/residency.h"

namespace hr {

// Note [changing residency]
// Where a newcomer changes what streams and how deep the ring is:
//  - The ring's size: ResidencyOptions::depth (graph/residency.h) is the floor, in largest
//    streamed weights; the planner grows the ring where the graph reads more at once and picks
//    among larger rings on the clock in plan_into (Note [ring choice] in residency_planner.cpp).
//    A process changes the options with Executor::set_residency_options (cli/cmd_run.cpp's
//    --gpu-only turns streaming off; tests use a ring of two) and the rates with
//    Executor::set_device_profile (residency_options_for in residency_clock.cpp).
//  - The streamed-set rule: resident_order in residency_planner.cpp (small weights, then least
//    reuse, stay resident first), improved on the clock by spread_copies and streamed_on_clock
//    (Note [spreading copies]). ResidencyOptions::small_bytes, stream and spread switch parts
//    of it.
//  - How much room a run has: Executor::weights_room (graph/executor.cpp) from the allocator's
//    budget and holders; the --lowvram/--novram cap is the allocator's weights cap.
//  - Caching of plans per (compiled graph, room): PlannedResidency (planned_residency.cpp).
// tests/memory/ring_choice_test.cpp, streaming_test.cpp and device_profile_test.cpp pin the
// rules down; tests/workflow/workflow_plan_test.cpp checks that plans still match runs.

// Plans `uses` within `room` bytes (resident weights plus the ring). Everything resident when it
// fits; otherwise resident by cost (small and low-reuse weights first) and the rest streamed.
// OUT_OF_MEMORY when not even a ring for the streamed weights fits, naming what would.
Result<ResidencyPlan> residency_plan(const std::vector<WeightUse>& uses, uint64_t room,
                                     const ResidencyOptions& options = {});

// The smallest room residency_plan accepts for `uses` (a binary search over it).
uint64_t residency_min_room(const std::vector<WeightUse>& uses,
                            const ResidencyOptions& options = {});

}  // namespace hr
