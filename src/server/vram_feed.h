// `vram_update` WebSocket messages from the telemetry ring (memory/telemetry.h): a few times a
// second while a job runs, and on change when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "jobs/memory_levels.h"
#include "memory/telemetry.h"
#include "server/server_config.h"

namespace hr {

// The data of one vram_update: both lenses, the allocator's segments, the budget with its
// warning and danger levels (of the server's `budget`; the running job's own budget when it is
// lower, Note [warning level]), and the running node's planned and measured peak.
Json vram_json(const TelemetrySample& s, const MemoryLevels& levels, uint64_t budget);

class VramFeed {
 public:
  // `busy` says whether a job runs; `send` broadcasts one message's data.
  VramFeed(Telemetry& telemetry, const ServerConfig& config, const MemoryLevels& levels,
           uint64_t budget, std::function<bool()> busy, std::function<void(const Json&)> send);
  VramFeed(const VramFeed&) = delete;
  VramFeed& operator=(const VramFeed&) = delete;
  ~VramFeed();
  void start();
  void stop();
  // Sends the latest sample again soon, changed or not (a client joined).
  void resend();

 private:
  void loop();
  Telemetry& telemetry_;
  const ServerConfig& config_;
  const MemoryLevels& levels_;
  const uint64_t budget_;
  std::function<bool()> busy_;
  std::function<void(const Json&)> send_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool resend_ = false;
  std::thread thread_;
};

}  // namespace hr
