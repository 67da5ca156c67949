// The server's request and response as plain data, so that routes are ordinary functions that
// know nothing of Beast (server/http_listener.cpp converts at the socket).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hr {

using Json = nlohmann::json;

struct HttpRequest {
  std::string method;                        // "GET", "POST", ...
  std::string path;                          // percent-decoded, without the query
  std::map<std::string, std::string> query;  // percent-decoded; a repeated key keeps the last
  std::string content_type;
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  static HttpResponse json(int status, const Json& body);
  static HttpResponse text(int status, std::string body,
                           std::string content_type = "text/plain; charset=utf-8");
  // {"error": message} with a 4xx/5xx status.
  static HttpResponse error(int status, const std::string& message);
};

// Percent-decoding ('+' is a space in queries). Malformed escapes are kept as written.
std::string url_decode(const std::string& s, bool plus_is_space);
// Splits a request target into its decoded path and query.
void url_split(const std::string& target, std::string& path,
               std::map<std::string, std::string>& query);

}  // namespace hr
