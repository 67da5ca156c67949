// HttpResponse builders and URL decoding.
#include "server/http_types.h"

namespace hr {

HttpResponse HttpResponse::json(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpResponse HttpResponse::text(int status, std::string body, std::string content_type) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::error(int status, const std::string& message) {
  return json(status, Json{{"error", message}});
}

std::string url_decode(const std::string& s, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(char(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

void url_split(const std::string& target, std::string& path,
               std::map<std::string, std::string>& query) {
  const size_t q = target.find('?');
  path = url_decode(target.substr(0, q), false);
  query.clear();
  if (q == std::string::npos) return;
  const std::string qs = target.substr(q + 1);
  size_t start = 0;
  while (start <= qs.size()) {
    size_t amp = qs.find('&', start);
    if (amp == std::string::npos) amp = qs.size();
    const std::string part = qs.substr(start, amp - start);
    if (!part.empty()) {
      const size_t eq = part.find('=');
      query[url_decode(part.substr(0, eq), true)] =
          eq == std::string::npos ? std::string() : url_decode(part.substr(eq + 1), true);
    }
    start = amp + 1;
  }
}

}  // namespace hr
