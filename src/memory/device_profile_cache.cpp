// Reading, writing and filling the per-device profile cache.
#include "memory/device_profile_cache.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "memory/device_measure.h"
#include "memory/residency_clock.h"

namespace hr {

// Note [device profile cache]
// A device's profile (Note [device profile] in residency_clock.cpp) is measured once and
// kept in the user's cache folder, one file per device name, so that later processes start
// with it at the cost of reading a file; `headroom probe` measures again and replaces it. A
// file that does not parse, lacks a rate or names another device is measured over, with a
// warning: a cache is never a reason not to start. Backends whose memory is host memory (the
// CPU; Note [device properties] in backend/device.h) plan with the fixed CPU profile instead of
// a measured one: streaming on the CPU only stands in for a GPU in tests and `headroom plan`,
// whose plans must be the same on every machine and in every process (a plan made by another
// Executor than the run's must match it).
namespace {

constexpr int kVersion = 1;

std::string sanitized(const std::string& device) {
  std::string out;
  for (char ch : device) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c))
      out += char(std::tolower(c));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "device" : out;
}

std::string cache_root() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x);
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache";
  return "";
}

nlohmann::json profile_json(const DeviceProfile& p) {
  return nlohmann::json{{"version", kVersion},
                        {"device", p.device},
                        {"measured", p.measured},
                        {"gemm_flops_per_s", p.gemm_flops_per_s},
                        {"attention_flops_per_s", p.attention_flops_per_s},
                        {"memory_bytes_per_s", p.memory_bytes_per_s},
                        {"node_s", p.node_s},
                        {"copy_bytes_per_s", p.copy_bytes_per_s}};
}

Result<DeviceProfile> profile_from(const nlohmann::json& j) {
  if (!j.is_object() || j.value("version", 0) != kVersion)
    return Status(ErrorCode::CORRUPT, "not a version 1 device profile");
  DeviceProfile p;
  try {
    p.device = j.at("device").get<std::string>();
    p.measured = j.at("measured").get<bool>();
    p.gemm_flops_per_s = j.at("gemm_flops_per_s").get<double>();
    p.attention_flops_per_s = j.at("attention_flops_per_s").get<double>();
    p.memory_bytes_per_s = j.at("memory_bytes_per_s").get<double>();
    p.node_s = j.at("node_s").get<double>();
    p.copy_bytes_per_s = j.at("copy_bytes_per_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorCode::CORRUPT, "device profile: {}", e.what());
  }
  if (!p.valid())
    return Status(ErrorCode::CORRUPT, "device profile: a rate is not positive and finite");
  return p;
}

}  // namespace

std::string device_profile_path(const std::string& device) {
  const std::string root = cache_root();
  if (root.empty()) return "";
  return root + "/headroom/device-profile-" + sanitized(device) + ".json";
}

Result<DeviceProfile> device_profile_read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::NOT_FOUND, "no device profile at {}", path);
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return make_error(ErrorCode::CORRUPT, "{} is not JSON", path);
  Result<DeviceProfile> p = profile_from(j);
  if (!p.ok()) return make_error(ErrorCode::CORRUPT, "{}: {}", path, p.status().message());
  return p;
}

Status device_profile_write(const std::string& path, const DeviceProfile& p) {
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) return make_error(ErrorCode::IO, "cannot create {}: {}", target.parent_path().string(),
                            ec.message());
  // Written beside the target and renamed over it: a process reading at the same time sees the
  // old file or the new one, never half of one.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << profile_json(p).dump(2) << "\n";
    if (!f) return make_error(ErrorCode::IO, "cannot write {}", tmp);
  }
  std::filesystem::rename(tmp, target, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error(ErrorCode::IO, "cannot write {}", path);
  }
  return Status();
}

DeviceProfile device_profile_cached(Backend& backend, const std::string& path) {
  const std::string device = backend.info().name;
  if (!path.empty()) {
    Result<DeviceProfile> cached = device_profile_read(path);
    if (cached.ok() && cached->device == device) return std::move(cached).value();
    if (cached.ok())
      std::fprintf(stderr, "headroom: warning: %s is the profile of %s, not %s; measuring again\n",
                   path.c_str(), cached->device.c_str(), device.c_str());
    else if (cached.status().code() != ErrorCode::NOT_FOUND)
      std::fprintf(stderr, "headroom: warning: %s; measuring the device again\n",
                   cached.status().message().c_str());
  }
  Result<DeviceProfile> measured = device_profile_measure(backend);
  if (!measured.ok()) {
    DeviceProfile fallback = device_profile_default(backend.memory_is_host());
    std::fprintf(stderr, "headroom: warning: cannot measure %s (%s); planning with %s\n",
                 device.c_str(), measured.status().message().c_str(),
                 device_profile_describe(fallback).c_str());
    return fallback;
  }
  if (!path.empty()) {
    if (Status w = device_profile_write(path, *measured); !w.ok())
      std::fprintf(stderr, "headroom: warning: %s (the profile is measured again next time)\n",
                   w.message().c_str());
  }
  return std::move(measured).value();
}

DeviceProfile device_profile_load(Backend& backend) {
  if (backend.memory_is_host()) return device_profile_default(true);  // Note [device profile cache]
  return device_profile_cached(backend, device_profile_path(backend.info().name));
}

}  // namespace hr
