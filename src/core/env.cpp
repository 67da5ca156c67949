#include "core/env.h"

#include <cstdlib>
#include <string_view>

namespace hr {

bool env_switch(const char* name, bool default_on) {
  const char* e = std::getenv(name);
  if (!e) return default_on;
  const std::string_view v(e);
  return v == "1" ? true : v == "0" ? false : default_on;
}

}  // namespace hr
