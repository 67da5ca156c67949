// Key names built from their parts (Note [redis keys]).
#include "jobs/redis_keys.h"

#include "jobs/vram_class.h"

namespace hr::redis_keys {

std::string stream(uint64_t vram_class, bool front) {
  return kPrefix + "jobs:" + vram_class_name(vram_class) + (front ? ":front" : "");
}

std::string worker(const std::string& id) { return kPrefix + "worker:" + id; }

}  // namespace hr::redis_keys
