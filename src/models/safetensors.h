// safetensors reading (mmap, lazy per-tensor access, conversion on load) and writing.
// Every malformed-file condition is a CORRUPT Status naming the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hr {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;  // stored dtype (storage-only types allowed)
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

// What load() and view() hand out: the tensors' bytes, or placeholders of their descriptors
// for a memory plan (Note [placeholder tensors] in core/tensor.h).
enum class TensorData : uint8_t { READ, PLACEHOLDERS };

class SafetensorsFile {
 public:
  // Maps the file and validates the header (JSON, dtypes, shapes vs sizes, offsets in range
  // and non-overlapping).
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path,
                                                       TensorData data = TensorData::READ);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // All tensors, sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // The "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Stored bytes of a tensor (valid while this object lives).
  std::span<const std::byte> raw(const SafetensorsEntry& e) const;
  // A tensor converted to `dtype` (default: its stored dtype when that is a compute dtype,
  // else f32). NOT_FOUND names the file and the tensor.
  Result<HostTensor> load(std::string_view name, std::optional<DType> dtype = std::nullopt) const;
  // Note [page release]: drops the mapping's pages from this process's memory (they are read
  // again from the file if touched). Loaders call it once their copies are made.
  void pages_release() const;
  // The same for the whole pages inside one tensor's bytes (after loading it).
  void pages_release(const SafetensorsEntry& e) const;
  // A tensor's stored bytes as a HostTensor without copying (a view of the read-only mapping
  // that keeps `self`, this file, alive), when the stored dtype is `dtype` and the bytes are
  // aligned for it; nullopt otherwise. Note [mapped weights] in memory/weight_set.cpp.
  static std::optional<HostTensor> view(const std::shared_ptr<const SafetensorsFile>& self,
                                        const SafetensorsEntry& e, DType dtype);

 private:
  SafetensorsFile() = default;
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_size_ = 0;
  const std::byte* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  TensorData data_mode_ = TensorData::READ;
};

// A tensor of a file that safetensors_write_streamed writes.
struct SafetensorsPlanned {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};
// Takes the next bytes of the tensor being written.
using SafetensorsSink = std::function<Status(const void* data, size_t bytes)>;
// Hands one tensor's bytes, in order and in as many pieces as it likes, to the sink.
using SafetensorsFill = std::function<Status(const SafetensorsPlanned&, const SafetensorsSink&)>;

// Writes the tensors (sorted by name) with `fill` called once per tensor in that order, so that
// a file larger than memory (make-model's full-size Flux) never has to be held whole. Written to
// a temporary name and renamed, so readers never see a partial file; INTERNAL when a fill hands
// over more or fewer bytes than its tensor has.
Status safetensors_write_streamed(const std::string& path, std::vector<SafetensorsPlanned> tensors,
                                  const std::map<std::string, std::string>& metadata,
                                  const SafetensorsFill& fill);

// Writes tensors (in their dtypes) and metadata; the file is written to a temporary name
// and renamed, so readers never see a partial file.
Status safetensors_write(const std::string& path,
                         const std::vector<std::pair<std::string, const HostTensor*>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace hr
