// WorkerVramLatest: a map from worker id to its last vram_update data, pruned by heartbeats.
#include "server/worker_vram.h"

#include <set>

namespace hr {

void WorkerVramLatest::put(const Json& data) {
  if (!data.is_object() || !data.contains("worker") || !data["worker"].is_string()) return;
  std::lock_guard<std::mutex> lock(mu_);
  latest_[data["worker"].get<std::string>()] = data;
}

std::vector<Json> WorkerVramLatest::live(const Json& workers) {
  std::vector<Json> out;
  std::set<std::string> ids;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Json& w : workers.is_array() ? workers : Json::array()) {
    if (!w.is_object() || !w.contains("id") || !w["id"].is_string()) continue;
    const std::string id = w["id"].get<std::string>();
    ids.insert(id);
    if (auto it = latest_.find(id); it != latest_.end()) out.push_back(it->second);
  }
  std::erase_if(latest_, [&](const auto& kv) { return !ids.count(kv.first); });
  return out;
}

size_t WorkerVramLatest::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_.size();
}

}  // namespace hr
