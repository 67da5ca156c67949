// safetensors: mmap-backed reader with full header validation, conversion on load, and the
// atomic (write to a temporary name, then rename) writer.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/json_parse.h"
#include "core/mapped_pages.h"

namespace hr {
namespace {

using Json = nlohmann::json;

// A header larger than this is not a checkpoint header (real SDXL files have ~200 KB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeSpelling {
  const char* name;
  DType dtype;
};

// safetensors' own dtype spellings (not dtype_name(), which is headroom's lower-case one).
constexpr DTypeSpelling kSpellings[] = {
    {"F64", DType::F64},   {"F32", DType::F32},         {"F16", DType::F16},
    {"BF16", DType::BF16}, {"I64", DType::I64},         {"I32", DType::I32},
    {"I16", DType::I16},   {"I8", DType::I8},           {"U8", DType::U8},
    {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}, {"F8_E5M2", DType::F8_E5M2},
};

// Dtypes the safetensors format defines that headroom cannot convert.
constexpr const char* kUnsupportedSpellings[] = {"U16",         "U32",        "U64",     "C64",
                                                 "F8_E8M0",     "F6_E2M3",    "F6_E3M2", "F4",
                                                 "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  for (const DTypeSpelling& d : kSpellings)
    if (s == d.name) return d.dtype;
  return std::nullopt;
}

const char* dtype_to_safetensors(DType t) {
  for (const DTypeSpelling& d : kSpellings)
    if (d.dtype == t) return d.name;
  return "?";
}

bool dtype_is_compute(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::I32 ||
         t == DType::I64;
}

Status corrupt(const std::string& path, const std::string& problem) {
  return Status(ErrorCode::CORRUPT, path + ": " + problem);
}

// Reads a non-negative JSON integer; nullopt for floats, negatives, strings, ...
std::optional<uint64_t> json_uint(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

// Validates one tensor entry of the header and fills `e` (name set by the caller).
Status entry_parse(const std::string& path, const Json& v, uint64_t data_size,
                   SafetensorsEntry& e) {
  const std::string& name = e.name;
  if (!v.is_object())
    return corrupt(path, fmt::format("tensor '{}': entry is a JSON {}, expected an object", name,
                                     v.type_name()));
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end()) return corrupt(path, fmt::format("tensor '{}': missing field 'dtype'", name));
  if (sh == v.end()) return corrupt(path, fmt::format("tensor '{}': missing field 'shape'", name));
  if (off == v.end())
    return corrupt(path, fmt::format("tensor '{}': missing field 'data_offsets'", name));

  if (!dt->is_string())
    return corrupt(path, fmt::format("tensor '{}': field 'dtype' is a JSON {}, expected a string",
                                     name, dt->type_name()));
  const std::string& dts = dt->get_ref<const std::string&>();
  std::optional<DType> dtype = dtype_from_safetensors(dts);
  if (!dtype) {
    for (const char* u : kUnsupportedSpellings)
      if (dts == u)
        return Status(ErrorCode::UNSUPPORTED,
                      fmt::format("{}: unsupported dtype '{}' for tensor '{}'", path, dts, name));
    return corrupt(path, fmt::format("unknown dtype '{}' for tensor '{}'", dts, name));
  }
  e.dtype = *dtype;

  if (!sh->is_array())
    return corrupt(path, fmt::format("tensor '{}': field 'shape' is a JSON {}, expected an array",
                                     name, sh->type_name()));
  if (sh->size() > size_t(kMaxDims))
    return Status(ErrorCode::UNSUPPORTED,
                  fmt::format("{}: tensor '{}' has rank {}; at most {} dimensions are supported",
                              path, name, sh->size(), kMaxDims));
  e.shape = Shape();
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : *sh) {
    std::optional<uint64_t> n = json_uint(d);
    if (!n || *n > uint64_t(INT64_MAX))
      return corrupt(
          path, fmt::format("tensor '{}': shape {} has a negative or non-integer dimension", name,
                            sh->dump()));
    e.shape.dims[e.shape.rank++] = int64_t(*n);
    overflow = overflow || __builtin_mul_overflow(numel, *n, &numel);
  }

