// The dashboard's static files (web/dist, built by npm in web/): index.html at /headroom/ and
// at /, everything else under /headroom/assets/, confined to the web root.
#include <cctype>
#include <filesystem>

#include "core/path_confine.h"
#include "server/atomic_file.h"
#include "server/routes.h"
#include "server/web_root.h"

namespace hr {
namespace {

namespace fs = std::filesystem;

std::string static_mime(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".woff2") return "font/woff2";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

HttpResponse static_file(const std::string& root, const std::string& subfolder,
                         const std::string& filename) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(root) / "index.html", ec))
    return HttpResponse::error(
        404, "the dashboard is not built: " + root +
                 " has no index.html; run `npm ci && npm run build` in web/ (or start headroom "
                 "serve with --web-root DIR)");
  Result<fs::path> p = path_confined(root, subfolder, filename);
  if (!p.ok()) return HttpResponse::error(403, p.status().message());
  if (!fs::is_regular_file(*p, ec)) return HttpResponse::error(404, "no such file: " + filename);
  Result<std::string> data = file_read(*p);
  if (!data.ok()) return HttpResponse::error(404, data.status().message());
  HttpResponse r = HttpResponse::text(200, std::move(data).value(), static_mime(*p));
  // The files change with every build and are small: the browser asks again each time.
  r.headers.push_back({"Cache-Control", "no-cache"});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  return r;
}

}  // namespace

// Note [dashboard at the root]: headroom ships no ComfyUI front end, so "/" shows the dashboard.
// These routes are added last and the router takes the first match, so a front end that
// registers "/" before them takes the root and the dashboard stays at /headroom/. index.html
// names its files by absolute /headroom/assets/ paths, which work from either place.
void routes_add_static(Router& r, ServerContext& ctx) {
  const std::string root = ctx.config.web_root.empty() ? web_root_find() : ctx.config.web_root;
  auto index = [root](const HttpRequest&, auto&) { return static_file(root, "", "index.html"); };
  r.add("GET", "/", index);
  r.add("GET", "/headroom", index);
  r.add("GET", "/headroom/assets/{file}",
        [root](const HttpRequest&, const std::vector<std::string>& p) {
          return static_file(root, "assets", p[0]);
        });
}

}  // namespace hr
