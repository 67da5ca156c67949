// The memory policies every Executor is built with (Note [executor policies] in
// graph/executor_policies.h): Executor(backend, allocator, executor_policies_default(backend)).
#pragma once

#include "backend/backend.h"
#include "graph/executor_policies.h"

namespace hr {

// The residency planner on the backend's fallback device profile (device_profile_default; a
// process with a measured profile sets it with Executor::set_device_profile) and OOM recovery.
ExecutorPolicies executor_policies_default(const Backend& backend);

}  // namespace hr
