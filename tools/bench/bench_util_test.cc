#include "tools/bench/bench_util.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace runreaper::bench {
namespace {

TEST(BenchUtilTest, MedianAndNearestRankPercentile) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  std::vector<double> v;
  for (int i = 1; i <= 200; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 100);
  EXPECT_EQ(Percentile(v, 99), 198);  // the 2nd-worst of 200
  EXPECT_EQ(Percentile(v, 100), 200);
  EXPECT_EQ(Percentile({7}, 99), 7);
}

TEST(BenchUtilTest, ParseStatusKb) {
  const char kStatus[] =
      "Name:\tbench\nVmPTEx:\t1 kB\nVmRSS:\t   13312 kB\nVmPTE:\t     104 kB\n"
      "Threads:\t3\n";
  EXPECT_EQ(ParseStatusKb(kStatus, "VmRSS"), 13312);
  EXPECT_EQ(ParseStatusKb(kStatus, "VmPTE"), 104);
  EXPECT_EQ(ParseStatusKb(kStatus, "VmSwap"), -1);
  EXPECT_EQ(ParseStatusKb(kStatus, "Threads"), -1);  // no "kB"
  EXPECT_EQ(ParseStatusKb("VmRSS:\tlots kB\n", "VmRSS"), -1);
}

TEST(BenchUtilTest, StatusKbOfThisProcess) { EXPECT_GT(StatusKb(::getpid(), "VmRSS"), 0); }

}  // namespace
}  // namespace runreaper::bench
