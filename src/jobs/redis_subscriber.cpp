// RedisSubscriber: SUBSCRIBE, then read pushed messages until stopped; reconnects after a failure
// (Note [redis reconnect]). Messages published while disconnected are lost: Pub/Sub carries only
// progress and vram_update, while jobs and history live in streams and hashes.
#include "jobs/redis_subscriber.h"

#include <chrono>
#include <cstdio>

#include "core/signal_stack.h"
#include "jobs/redis_client.h"

namespace hr {
namespace {
constexpr std::chrono::milliseconds kPoll{200};       // how often stop() is noticed
constexpr std::chrono::milliseconds kRetryDelay{500};  // between reconnect attempts
}  // namespace

RedisSubscriber::RedisSubscriber(RedisUrl url, std::vector<std::string> channels,
                                 OnMessage on_message)
    : url_(std::move(url)), channels_(std::move(channels)), on_message_(std::move(on_message)) {}

RedisSubscriber::~RedisSubscriber() { stop(); }

void RedisSubscriber::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    signal_stack_install();
    loop();
  });
}

void RedisSubscriber::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RedisSubscriber::loop() {
  bool warned = false;
  while (!stop_) {
    if (session()) continue;
    if (!warned) std::fprintf(stderr, "headroom: lost the Redis subscription; reconnecting\n");
    warned = true;
    for (auto t = std::chrono::milliseconds(0); t < kRetryDelay && !stop_; t += kPoll / 4)
      std::this_thread::sleep_for(kPoll / 4);
  }
}

bool RedisSubscriber::session() {
  Result<std::unique_ptr<RedisClient>> c = RedisClient::connect(url_);
  if (!c.ok()) return false;
  RedisArgs sub = {"SUBSCRIBE"};
  sub.insert(sub.end(), channels_.begin(), channels_.end());
  if (!(*c)->command(sub).ok()) return false;
  subscribed_ = true;
  if (on_subscribed_) on_subscribed_();
  while (!stop_) {
    Result<std::optional<RedisReply>> m = (*c)->next_push(kPoll);
    if (!m.ok()) {
      subscribed_ = false;
      return false;
    }
    // ["message", channel, payload]; subscribe confirmations and anything else are skipped.
    if (!*m || (*m)->at(0).str != "message") continue;
    on_message_((*m)->at(1).str, (*m)->at(2).str);
  }
  subscribed_ = false;
  return true;
}

}  // namespace hr
