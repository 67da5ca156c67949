// web_root_find: candidates next to the executable, then the source tree.
#include "server/web_root.h"

#include <filesystem>
#include <vector>

#ifndef HEADROOM_SOURCE_DIR
#define HEADROOM_SOURCE_DIR "."
#endif

namespace hr {

std::string web_root_find() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const fs::path source = fs::path(HEADROOM_SOURCE_DIR) / "web" / "dist";
  std::vector<fs::path> candidates;
  if (!ec && !exe_dir.empty())
    candidates = {exe_dir / ".." / "share" / "headroom" / "web", exe_dir / ".." / "web" / "dist",
                  exe_dir / "web" / "dist"};
  candidates.push_back(source);
  for (const fs::path& c : candidates)
    if (fs::is_regular_file(c / "index.html", ec)) return fs::weakly_canonical(c, ec).string();
  return source.lexically_normal().string();
}

}  // namespace hr
