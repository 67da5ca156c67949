// Test files made from other files: the tensors of a checkpoint under one prefix, written alone
// (a bare component file, as ComfyUI's loaders take them).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/safetensors.h"

namespace hr::test {

// The tensors of `path` under `prefix`, written without it to `out` with `meta`.
inline Status safetensors_write_part(const std::string& path, const std::string& prefix,
                                     const std::string& out,
                                     const std::map<std::string, std::string>& meta) {
  HR_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
  std::vector<std::pair<std::string, HostTensor>> ts;
  for (const SafetensorsEntry& e : f->entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) continue;
    HR_ASSIGN_OR_RETURN(HostTensor t, f->load(e.name));
    ts.emplace_back(e.name.substr(prefix.size()), std::move(t));
  }
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (const auto& [n, t] : ts) named.emplace_back(n, &t);
  return safetensors_write(out, named, meta);
}

}  // namespace hr::test