  if (!off->is_array() || off->size() != 2)
    return corrupt(
        path, fmt::format("tensor '{}': data_offsets {} is not [begin, end]", name, off->dump()));
  std::optional<uint64_t> begin = json_uint((*off)[0]);
  std::optional<uint64_t> end = json_uint((*off)[1]);
  if (!begin || !end)
    return corrupt(path, fmt::format("tensor '{}': data_offsets {} are not non-negative integers",
                                     name, off->dump()));
  if (*begin > *end)
    return corrupt(path,
                   fmt::format("tensor '{}': data_offsets {} have begin > end", name, off->dump()));
  if (*end > data_size)
    return corrupt(path,
                   fmt::format("tensor '{}': data_offsets {} end past the data section "
                               "({} bytes); the file is truncated or the offsets out of range",
                               name, off->dump(), data_size));
  e.begin = *begin;
  e.end = *end;

  uint64_t expect = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &expect);
  if (overflow || expect != *end - *begin)
    return corrupt(path, fmt::format("tensor '{}': size mismatch: {} {} needs {} bytes but "
                                     "data_offsets {} hold {}",
                                     name, dts, e.shape.str(),
                                     overflow ? std::string("too many") : std::to_string(expect),
                                     off->dump(), *end - *begin));
  return Status();
}

// Fills `f`'s entries and metadata from the header JSON.
Status header_parse(const std::string& path, const Json& header, uint64_t data_size,
                    std::vector<SafetensorsEntry>& entries,
                    std::map<std::string, std::string>& metadata) {
  if (!header.is_object())
    return corrupt(path,
                   fmt::format("header is a JSON {}, expected an object", header.type_name()));
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      const Json& m = it.value();
      if (!m.is_object())
        return corrupt(path, fmt::format("__metadata__ is a JSON {}, expected an object of strings",
                                         m.type_name()));
      for (auto mit = m.begin(); mit != m.end(); ++mit) {
        if (!mit.value().is_string())
          return corrupt(path, fmt::format("__metadata__ value for '{}' is a JSON {}, expected a "
                                           "string",
                                           mit.key(), mit.value().type_name()));
        metadata[mit.key()] = mit.value().get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e;
    e.name = it.key();
    HR_TRY(entry_parse(path, it.value(), data_size, e));
    entries.push_back(std::move(e));
  }
  // nlohmann's object is a std::map, so the entries already come sorted; sort anyway so the
  // invariant does not depend on the JSON library's container.
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });

  // Overlap check in offset order; empty tensors occupy no bytes and never overlap.
  std::vector<const SafetensorsEntry*> by_offset;
  by_offset.reserve(entries.size());
  for (const SafetensorsEntry& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(
      by_offset.begin(), by_offset.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry* a = by_offset[i - 1];
    const SafetensorsEntry* b = by_offset[i];
    if (b->begin < a->end)
      return corrupt(path, fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] have overlapping "
                                       "data_offsets",
                                       a->name, a->begin, a->end, b->name, b->begin, b->end));
  }
  return Status();
}

Status io_error(const std::string& what, const std::string& path, int err) {
  return Status(ErrorCode::IO, fmt::format("{} '{}': {}", what, path, std::strerror(err)));
}

