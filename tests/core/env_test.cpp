#include "core/env.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace hr {
namespace {

constexpr const char* kName = "HEADROOM_TEST_ENV_SWITCH";

TEST(EnvSwitch, UnsetKeepsTheDefault) {
  unsetenv(kName);
  EXPECT_TRUE(env_switch(kName, true));
  EXPECT_FALSE(env_switch(kName, false));
}

TEST(EnvSwitch, ZeroAndOneOverrideTheDefault) {
  setenv(kName, "0", 1);
  EXPECT_FALSE(env_switch(kName, true));
  EXPECT_FALSE(env_switch(kName, false));
  setenv(kName, "1", 1);
  EXPECT_TRUE(env_switch(kName, true));
  EXPECT_TRUE(env_switch(kName, false));
  unsetenv(kName);
}

TEST(EnvSwitch, OtherValuesKeepTheDefault) {
  for (const char* v : {"", "yes", "01", "10", "true", " 1"}) {
    setenv(kName, v, 1);
    EXPECT_TRUE(env_switch(kName, true)) << "'" << v << "'";
    EXPECT_FALSE(env_switch(kName, false)) << "'" << v << "'";
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace hr
