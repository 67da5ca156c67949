// VRAM classes: the fixed ladder of budgets that names the job streams, so that a front puts a
// job where only workers that can run it read (Note [vram classes]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hr {

// Note [vram classes]: the ladder is 4 MiB, 6 MiB, 8 MiB, 12 MiB, ... up to 1 TiB (each power
// of two and 1.5 times it), the same in every process, so fronts and workers agree on stream names
// without talking. A front queues a job in the smallest class at least the job's smallest fitting
// budget (WorkflowPlan::smallest_budget); a worker with budget B reads every class <= B. So a
// job reaches only workers whose budget fits it, at the cost of rounding: a 23 GiB worker reads
// up to the 16 GiB class, and a job that needs 17 GiB waits for a 24 GiB (or larger) worker.
const std::vector<uint64_t>& vram_classes();

// The smallest class >= `needed` (the largest class when none is).
uint64_t vram_class_for(uint64_t needed);
// Every class <= `budget`, largest first; empty when the budget is below the smallest class.
std::vector<uint64_t> vram_classes_upto(uint64_t budget);
// "4MiB", "1536MiB", "8GiB": the class's part of a stream name.
std::string vram_class_name(uint64_t bytes);

}  // namespace hr
