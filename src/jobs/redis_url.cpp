// redis_url_parse: the scheme, the optional credentials, host, port and database number.
#include "jobs/redis_url.h"

#include <charconv>

namespace hr {
namespace {

bool int_parse(const std::string& s, int lo, int hi, int& out) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

std::string RedisUrl::str() const { return fmt::format("redis://{}:{}/{}", host, port, db); }

Result<RedisUrl> redis_url_parse(const std::string& text) {
  const std::string scheme = "redis://";
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::INVALID_ARGUMENT,
                      "bad queue URL '{}': {} (expected redis://HOST:PORT/DB)", text, why);
  };
  if (text.compare(0, scheme.size(), scheme) != 0) return bad("it must start with redis://");
  RedisUrl u;
  std::string rest = text.substr(scheme.size());
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    const std::string cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    u.user = colon == std::string::npos ? "" : cred.substr(0, colon);
    u.password = colon == std::string::npos ? cred : cred.substr(colon + 1);
  }
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && !int_parse(db, 0, 1 << 20, u.db)) return bad("the database is not a number");
  }
  if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    if (!int_parse(rest.substr(colon + 1), 1, 65535, u.port)) return bad("the port is not 1..65535");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no host");
  u.host = rest;
  return u;
}

}  // namespace hr
