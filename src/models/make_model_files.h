// make-model's streamed writer of model folders (Flux, Z-Image): each component's planned tensors,
// their random values (Note [flux random init] in make_model_files.cpp) and the writing of a
// file of one or more components under prefixes, piece by piece.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"
#include "models/safetensors.h"

namespace hr {

enum class MadeInit : uint8_t { MATRIX, SCALE, BIAS, POSITION_IDS };

// One tensor to write: its file entry, the component and name that seed it, and its init.
struct MadePlanned {
  SafetensorsPlanned file;
  std::string component;  // "dit", "t5", ...
  std::string name;       // without the file's prefix
  MadeInit init = MadeInit::MATRIX;
};

// A component's tensors by name.
struct MadeComponent {
  std::string name;
  std::map<std::string, MadePlanned> tensors;
  // Adds a tensor with the init its name and shape imply (rank <= 1 ".weight"/".scale": a norm
  // scale, other rank <= 1: a bias, else a matrix).
  void add(const std::string& tensor, DType dtype, const Shape& shape);
  // Adds every WEIGHT value of `g`, stored in `dtype`.
  void add_graph(const Graph& g, DType dtype);
};

struct MadeFile {
  std::string path;
  uint64_t params = 0;
  uint64_t bytes = 0;  // tensor bytes
};

// Writes `parts` (prefix, component) into one file at `path` with `metadata`, every tensor drawn
// from (seed, component, name): a tensor has the same values in every file it is written to.
Result<MadeFile> made_file_write(
    const std::string& path, const std::vector<std::pair<std::string, const MadeComponent*>>& parts,
    const std::map<std::string, std::string>& metadata, uint64_t seed);

// Creates `root`/`sub` for each sub; IO error naming the folder.
Status made_dirs_create(const std::string& root, const std::vector<std::string>& subs);

}  // namespace hr
