#include "core/base/env_allow_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace parallax {
namespace {

using ::testing::HasSubstr;

TEST(EnvAllowListTest, TheSafeSetIsSortedAndHoldsNoVariableThatRunsCode) {
  EXPECT_TRUE(std::is_sorted(kSafeTaskEnvNames.begin(), kSafeTaskEnvNames.end()));
  EnvAllowList list;
  for (const char* name :
       {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "SHELLOPTS", "PS4", "IFS",
        "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONSTARTUP", "PYTHONBREAKPOINT",
        "PERL5OPT", "PERL5LIB", "NODE_OPTIONS", "RUBYOPT", "BROWSER", "GCONV_PATH", "LOCPATH",
        "OMP_TOOL_LIBRARIES", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_DEBUG_FILE",
        "MALLOC_CONF", "LD_BIND_NOW"}) {
    EXPECT_FALSE(list.Allows(name)) << name;
  }
  EXPECT_TRUE(list.Allows("OMP_NUM_THREADS"));
  EXPECT_TRUE(list.Allows("LC_ALL"));
}

TEST(EnvAllowListTest, PatternsMatchWholeNames) {
  EnvAllowList list({"PX_TEST_*", "FOO", "TINY_?"});
  EXPECT_TRUE(list.Allows("PX_TEST_BEHAVIOR"));
  EXPECT_TRUE(list.Allows("FOO"));
  EXPECT_TRUE(list.Allows("TINY_A"));
  EXPECT_FALSE(list.Allows("PX_TESTX"));
  EXPECT_FALSE(list.Allows("FOOD"));
  EXPECT_FALSE(list.Allows("TINY_AB"));
  EXPECT_FALSE(list.Allows("LD_PRELOAD"));
  EXPECT_EQ(list.Refused({"FOO", "LD_PRELOAD", "OMP_NUM_THREADS", "BASH_ENV"}),
            (std::vector<std::string>{"LD_PRELOAD", "BASH_ENV"}));
}

TEST(EnvAllowListTest, TheRefusalNamesEveryVariableAndTheFlagThatAllowsIt) {
  std::string m = RefusedEnvMessage({"LD_PRELOAD", "BASH_ENV"});
  EXPECT_THAT(m, HasSubstr("LD_PRELOAD, BASH_ENV"));
  EXPECT_THAT(m, HasSubstr("--allow-env LD_PRELOAD --allow-env BASH_ENV"));
  EXPECT_THAT(m, HasSubstr("Nothing was run"));
}

}  // namespace
}  // namespace parallax
