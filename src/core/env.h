// On/off switches read from the environment (HEADROOM_CUDA_GRAPHS=0, HEADROOM_STACK_QKV=0, ...): one
// rule for all of them, so that each site says only its name and its default.
#pragma once

namespace hr {

// `default_on`, unless the variable `name` is set to exactly "0" (off) or "1" (on); any other
// value, the empty string included, leaves the default. Sites that are read on every call
// cache the result in a function-local static.
bool env_switch(const char* name, bool default_on);

}  // namespace hr
