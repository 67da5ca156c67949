// The connected WebSocket clients by client id, and sending to one client or to all without
// ever blocking the sender (Note [bounded send queues]).
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hr {

using Json = nlohmann::json;

// One connection (server/ws_session.cpp).
class WsClient {
 public:
  virtual ~WsClient() = default;
  // Queues a frame; never blocks. Returns false when the client's queue was full and the
  // client is being dropped.
  virtual bool send(std::shared_ptr<const std::string> frame, bool binary) = 0;
};

// Note [bounded send queues]: every client has a queue of at most N frames. A client that
// reads slower than the server writes fills it, and is then disconnected rather than buffered
// without bound; the worker thread, which sends progress and vram_update messages, only ever
// takes the hub's lock and appends to queues, so a slow or dead client cannot stall a job.
class WsHub {
 public:
  void join(const std::string& client_id, std::shared_ptr<WsClient> client);
  // Called (outside the hub's lock) with the client id after each client joins: the vram feed
  // resends its latest sample (a front: every live worker's, Note [latest per worker]), so a page
  // opened while the devices are idle draws the current state at once.
  void set_on_join(std::function<void(const std::string&)> f) { on_join_ = std::move(f); }
  void leave(const WsClient* client);
  // {"type": type, "data": data} to every connection of `client_id`; empty id: everyone.
  void send(const std::string& client_id, const std::string& type, const Json& data);
  void send_binary(const std::string& client_id, std::shared_ptr<const std::string> frame);
  size_t clients() const;
  // Forgets every client (shutdown: before the I/O context that runs them is destroyed).
  void clear();
  uint64_t dropped() const { return dropped_.load(); }

 private:
  void deliver(const std::string& client_id, const std::shared_ptr<const std::string>& frame,
               bool binary);
  struct Entry {
    std::string client_id;
    std::shared_ptr<WsClient> client;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::atomic<uint64_t> dropped_{0};
  std::function<void(const std::string&)> on_join_;  // set before the listener starts
};

}  // namespace hr
