// Driver-level lenses: NVML through dlopen, cudaMemGetInfo through BackendDevice::info(), /proc.
#include "memory/driver_lens.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hr {
namespace {

// The few NVML declarations used here, as nvml.h has them (no header needed at build time).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlMemory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// nvmlMemory_v2_t: `used` leaves out the driver's reserved memory, as nvidia-smi's memory.used
// does (v1's `used` counts it: ~600 MiB on an idle H200).
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned int kNvmlMemoryV2 = unsigned(sizeof(NvmlMemoryV2)) | (2u << 24);
static_assert(kNvmlMemoryV2 == 0x02000028u, "nvmlMemory_v2");
struct NvmlProcessInfo {  // nvmlProcessInfo_t as ..._v3 fills it (same layout as _v2_t)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(NvmlProcessInfo) == 24, "nvmlProcessInfo_t layout");

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*memory_info)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*memory_info_v2)(NvmlDevice, NvmlMemoryV2*) = nullptr;  // optional (driver >= 510)
  NvmlReturn (*compute_processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;  // optional
};

struct DlCloser {
  void operator()(void* h) const {
    if (h) dlclose(h);
  }
};
using DlHandle = std::unique_ptr<void, DlCloser>;

std::string nvml_error(const NvmlApi& api, NvmlReturn r) {
  if (api.error_string) return fmt::format("{} (NVML error {})", api.error_string(r), r);
  return fmt::format("NVML error {}", r);
}

// Note [NVML process ids]: NVML lists processes by their pid in the host's pid namespace. In a
// container with its own pid namespace getpid() is not in that list, so per-process figures are
// then reported as not measured rather than attributing this process's memory to "others".
// The same happens before this process has created its CUDA context.
class NvmlLens final : public DriverLens {
 public:
  NvmlLens(DlHandle lib, NvmlApi api, NvmlDevice device)
      : lib_(std::move(lib)), api_(api), device_(device), pid_(unsigned(getpid())) {}
  ~NvmlLens() override { api_.shutdown(); }

  DriverSample sample() override {
    DriverSample s;
    s.kind = DriverSource::NVML;
    s.source = source_;
    NvmlMemoryV2 m2{};
    m2.version = kNvmlMemoryV2;
    NvmlMemory m{};
    if (api_.memory_info_v2 && api_.memory_info_v2(device_, &m2) == kNvmlSuccess) {
      s.used = m2.used;
      s.total = m2.total;
    } else if (api_.memory_info(device_, &m) == kNvmlSuccess) {
      s.used = m.used;
      s.total = m.total;
    }
    std::vector<NvmlProcessInfo> procs(16);
    for (int attempt = 0; attempt < 3; ++attempt) {
      unsigned int count = unsigned(procs.size());
      NvmlReturn r = api_.compute_processes(device_, &count, procs.data());
      if (r == kNvmlErrorInsufficientSize) {
        procs.resize(size_t(count) + 8);  // processes may appear between the calls
        continue;
      }
      if (r != kNvmlSuccess) break;
      bool found = false;
      for (unsigned int i = 0; i < count; ++i) {
        uint64_t b = procs[i].usedGpuMemory == kNvmlValueNotAvailable ? 0 : procs[i].usedGpuMemory;
        if (procs[i].pid == pid_) {
          s.this_process += b;  // one entry per MIG instance the process uses
          found = true;
        } else {
          s.other_processes += b;
        }
      }
      s.per_process = found;
      if (!found) s.other_processes = 0;  // Note [NVML process ids]: cannot tell whose it is
      break;
    }
    return s;
  }
  const std::string& source() const override { return source_; }

 private:
  DlHandle lib_;
  NvmlApi api_;
  NvmlDevice device_;
  unsigned int pid_;
  std::string source_ = "nvml";
};

class CudaInfoLens final : public DriverLens {
 public:
  CudaInfoLens(const BackendDevice& device, std::string why)
      : device_(device), source_(fmt::format("cudaMemGetInfo (NVML not available: {})", why)) {}

  DriverSample sample() override {
    DeviceInfo d = device_.info();
    DriverSample s;
    s.kind = DriverSource::CUDA_MEM_GET_INFO;
    s.source = source_;
    s.total = d.memory_total;
    s.used = d.memory_total > d.memory_free ? d.memory_total - d.memory_free : 0;
    return s;
  }
  const std::string& source() const override { return source_; }

 private:
  const BackendDevice& device_;
  std::string source_;
};

// The value in kB of `key` ("MemAvailable:") in a /proc file, in bytes; false when absent.
bool proc_read_kb(const char* path, std::string_view key, uint64_t* bytes) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    *bytes = std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024ull;
    return true;
  }
  return false;
}

class HostLens final : public DriverLens {
 public:
  DriverSample sample() override {
    DriverSample s;
    s.kind = DriverSource::HOST_PROC;
    s.source = source_;
    uint64_t total = 0, avail = 0, rss = 0;
    if (proc_read_kb("/proc/meminfo", "MemTotal:", &total) &&
        proc_read_kb("/proc/meminfo", "MemAvailable:", &avail)) {
      s.total = total;
      s.used = total > avail ? total - avail : 0;
    }
    if (proc_read_kb("/proc/self/status", "VmRSS:", &rss)) {
      s.this_process = rss;
      s.other_processes = s.used > rss ? s.used - rss : 0;
      s.per_process = true;
    }
    return s;
  }
  const std::string& source() const override { return source_; }