Status write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write", path, errno);
    }
    p += w;
    n -= size_t(w);
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path,
                                                               TensorData data) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return make_error(ErrorCode::NOT_FOUND, "cannot open '{}': {}", path, std::strerror(err));
    return io_error("cannot open", path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::IO, "'{}' is not a regular file", path);
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    return corrupt(path, fmt::format("file is truncated: {} bytes, shorter than the 8-byte header "
                                     "length",
                                     size));
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (m == MAP_FAILED) return io_error("cannot mmap", path, map_err);

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->data_mode_ = data;
  f->map_ = static_cast<const std::byte*>(m);
  f->map_size_ = size;

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(f->map_[i]);
  if (header_len > kMaxHeaderBytes)
    return corrupt(path, fmt::format("header length {} is absurd (more than {} bytes); not a "
                                     "safetensors file?",
                                     header_len, kMaxHeaderBytes));
  if (header_len > size - 8)
    return corrupt(path, fmt::format("header length {} runs past the end of the file ({} bytes); "
                                     "the file is truncated",
                                     header_len, size));

  const char* hb = reinterpret_cast<const char*>(f->map_ + 8);
  Result<Json> parsed = json_parse(std::string_view(hb, size_t(header_len)));
  if (!parsed.ok()) return corrupt(path, "header: " + parsed.status().message());
  const Json& header = *parsed;
  f->data_ = f->map_ + 8 + header_len;
  f->data_size_ = size - 8 - size_t(header_len);
  HR_TRY(header_parse(path, header, f->data_size_, f->entries_, f->metadata_));
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  if (it == entries_.end() || it->name != name) return nullptr;
  return &*it;
}

std::span<const std::byte> SafetensorsFile::raw(const SafetensorsEntry& e) const {
  return std::span<const std::byte>(data_ + e.begin, size_t(e.end - e.begin));
}

Result<HostTensor> SafetensorsFile::load(std::string_view name, std::optional<DType> dtype) const {
  const SafetensorsEntry* e = find(name);
  if (!e) return make_error(ErrorCode::NOT_FOUND, "tensor '{}' not in {}", name, path_);
  DType target = dtype ? *dtype : (dtype_is_compute(e->dtype) ? e->dtype : DType::F32);
  if (!dtype_is_compute(target) && target != e->dtype)  // storage types only as stored
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "{}: tensor '{}' cannot be loaded as {} (not a compute dtype)", path_, name,
                      dtype_name(target));
  if (data_mode_ == TensorData::PLACEHOLDERS) return HostTensor::placeholder({target, e->shape});
  HostTensor t(TensorDesc{target, e->shape});
  std::span<const std::byte> src = raw(*e);
  size_t n = size_t(e->shape.numel());
  // The data section starts at 8 + header length, which writers need not align: convert from
  // an aligned copy so the typed reads in dtype_convert stay aligned.
  if (target == e->dtype) {
    if (!src.empty()) std::memcpy(t.data(), src.data(), src.size());
  } else if (reinterpret_cast<uintptr_t>(src.data()) % dtype_size(e->dtype) != 0) {
    HostTensor aligned(TensorDesc{DType::U8, Shape{int64_t(src.size())}});
    std::memcpy(aligned.data(), src.data(), src.size());
    dtype_convert(aligned.data(), e->dtype, t.data(), target, n);
  } else if (n > 0) {
    dtype_convert(src.data(), e->dtype, t.data(), target, n);
  }
  return t;
}

