// Router: segment-wise matching of path patterns.
#include "server/router.h"

#include <exception>

namespace hr {
namespace {

std::vector<std::string> path_segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

bool segments_match(const std::vector<std::string>& pattern, const std::vector<std::string>& path,
                    std::vector<std::string>& params) {
  if (pattern.size() != path.size()) return false;
  params.clear();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i].size() > 1 && pattern[i].front() == '{' && pattern[i].back() == '}')
      params.push_back(path[i]);
    else if (pattern[i] != path[i])
      return false;
  }
  return true;
}

}  // namespace

std::string route_path_strip_api(const std::string& path) {
  if (path == "/api") return "/";
  if (path.rfind("/api/", 0) == 0) return path.substr(4);
  return path;
}

void Router::add(const std::string& method, const std::string& pattern, RouteFn fn) {
  routes_.push_back(Route{method, path_segments(pattern), std::move(fn)});
}

// Note [handlers never kill the server]: a route that throws (a JSON type error on a field a
// client sent with the wrong type, a bug) answers 400/500 and the server goes on.
HttpResponse Router::dispatch(const HttpRequest& req) const {
  const std::vector<std::string> path = path_segments(route_path_strip_api(req.path));
  std::vector<std::string> params;
  bool path_known = false;
  for (const Route& r : routes_) {
    if (!segments_match(r.segments, path, params)) continue;
    path_known = true;
    if (r.method != req.method) continue;
    try {
      return r.fn(req, params);
    } catch (const Json::exception& e) {
      return HttpResponse::error(400, std::string("bad request: ") + e.what());
    } catch (const std::exception& e) {
      return HttpResponse::error(500, std::string("internal error: ") + e.what());
    }
  }
  return path_known ? HttpResponse::error(405, "method not allowed")
                    : HttpResponse::error(404, "not found: " + req.path);
}

}  // namespace hr
