// The census's conversions: piles as the API reports them (order, limit),
// the pids ratio, the metric figures (pure); and the pids figures of a real
// run cgroup where this host's cgroup v2 has the pids controller.
#include "server/sweep/zombie_census.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scanner/cgroup_pids.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"
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

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out.good();
}

// A RUNNING run whose dedicated cgroup has pids.max 4 and one process in
// it: usage 1/4. Skipped where cgroup v2 has no pids controller (on a host
// that binds it to cgroup v1, pids.current never exists in v2).
TEST(ZombieCensusTest, PidsFiguresOfARealRunCgroup) {
  auto cg = scanner::MakeTestCgroup("pids-usage");
  if (!cg.has_value()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  const std::string dir = cg->first;
  const std::string parent = dir.substr(0, dir.rfind('/'));
  const std::string root = parent.substr(0, parent.rfind('/'));
  // Enabling it may be allowed (a pure cgroup v2 host); ignore failure.
  WriteText(root + "/cgroup.subtree_control", "+pids");
  WriteText(parent + "/cgroup.subtree_control", "+pids");
  struct stat st;
  if (::stat((dir + "/pids.current").c_str(), &st) != 0) {
    ::rmdir(dir.c_str());
    GTEST_SKIP() << "no pids controller in cgroup v2 here (" << root
                 << "/cgroup.controllers lacks pids: cgroup v1 holds it)";
  }
  ASSERT_TRUE(WriteText(dir + "/pids.max", "4"));
  scanner::Spawned s = scanner::SpawnSh("exec sleep 100", {}, dir);
  v1::Run run;
  run.set_run_id("limited");
  run.set_state(v1::RUN_STATE_RUNNING);
  run.set_cgroup(cg->second);
  v1::Run unlimited_finished = run;  // not RUNNING: not counted
  unlimited_finished.set_state(v1::RUN_STATE_FINISHED);
  ZombieFigures f;
  scanner::ProcFs procfs;
  AddPidsFigures(procfs, {run, unlimited_finished}, &f);
  EXPECT_EQ(f.runs_with_pids_limit, 1);
  EXPECT_EQ(f.max_pids_usage, std::optional<double>(0.25));
  ::kill(s.pid, SIGKILL);
  ::waitpid(s.pid, nullptr, 0);
  ASSERT_TRUE(WriteText(dir + "/pids.max", "max"));
  ZombieFigures none;
  AddPidsFigures(procfs, {run}, &none);
  EXPECT_EQ(none.runs_with_pids_limit, 0);
  EXPECT_FALSE(none.max_pids_usage.has_value());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace runreaper::server
