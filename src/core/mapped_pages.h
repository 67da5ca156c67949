// Giving back the pages of a read-only file mapping (Note [page release] in
// models/safetensors.cpp): the loader after converting a tensor, the store after copying one.
#pragma once

#include <cstddef>

namespace hr {

// Drops the whole pages inside [p, p + n) of a read-only file mapping from this process's
// memory; they are read from the file again when touched.
void mapped_pages_release(const void* p, size_t n);

}  // namespace hr
