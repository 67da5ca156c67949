// A connection to Redis through hiredis (libhiredis-dev): commands as argument vectors, pipelines,
// MULTI/EXEC transactions and Pub/Sub reading, with replies copied into plain values so that no
// hiredis type leaks out. Without hiredis at build time every call fails with a clear error.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "jobs/redis_url.h"

namespace hr {

struct RedisReply {
  enum class Type : uint8_t { NIL, STRING, INTEGER, ARRAY, STATUS, ERROR };
  Type type = Type::NIL;
  std::string str;  // STRING, STATUS, ERROR
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // ARRAY

  bool nil() const { return type == Type::NIL; }
  // The n-th element, or a NIL reply when there is none (malformed replies read as missing).
  const RedisReply& at(size_t n) const;
};

using RedisArgs = std::vector<std::string>;

// Whether this build has hiredis (`serve --queue` and `worker` need it).
bool redis_available();

// Note [redis reconnect]: a connection that failed (Redis restarted, a timeout) is dropped and
// made again on the next call, so a front or worker outlives a Redis restart; the call that saw
// the failure returns an IO error and is never retried here (XADD twice would queue twice).
// Thread-safe: one mutex per connection (calls are short; Pub/Sub readers own theirs).
class RedisClient {
 public:
  // Connects (and AUTH, SELECT); IO naming the URL when Redis is not reachable.
  static Result<std::unique_ptr<RedisClient>> connect(const RedisUrl& url);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One command; a Redis error reply is an error Status ("redis: ERR ...").
  Result<RedisReply> command(const RedisArgs& argv);
  // Several commands in one round trip; every reply, errors included as ERROR replies.
  Result<std::vector<RedisReply>> pipeline(const std::vector<RedisArgs>& cmds);
  // MULTI, the commands, EXEC: the EXEC reply (one element per command), or the abort error.
  Result<RedisReply> transaction(const std::vector<RedisArgs>& cmds);
  // Pub/Sub: the next pushed message within `timeout`, nullopt when none came.
  Result<std::optional<RedisReply>> next_push(std::chrono::milliseconds timeout);
  const RedisUrl& url() const { return url_; }

 private:
  explicit RedisClient(RedisUrl url) : url_(std::move(url)) {}
  Status reconnect_locked();
  Status send_locked(const std::vector<RedisArgs>& cmds);
  Result<RedisReply> read_locked();
  Status fail_locked(const std::string& what);

  RedisUrl url_;
  std::mutex mu_;
  void* ctx_ = nullptr;  // redisContext*
};

// The reply as text: STRING or STATUS as is, INTEGER in decimal, else "".
std::string redis_text(const RedisReply& r);

}  // namespace hr
