#include "tools/bench/json_line.h"

#include <cmath>
#include <limits>
#include <string>

#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::tools {
namespace {

TEST(JsonLineTest, SortedKeysRoundedNumbersIntsAndBools) {
  JsonLine j;
  j.Number("walk_us", 3.68449, 3)
      .Int("processes", 1000)
      .Bool("quick", true)
      .Number("kill_us", 0.19419, 4)
      .Int("parent_pte_kb", -1);
  ASSERT_OK_AND_ASSIGN(std::string line, j.ToString());
  EXPECT_EQ(line,
            "{\"kill_us\":0.1942,\"parent_pte_kb\":-1,\"processes\":1000,"
            "\"quick\":true,\"walk_us\":3.684}");
}

TEST(JsonLineTest, NonFiniteNumbersAreNull) {
  JsonLine j;
  j.Number("nan", std::nan(""), 2).Number("inf", std::numeric_limits<double>::infinity(), 2);
  ASSERT_OK_AND_ASSIGN(std::string line, j.ToString());
  EXPECT_EQ(line, "{\"inf\":null,\"nan\":null}");
}

TEST(JsonLineTest, KeysAreEscaped) {
  JsonLine j;
  j.Int("a\"b\n", 1);
  ASSERT_OK_AND_ASSIGN(std::string line, j.ToString());
  EXPECT_EQ(line, "{\"a\\\"b\\n\":1}");
}

TEST(JsonLineTest, EmptyObject) {
  ASSERT_OK_AND_ASSIGN(std::string line, JsonLine().ToString());
  EXPECT_EQ(line, "{}");
}

TEST(JsonLineTest, ParseThenMergeRenamesCollidingKeys) {
  ASSERT_OK_AND_ASSIGN(JsonLine other,
                       JsonLine::Parse("{\"loadavg\":2.5,\"orphans_ms\":12,\"ok\":true}"));
  JsonLine j;
  j.Number("loadavg", 1.25, 2).Int("processes", 5000);
  j.Merge(other, "orphans_");
  ASSERT_OK_AND_ASSIGN(std::string line, j.ToString());
  EXPECT_EQ(line,
            "{\"loadavg\":1.25,\"ok\":true,\"orphans_loadavg\":2.5,"
            "\"orphans_ms\":12,\"processes\":5000}");
}

TEST(JsonLineTest, ParseRefusesWhatIsNotAnObject) {
  EXPECT_FALSE(JsonLine::Parse("not json").ok());
  EXPECT_FALSE(JsonLine::Parse("[1,2]").ok());
}

}  // namespace
}  // namespace runreaper::tools
