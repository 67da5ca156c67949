// Where the dashboard's built files (web/dist) are found when `--web-root` is not given.
#pragma once

#include <string>

namespace hr {

// The first folder holding an index.html among: <exe>/../share/headroom/web (an installed
// headroom), <exe>/../web/dist (a build folder inside the source tree), <exe>/web/dist and the
// source tree's web/dist (HEADROOM_SOURCE_DIR, set at compile time). None built: the source
// tree's web/dist, so that the 404 names where the files belong.
std::string web_root_find();

}  // namespace hr
