// Routes by method and path pattern ("/history/{prompt_id}"); every route also answers under
// /api/ (ComfyUI registers both). Unknown paths are 404, known paths with another method 405.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/http_types.h"

namespace hr {

// `params` holds the values of the pattern's {placeholders}, in order.
using RouteFn =
    std::function<HttpResponse(const HttpRequest& req, const std::vector<std::string>& params)>;

class Router {
 public:
  void add(const std::string& method, const std::string& pattern, RouteFn fn);
  // Never throws: a handler's exception is a 500 (Note [handlers never kill the server]).
  HttpResponse dispatch(const HttpRequest& req) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;  // "{x}" matches one segment
    RouteFn fn;
  };
  std::vector<Route> routes_;
};

// The path without a leading "/api" ("/api/prompt" -> "/prompt"; "/api" -> "/").
std::string route_path_strip_api(const std::string& path);

}  // namespace hr
