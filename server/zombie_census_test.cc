// The census's conversions: piles as the API reports them (order, limit),
// the pids ratio, the metric figures. Pure; no process is needed.
#include "server/zombie_census.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scanner/cgroup_pids.h"
#include "scanner/zombie_piles.h"

namespace runreaper::server {
namespace {

scanner::ZombiePile Pile(int run, int reaper, int64_t n) {
  scanner::ZombiePile p;
  p.run_index = run;
  p.reaper_pid = reaper;
  p.reaper_comm = "make";
  p.reaper_start_time = 77;
  p.reaper_member = run == 0;
  p.zombies = n;
  return p;
}

TEST(ZombieCensusTest, PilesBiggestFirstAndBounded) {
  std::vector<scanner::RunSpec> specs(2);
  specs[0].run_id = "b-run";
  specs[1].run_id = "a-run";
  const std::vector<scanner::ZombiePile> piles = {Pile(0, 10, 5), Pile(0, 11, 1800), Pile(1, 12, 5),
                                                  Pile(1, 13, 2),
                                                  // Out of range: ignored.
                                                  Pile(7, 14, 9999)};
  int left_off = -1;
  std::vector<v1::ZombiePile> out = ToProtoPiles(specs, piles, 10, &left_off);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(left_off, 0);
  EXPECT_EQ(out[0].run_id(), "b-run");
  EXPECT_EQ(out[0].reaper_pid(), 11);
  EXPECT_EQ(out[0].zombies(), 1800);
  EXPECT_EQ(out[0].reaper_comm(), "make");
  EXPECT_EQ(out[0].reaper_start_time_ticks(), 77u);
  EXPECT_TRUE(out[0].reaper_is_member());
  // Equal counts: by run id, so a-run's pile of 5 comes first.
  EXPECT_EQ(out[1].run_id(), "a-run");
  EXPECT_FALSE(out[1].reaper_is_member());
  EXPECT_EQ(out[2].run_id(), "b-run");
  EXPECT_EQ(out[3].zombies(), 2);

  out = ToProtoPiles(specs, piles, 2, &left_off);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(left_off, 2);
  EXPECT_EQ(out[1].zombies(), 5);
}

TEST(ZombieCensusTest, PidsRatio) {
  EXPECT_EQ(PidsUsageRatio({950, 1000}), std::optional<double>(0.95));
  EXPECT_EQ(PidsUsageRatio({950, std::nullopt}), std::nullopt);  // "max": no limit
  EXPECT_EQ(PidsUsageRatio({3, 0}), std::nullopt);               // a sweep's freeze, not a limit
}

TEST(ZombieCensusTest, Figures) {
  scanner::ZombieCensus census;
  census.zombies = 9;
  census.per_run = {0, 7, 2, 0};
  const ZombieFigures f = FiguresOf(census);
  EXPECT_EQ(f.zombies, 9);
  EXPECT_EQ(f.runs_with_zombies, 2);
  EXPECT_EQ(f.max_run_zombies, 7);
  EXPECT_EQ(f.runs_with_pids_limit, 0);
  EXPECT_FALSE(f.max_pids_usage.has_value());
}

}  // namespace
}  // namespace runreaper::server