 private:
  std::string source_ = "host (/proc)";
};

template <typename F>
bool dl_bind(void* lib, const char* symbol, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  return *fn != nullptr;
}

// Note [NVML device index]: NVML numbers devices in PCI bus order over all GPUs; CUDA numbers
// the visible ones, fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID. We take CUDA index i to be
// NVML index i, or the i-th entry of CUDA_VISIBLE_DEVICES when that is a list of numbers, and
// confirm by the device name; a UUID list or a different name falls back to cudaMemGetInfo.
// On mixed-model machines with the default CUDA order the name check is what catches a mismatch;
// two GPUs of one model in a different order are not caught (their numbers look alike anyway).
Result<unsigned int> nvml_index(int cuda_index) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible) return unsigned(cuda_index);
  std::vector<unsigned int> ids;
  std::string_view v(visible);
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string item(v.substr(0, comma));
    char* end = nullptr;
    unsigned long id = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      return make_error(ErrorCode::UNSUPPORTED,
                        "CUDA_VISIBLE_DEVICES='{}' is not a list of device numbers", visible);
    ids.push_back(unsigned(id));
    v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
  }
  if (cuda_index < 0 || size_t(cuda_index) >= ids.size())
    return make_error(ErrorCode::UNSUPPORTED, "CUDA device {} is not in CUDA_VISIBLE_DEVICES='{}'",
                      cuda_index, visible);
  return ids[size_t(cuda_index)];
}

Result<std::unique_ptr<DriverLens>> nvml_open(const DeviceInfo& info, const char* library) {
  DlHandle lib(dlopen(library, RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    const char* err = dlerror();
    return make_error(ErrorCode::NOT_FOUND, "{}", err ? err : library);
  }
  NvmlApi api;
  const char* missing = nullptr;
  if (!dl_bind(lib.get(), "nvmlInit_v2", &api.init))
    missing = "nvmlInit_v2";
  else if (!dl_bind(lib.get(), "nvmlShutdown", &api.shutdown))
    missing = "nvmlShutdown";
  else if (!dl_bind(lib.get(), "nvmlDeviceGetHandleByIndex_v2", &api.handle_by_index))
    missing = "nvmlDeviceGetHandleByIndex_v2";
  else if (!dl_bind(lib.get(), "nvmlDeviceGetMemoryInfo", &api.memory_info))
    missing = "nvmlDeviceGetMemoryInfo";
  else if (!dl_bind(lib.get(), "nvmlDeviceGetComputeRunningProcesses_v3", &api.compute_processes))
    missing = "nvmlDeviceGetComputeRunningProcesses_v3";
  else if (!dl_bind(lib.get(), "nvmlDeviceGetName", &api.name))
    missing = "nvmlDeviceGetName";
  if (missing) return make_error(ErrorCode::UNSUPPORTED, "{} lacks {}", library, missing);
  dl_bind(lib.get(), "nvmlErrorString", &api.error_string);
  dl_bind(lib.get(), "nvmlDeviceGetMemoryInfo_v2", &api.memory_info_v2);

  Result<unsigned int> index = nvml_index(info.index);
  if (!index.ok()) return index.status();
  NvmlReturn r = api.init();
  if (r != kNvmlSuccess)
    return make_error(ErrorCode::UNSUPPORTED, "nvmlInit_v2: {}", nvml_error(api, r));
  NvmlDevice device = nullptr;
  char name[96] = {};
  r = api.handle_by_index(*index, &device);
  if (r == kNvmlSuccess) r = api.name(device, name, sizeof(name));
  if (r != kNvmlSuccess) {
    api.shutdown();
    return make_error(ErrorCode::UNSUPPORTED, "NVML device {}: {}", *index, nvml_error(api, r));
  }
  if (!info.name.empty() && info.name != name) {
    api.shutdown();
    return make_error(
        ErrorCode::UNSUPPORTED,
        "NVML device {} is '{}' but CUDA device {} is '{}' (Note [NVML device index])", *index,
        name, info.index, info.name);
  }
  return std::unique_ptr<DriverLens>(new NvmlLens(std::move(lib), api, device));
}

}  // namespace

std::unique_ptr<DriverLens> driver_lens_host() { return std::make_unique<HostLens>(); }

std::unique_ptr<DriverLens> DriverLens::open(const BackendDevice& device,
                                             const char* nvml_library) {
  DeviceInfo info = device.info();
  if (info.kind != "cuda") return driver_lens_host();
  Result<std::unique_ptr<DriverLens>> nvml = nvml_open(info, nvml_library);
  if (nvml.ok()) return std::move(*nvml);
  return std::make_unique<CudaInfoLens>(device, nvml.status().message());
}

}  // namespace hr
