// Test files: the tensors of a checkpoint under one prefix written alone (a bare component file,
// as ComfyUI's loaders take them), and a golden file's tensors read as f32.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/safetensors.h"
#include "test_paths.h"

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

// A golden file of tests/data read as f32 tensors; a missing tensor fails the test (EXPECT) and
// reads as empty.
class GoldenFile {
 public:
  explicit GoldenFile(const std::string& data_relative) {
    auto r = SafetensorsFile::open(data_path(data_relative));
    if (r.ok()) file_ = std::move(r).value();
  }
  bool ok() const { return file_ != nullptr; }
  HostTensor f32(const std::string& name) const {
    Result<HostTensor> t = file_ ? file_->load(name, DType::F32)
                                 : Result<HostTensor>(make_error(ErrorCode::NOT_FOUND, "no file"));
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().str();
    return t.ok() ? std::move(t).value() : HostTensor();
  }
  const SafetensorsFile* file() const { return file_.get(); }

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

}  // namespace hr::test
