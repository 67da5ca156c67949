// The latest vram_update of every worker, as a front forwarding the workers' messages received
// them, so that a WebSocket client that joins sees every device at once (Note [latest per worker]).
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hr {

using Json = nlohmann::json;

// Note [latest per worker]: an idle worker sends vram_update only when its memory moves, so a
// dashboard opened later would see nothing until a job runs. The front keeps the last data of
// each worker (by its `worker` field) and resends them to a joining client: only those of the
// workers whose heartbeat is live, so a worker that stopped or was killed is not drawn again
// (and is forgotten here).
class WorkerVramLatest {
 public:
  // Keeps `data` (a vram_update's data) as its worker's latest; data without a worker is ignored.
  void put(const Json& data);
  // The latest data of every worker listed in `workers` (heartbeat records with "id"), in the
  // records' order; every other worker is forgotten.
  std::vector<Json> live(const Json& workers);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Json> latest_;
};

}  // namespace hr
