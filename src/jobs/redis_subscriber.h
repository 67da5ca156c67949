// A thread that reads Redis Pub/Sub channels on a connection of its own and hands each message
// to a callback; fronts read the workers' events, workers read the fronts' control messages.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "jobs/redis_url.h"

namespace hr {

class RedisSubscriber {
 public:
  using OnMessage = std::function<void(const std::string& channel, const std::string& payload)>;
  RedisSubscriber(RedisUrl url, std::vector<std::string> channels, OnMessage on_message);
  RedisSubscriber(const RedisSubscriber&) = delete;
  RedisSubscriber& operator=(const RedisSubscriber&) = delete;
  ~RedisSubscriber();
  // Called on the subscriber's thread each time the subscription is made (again after a
  // reconnect): a front asks the workers for their latest vram_update then. Set before start().
  void set_on_subscribed(std::function<void()> f) { on_subscribed_ = std::move(f); }
  void start();
  void stop();
  // True once subscribed (and again after a reconnect): tests wait for it.
  bool subscribed() const { return subscribed_.load(); }

 private:
  void loop();
  bool session();  // one connection's life; false when it failed (then retried)

  RedisUrl url_;
  std::vector<std::string> channels_;
  OnMessage on_message_;
  std::function<void()> on_subscribed_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> subscribed_{false};
  std::thread thread_;
};

}  // namespace hr
