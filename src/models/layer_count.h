// How many numbered layers a checkpoint holds: `prefix`0., `prefix`1., ... among tensor names.
#pragma once

#include <string>
#include <vector>

namespace hr {

// The n for which `prefix`0 .. `prefix`(n-1) all occur as `prefix`<i>.<rest> in `names` (a gap
// ends the count).
int numbered_layers(const std::vector<std::string>& names, const std::string& prefix);

}  // namespace hr
