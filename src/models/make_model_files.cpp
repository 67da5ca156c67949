// make-model's streamed files: planned tensors, their random values and the writing of a file of
// one or more components.
#include "models/make_model_files.h"

#include <cmath>
#include <filesystem>

#include "models/make_model.h"

namespace hr {
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

MadeInit init_of(const std::string& name, const Shape& s) {
  if (s.rank <= 1 && (ends_with(name, ".scale") || ends_with(name, ".weight")))
    return MadeInit::SCALE;
  if (s.rank <= 1) return MadeInit::BIAS;
  return MadeInit::MATRIX;
}

// Note [flux random init]
// Full-size files hold billions of values, so the generator is cheap and parallel: splitmix64 on
// a counter (make_model_normal_at, also make-model's and the benchmarks' draw), seeded by the
// seed and a hash of (component, name), each draw the sum of four 16-bit uniforms (Irwin-Hall,
// scaled to unit variance), close enough to normal for random weights. The scales are
// make-model's (Note [random init]): matrices and embeddings N(0, 1/fan_in), norm scales
// 1 + 0.1 N, biases 0.1 N, so activations stay O(1) through the blocks and outputs finite in
// bf16/f16. A tensor's values depend only on its seed, so a checkpoint's copy equals the
// component file's.
uint64_t name_seed(uint64_t seed, const MadePlanned& p) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char ch : p.component + "/" + p.name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

constexpr int64_t kChunk = int64_t(1) << 22;  // values per piece (16 MiB as f32)

Status tensor_fill(const MadePlanned& p, uint64_t seed, const SafetensorsSink& write) {
  const Shape& s = p.file.shape;
  const int64_t n = s.numel();
  if (p.init == MadeInit::POSITION_IDS) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
    return write(ids.data(), ids.size() * sizeof(int64_t));
  }
  const uint64_t tensor_seed = name_seed(seed, p);
  const float sd = p.init == MadeInit::MATRIX ? 1.0f / std::sqrt(float(n / s[0])) : 0.1f;
  const float mean = p.init == MadeInit::SCALE ? 1.0f : 0.0f;
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    HostTensor chunk(DType::F32, Shape{m});
    float* out = chunk.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i)
      out[i] = mean + sd * make_model_normal_at(tensor_seed, uint64_t(at + i));
    if (p.file.dtype == DType::F32) {
      HR_TRY(write(chunk.data(), chunk.bytes()));
    } else {
      HostTensor c = chunk.to(p.file.dtype);
      HR_TRY(write(c.data(), c.bytes()));
    }
  }
  return Status();
}

}  // namespace

void MadeComponent::add(const std::string& tensor, DType dtype, const Shape& shape) {
  tensors.emplace(tensor,
                  MadePlanned{{tensor, dtype, shape}, name, tensor, init_of(tensor, shape)});
}

void MadeComponent::add_graph(const Graph& g, DType dtype) {
  for (const Value& v : g.values())
    if (v.kind == ValueKind::WEIGHT) add(v.name, dtype, v.desc.shape);
}

Result<MadeFile> made_file_write(
    const std::string& path, const std::vector<std::pair<std::string, const MadeComponent*>>& parts,
    const std::map<std::string, std::string>& metadata, uint64_t seed) {
  std::vector<SafetensorsPlanned> list;
  std::map<std::string, const MadePlanned*> by_name;
  MadeFile made{path, 0, 0};
  for (const auto& [prefix, comp] : parts)
    for (const auto& [name, p] : comp->tensors) {
      SafetensorsPlanned f = p.file;
      f.name = prefix + name;
      by_name[f.name] = &p;
      made.params += uint64_t(f.shape.numel());
      made.bytes += TensorDesc{f.dtype, f.shape}.bytes();
      list.push_back(std::move(f));
    }
  HR_TRY(safetensors_write_streamed(
      path, std::move(list), metadata,
      [&by_name, seed](const SafetensorsPlanned& f, const SafetensorsSink& write) {
        return tensor_fill(*by_name.at(f.name), seed, write);
      }));
  return made;
}

Status made_dirs_create(const std::string& root, const std::vector<std::string>& subs) {
  namespace fs = std::filesystem;
  for (const std::string& d : subs) {
    std::error_code ec;
    fs::create_directories(fs::path(root) / d, ec);
    if (ec)
      return make_error(ErrorCode::IO, "make-model: cannot create '{}': {}",
                        (fs::path(root) / d).string(), ec.message());
  }
  return Status();
}

}  // namespace hr