Status safetensors_write_streamed(const std::string& path,
                                  std::vector<SafetensorsPlanned> tensors,
                                  const std::map<std::string, std::string>& metadata,
                                  const SafetensorsFill& fill) {
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0 && tensors[i].name == tensors[i - 1].name)
      return make_error(ErrorCode::INVALID_ARGUMENT, "writing '{}': tensor name '{}' given twice",
                        path, tensors[i].name);
    if (tensors[i].name == "__metadata__")
      return make_error(ErrorCode::INVALID_ARGUMENT,
                        "writing '{}': '__metadata__' cannot name a tensor", path);
  }

  Json header = Json::object();
  uint64_t offset = 0;
  for (const SafetensorsPlanned& t : tensors) {
    Json shape = Json::array();
    for (int i = 0; i < t.shape.rank; ++i) shape.push_back(t.shape.dims[i]);
    uint64_t bytes = TensorDesc{t.dtype, t.shape}.bytes();
    header[t.name] = Json{{"dtype", dtype_to_safetensors(t.dtype)},
                          {"shape", std::move(shape)},
                          {"data_offsets", Json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::string hs;
  try {
    hs = header.dump();
  } catch (const Json::exception& e) {  // invalid UTF-8 in a name or metadata value
    return make_error(ErrorCode::INVALID_ARGUMENT, "writing '{}': {}", path, e.what());
  }
  // Padding keeps the data section 8-byte aligned in the file (and in an mmap of it).
  hs.append((8 - hs.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));

  std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  Status s = write_all(fd, len, 8, tmp);
  if (s.ok()) s = write_all(fd, hs.data(), hs.size(), tmp);
  for (const SafetensorsPlanned& t : tensors) {
    if (!s.ok()) break;
    uint64_t written = 0;
    s = fill(t, [&](const void* data, size_t bytes) {
      written += bytes;
      return write_all(fd, data, bytes, tmp);
    });
    const uint64_t want = TensorDesc{t.dtype, t.shape}.bytes();
    if (s.ok() && written != want)
      s = make_error(ErrorCode::INTERNAL, "writing '{}': tensor '{}' got {} bytes, not {}", path,
                     t.name, written, want);
  }
  if (s.ok() && ::fsync(fd) != 0) s = io_error("cannot sync", tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = io_error("cannot close", tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = io_error(fmt::format("cannot rename '{}' to", tmp), path, errno);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Status safetensors_write(const std::string& path,
                         const std::vector<std::pair<std::string, const HostTensor*>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsPlanned> planned;
  std::map<std::string, const HostTensor*> data;
  for (const auto& [name, t] : tensors) {
    if (!t || t->empty())
      return make_error(ErrorCode::INVALID_ARGUMENT, "writing '{}': tensor '{}' has no data", path,
                        name);
    planned.push_back({name, t->dtype(), t->shape()});
    data[name] = t;
  }
  return safetensors_write_streamed(
      path, std::move(planned), metadata,
      [&data](const SafetensorsPlanned& p, const SafetensorsSink& write) {
        const HostTensor* t = data.at(p.name);
        return write(t->data(), t->bytes());
      });
}

// Note [page release]
// load() copies (and converts) each tensor out of the read-only mapping, and the mapping stays
// open for later loads (the text encoders after the UNet). Every page a load touched would stay
// in the process's resident memory as well, doubling the host memory a model takes (a 6.9 GB
// SDXL checkpoint held 14 GB). The mapping is private and never written, so MADV_DONTNEED
// simply drops its pages; a later load reads them from the file again.
// Releasing tensor by tensor keeps the peak low too: a loader that released only at its end
// would hold the mapped pages and the copies of a whole UNet at once.
void SafetensorsFile::pages_release() const {
  if (map_ && map_size_) ::madvise(const_cast<std::byte*>(map_), map_size_, MADV_DONTNEED);
}

void SafetensorsFile::pages_release(const SafetensorsEntry& e) const {
  mapped_pages_release(data_ + e.begin, e.end - e.begin);
}

std::optional<HostTensor> SafetensorsFile::view(const std::shared_ptr<const SafetensorsFile>& self,
                                                const SafetensorsEntry& e, DType dtype) {
  const size_t elem = dtype_size(dtype);
  const std::byte* p = self->data_ + e.begin;
  if (e.dtype != dtype || elem == 0 || uintptr_t(p) % elem != 0) return std::nullopt;
  TensorDesc d{dtype, e.shape};
  if (d.bytes() != e.end - e.begin || d.bytes() == 0) return std::nullopt;
  if (self->data_mode_ == TensorData::PLACEHOLDERS) return HostTensor::placeholder(d);
  return HostTensor::view(d, p, self);
}

}  // namespace hr
