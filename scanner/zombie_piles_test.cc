// Zombie piles: PilesOf on hand-built listings (pure), and CountZombies on a
// real parent that never reaps real zombie children.
#include "scanner/zombie_piles.h"

#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "scanner/process_test_util.h"
#include "scanner/procfs.h"

namespace runreaper::scanner {
namespace {

Member Zombie(int run, int pid, int reaper) {
  Member m;
  m.run_index = run;
  m.process.pid = pid;
  m.process.ppid = reaper;
  m.process.state = 'Z';
  m.process.start_time = 1000 + pid;
  m.zombie = true;
  m.reaper_pid = reaper;
  return m;
}

Member Live(int run, int pid) {
  Member m;
  m.run_index = run;
  m.process.pid = pid;
  m.process.state = 'S';
  m.process.start_time = 1000 + pid;
  return m;
}

TEST(ZombiePilesTest, GroupsZombiesByRunAndReaper) {
  Snapshot snap;
  ProcessInfo job;
  job.pid = 100;
  job.comm = "make";
  job.start_time = 1100;
  ProcessInfo runner;
  runner.pid = 50;
  runner.comm = "Runner.Worker";
  runner.start_time = 900;
  snap.processes = {runner, job};

  Membership m;
  m.members = {Live(0, 100), Zombie(0, 101, 100), Zombie(0, 102, 100), Zombie(0, 103, 100),
               Zombie(0, 104, 50), Zombie(1, 201, 77),
               // The same zombie listed twice under one run (two sources):
               // counted once.
               Zombie(1, 202, 77), Zombie(1, 202, 77)};
  const std::vector<ZombiePile> piles = PilesOf(m, snap);
  ASSERT_EQ(piles.size(), 3u);
  // Run 0: the job holds three (it is a member), the runner one (it is not).
  EXPECT_EQ(piles[0].run_index, 0);
  EXPECT_EQ(piles[0].reaper_pid, 100);
  EXPECT_EQ(piles[0].reaper_comm, "make");
  EXPECT_EQ(piles[0].reaper_start_time, 1100u);
  EXPECT_TRUE(piles[0].reaper_member);
  EXPECT_EQ(piles[0].zombies, 3);
  EXPECT_EQ(piles[1].reaper_pid, 50);
  EXPECT_EQ(piles[1].reaper_comm, "Runner.Worker");
  EXPECT_FALSE(piles[1].reaper_member);
  EXPECT_EQ(piles[1].zombies, 1);
  // Run 1: a reaper gone from the snapshot: no comm, no start time.
  EXPECT_EQ(piles[2].run_index, 1);
  EXPECT_EQ(piles[2].reaper_pid, 77);
  EXPECT_EQ(piles[2].reaper_comm, "");
  EXPECT_EQ(piles[2].reaper_start_time, 0u);
  EXPECT_EQ(piles[2].zombies, 2);

  EXPECT_EQ(ZombiesPerRun(piles, 3), (std::vector<int64_t>{4, 2, 0}));
}

TEST(ZombiePilesTest, NoZombiesNoPiles) {
  Membership m;
  m.members = {Live(0, 100), Live(0, 101)};
  EXPECT_TRUE(PilesOf(m, Snapshot()).empty());
}

// A real parent that never reaps: a shell forks kChildren sleeps and execs
// `sleep` (which never waits); the children exit and stay zombies.
TEST(ZombiePilesTest, CountsARealPileOfARunningRun) {
  constexpr int kChildren = 7;
  Spawned s = SpawnSh(absl::StrCat("i=0; while [ $i -lt ", kChildren,
                                   " ]; do sleep 0.2 & i=$((i+1)); done; exec sleep 1000"));
  ASSERT_GT(s.pid, 1);
  ProcFs procfs;
  RunSpec run;
  run.run_id = "pile";
  run.leader = s.id;
  // A run that never registered this process: nothing of it is counted.
  RunSpec other;
  other.run_id = "other";
  other.leader = s.id;
  other.leader.pgid = 1;  // led no group it could claim
  other.leader.sid = 1;
  other.leader.pid = 424242;
  ZombieCensus census;
  EXPECT_TRUE(base::WaitFor(
      [&] {
        absl::StatusOr<ZombieCensus> c = CountZombies(procfs, {run, other});
        if (!c.ok()) return false;
        census = *std::move(c);
        return census.zombies == kChildren;
      },
      absl::Seconds(20)))
      << census.zombies;
  ASSERT_EQ(census.piles.size(), 1u);
  EXPECT_EQ(census.piles[0].run_index, 0);
  EXPECT_EQ(census.piles[0].reaper_pid, s.pid);
  EXPECT_EQ(census.piles[0].reaper_comm, "sleep");
  EXPECT_EQ(census.piles[0].reaper_start_time, s.id.start_time);
  EXPECT_TRUE(census.piles[0].reaper_member);
  EXPECT_EQ(census.piles[0].zombies, kChildren);
  EXPECT_EQ(census.per_run, (std::vector<int64_t>{kChildren, 0}));

  // Its parent gone, the zombies are reaped by whoever inherits them.
  ASSERT_EQ(kill(s.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(s.pid, &status, 0), s.pid);
  EXPECT_TRUE(base::WaitFor([&] {
    absl::StatusOr<ZombieCensus> c = CountZombies(procfs, {run});
    return c.ok() && c->zombies == 0 && c->piles.empty();
  }));
}

}  // namespace
}  // namespace runreaper::scanner
