// Where tests find ../shared (goldens, tokenizer) and the headroom binary.
#pragma once

#include <cstdlib>
#include <string>

namespace hr::test {

// HEADROOM_SHARED_DIR in the environment wins over the configured path (the GPU machine
// carries a copy of the goldens inside the repository).
inline std::string shared_dir() {
  if (const char* e = std::getenv("HEADROOM_SHARED_DIR")) return e;
  return HEADROOM_SHARED_DIR;
}
inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }
inline std::string golden_path(const std::string& file) { return shared_path("golden/" + file); }
inline std::string source_dir() { return HEADROOM_SOURCE_DIR; }
inline std::string headroom_binary() { return HEADROOM_BINARY; }

}  // namespace hr::test
