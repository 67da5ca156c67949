// zero_pages: one growing read-only anonymous mapping.
#include "core/zero_pages.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>

namespace hr {

namespace {

struct Region {
  void* p = nullptr;
  size_t bytes = 0;
  ~Region() {
    if (p) ::munmap(p, bytes);
  }
};

std::shared_ptr<const Region> region_map(size_t bytes) {
  auto r = std::make_shared<Region>();
  r->bytes = bytes;
  r->p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r->p == MAP_FAILED) std::abort();
  return r;
}

}  // namespace

std::shared_ptr<const void> zero_pages(size_t bytes) {
  static std::mutex mu;
  static std::shared_ptr<const Region> largest;
  std::lock_guard<std::mutex> lock(mu);
  if (!largest || largest->bytes < bytes) {
    // Grows by doubling so that a model's tensors, asked for one by one, map a few regions.
    size_t want = largest ? largest->bytes : size_t(1) << 24;
    while (want < bytes) want *= 2;
    largest = region_map(want);  // earlier regions stay alive while their tensors do
  }
  return std::shared_ptr<const void>(largest, largest->p);
}

}  // namespace hr
