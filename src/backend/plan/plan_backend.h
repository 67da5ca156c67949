// The planning backend: a Backend that answers every question as the real one does (ops,
// workspaces, layouts, Note [device properties]) but computes and copies nothing, so that
// a memory plan is the run itself (Note [plan run] in workflow/workflow_plan.cpp).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace hr {

// A backend over `real` (which must outlive it). Device and page-locked memory are address
// space only: reserved without memory behind it, reading as zeros, never touched by ops or
// copies, which return at once. It cannot capture or time work.
std::unique_ptr<Backend> plan_backend_create(Backend& real);

}  // namespace hr
