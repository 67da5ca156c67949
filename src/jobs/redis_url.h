// Where a Redis server is, as `--queue redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]` names it.
#pragma once

#include <string>

#include "core/status.h"

namespace hr {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string user;      // empty: AUTH with the password only (Redis before 6)
  std::string password;  // empty: no AUTH
  std::string str() const;  // redis://host:port/db, without the password (for logs)
};

// INVALID_ARGUMENT naming what is wrong (scheme, port, db).
Result<RedisUrl> redis_url_parse(const std::string& text);

}  // namespace hr
