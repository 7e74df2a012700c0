#include "tools/ctl/ctl_args.h"

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::tools {
namespace {

const std::set<std::string> kValues = {"pid", "label", "socket"};
const std::set<std::string> kBools = {"json", "keep", "help"};

TEST(ParseArgsTest, FlagsAnywhereRepeatableAndBothValueForms) {
  ASSERT_OK_AND_ASSIGN(ParsedArgs a,
                       ParseArgs({"--json", "register", "r1", "--pid", "42", "--label=a=b",
                                  "--label=c=d", "--keep", "--socket=/x"},
                                 kValues, kBools));
  EXPECT_EQ(a.positional, (std::vector<std::string>{"register", "r1"}));
  EXPECT_EQ(a.Get("pid"), "42");
  EXPECT_EQ(a.flags["label"], (std::vector<std::string>{"a=b", "c=d"}));
  EXPECT_TRUE(a.Bool("json"));
  EXPECT_TRUE(a.Bool("keep"));
  EXPECT_FALSE(a.Bool("help"));
  EXPECT_EQ(a.Get("socket"), "/x");
}

TEST(ParseArgsTest, DashDashEndsFlags) {
  ASSERT_OK_AND_ASSIGN(ParsedArgs a,
                       ParseArgs({"exec", "r", "--", "sh", "--pid=1"}, kValues, kBools));
  EXPECT_TRUE(a.dashdash);
  EXPECT_EQ(a.after_dashdash, (std::vector<std::string>{"sh", "--pid=1"}));
  EXPECT_FALSE(a.Has("pid"));
}

TEST(ParseArgsTest, Errors) {
  EXPECT_FALSE(ParseArgs({"--nope"}, kValues, kBools).ok());
  EXPECT_FALSE(ParseArgs({"get", "--pid"}, kValues, kBools).ok());
  EXPECT_FALSE(ParseArgs({"--json=maybe"}, kValues, kBools).ok());
  ASSERT_OK_AND_ASSIGN(ParsedArgs a, ParseArgs({"--json=false", "-h"}, kValues, kBools));
  EXPECT_FALSE(a.Bool("json"));
  EXPECT_TRUE(a.Bool("help"));
}

}  // namespace
}  // namespace runreaper::tools
