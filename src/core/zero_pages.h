// Read-only zero pages: address space that reads as zeros and costs no memory (Note [placeholder
// tensors] in core/tensor.h).
#pragma once

#include <cstddef>
#include <memory>

namespace hr {

// A read-only region of at least `bytes` zero bytes, shared by every caller; the pointer stays
// valid while the returned keeper lives. Pages are mapped without reserving memory, so a
// region of many gigabytes costs only its address space until someone reads it (and reading
// maps the kernel's one zero page). Aborts when the address space is exhausted.
std::shared_ptr<const void> zero_pages(size_t bytes);

}  // namespace hr
