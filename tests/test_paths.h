// Where tests find their reference data (tests/data, kept in the repository), the CLIP
// vocabulary headroom ships (data/clip_tokenizer) and the headroom binary.
#pragma once

#include <string>

namespace hr::test {

inline std::string source_dir() { return HEADROOM_SOURCE_DIR; }
inline std::string data_path(const std::string& rel) { return source_dir() + "/tests/data/" + rel; }
inline std::string golden_path(const std::string& file) { return data_path("golden/" + file); }
inline std::string e2e_path(const std::string& file) { return data_path("golden/e2e/" + file); }
inline std::string clip_vocab_dir() { return source_dir() + "/data/clip_tokenizer"; }
inline std::string headroom_binary() { return HEADROOM_BINARY; }

}  // namespace hr::test
