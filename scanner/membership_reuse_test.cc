// The reuse rule of group and session numbers (scanner/membership.h, issue 29
// item 1) on hand-built snapshots (scanner/membership_test_util.h): once no
// live process has the leader's pid, a process in its group or session is
// the run's only when it descends from the run, started before the leader
// was last known alive, or shares the session with one that did.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scanner/membership.h"
#include "scanner/membership_test_util.h"

namespace runreaper::scanner {
namespace {

using membership_testing::Base;
using membership_testing::ByPid;
using membership_testing::ChildNsRun;
using membership_testing::FakeEvidence;
using membership_testing::InNs;
using membership_testing::kLeaderAlive;
using membership_testing::kLeaderStart;
using membership_testing::kNsA;
using membership_testing::Proc;
using membership_testing::TheObserver;
using membership_testing::TheRun;
using membership_testing::TwoContainers;

bool AnyNoteHas(const Membership& m, const std::string& text) {
  for (const std::string& note : m.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

// The issue: the leader 100 is gone and so is the stranger that was born
// with pid 100 later, called setsid() and forked 300 before it exited. 300
// is in group and session 100, but they are the stranger's, not r1's.
TEST(MembershipReuseTest, NewSessionUnderAFreedNumberIsNotTheRuns) {
  Snapshot s = Base();
  s.processes.push_back(Proc(300, 1, 100, 100, kLeaderAlive + 400));
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {TheRun()}, ev);
  EXPECT_TRUE(m.members.empty());
  EXPECT_TRUE(AnyNoteHas(m, "run r1: 1 process(es) in group or session 100 started after"))
      << (m.notes.empty() ? "no note" : m.notes.front());

  // Started at the very tick the leader was last known alive: not provably
  // before it, not the run's. One tick earlier: the run's.
  s.processes.back().start_time = kLeaderAlive;
  EXPECT_TRUE(FindMembers(s, TheObserver(), {TheRun()}, ev).members.empty());
  s.processes.back().start_time = kLeaderAlive - 1;
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.count(300), 1u);
  EXPECT_EQ(by[300].source, MatchSource::kPgid);
}

TEST(MembershipReuseTest, WhatStartedWhileTheLeaderLivedIsStillTheRuns) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));  // group and session
  s.processes.push_back(Proc(102, 1, 102, 100, kLeaderStart + 2));  // session only
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {TheRun()}, ev);
  auto by = ByPid(m);
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by[101].source, MatchSource::kPgid);
  EXPECT_EQ(by[102].source, MatchSource::kSid);
  EXPECT_TRUE(m.notes.empty()) << m.notes.front();
}

TEST(MembershipReuseTest, ADescendantIsTheRunsWhenItStarted) {
  Snapshot s = Base();
  s.processes.push_back(Proc(300, 1, 100, 100, kLeaderAlive + 400));
  RunSpec run = TheRun();
  run.descendants[{300, kLeaderAlive + 400}] = {200, 100};
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.count(300), 1u);
  EXPECT_EQ(by[300].source, MatchSource::kPgid);  // the first source that matches
  // Another process with that pid (another start time) is no descendant.
  run.descendants.clear();
  run.descendants[{300, kLeaderAlive + 399}] = {100};
  EXPECT_TRUE(FindMembers(s, TheObserver(), {run}, ev).members.empty());
}

TEST(MembershipReuseTest, ALiveLeaderKeepsItsNumbers) {
  Snapshot s = Base();
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart));
  s.processes.push_back(Proc(300, 100, 100, 100, kLeaderAlive + 400));
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.count(300), 1u);
  EXPECT_EQ(by[300].source, MatchSource::kPgid);
  // A zombie still holds its pid: the same.
  s.processes[3].state = 'Z';
  by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  EXPECT_EQ(by.count(300), 1u);
}

// A run whose leader was never known alive at a known time (a late
// registration, or a time that did not convert): its numbers count only
// while the leader lives, and for its descendants.
TEST(MembershipReuseTest, UnknownAliveTimeLeavesTheLeaderAndDescentOnly) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  RunSpec run = TheRun();
  run.leader_alive_ticks = 0;
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {run}, ev);
  EXPECT_TRUE(m.members.empty());
  EXPECT_TRUE(AnyNoteHas(m, "its leader was never known alive at a known time")) << m.notes.size();

  run.descendants[{101, kLeaderStart + 1}] = {100};
  EXPECT_EQ(ByPid(FindMembers(s, TheObserver(), {run}, ev)).count(101), 1u);

  run.descendants.clear();
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart));
  EXPECT_EQ(ByPid(FindMembers(s, TheObserver(), {run}, ev)).count(101), 1u);
}

// While a process of the run's session lives, the number cannot have been
// handed out again (the kernel frees a pid only once nothing uses it as
// pid, pgid or sid), so every process in that group and session is the
// run's, even one forked after the leader was last seen (a leftover shell
// loop's next child).
TEST(MembershipReuseTest, AnOldSessionMemberVouchesForTheNumber) {
  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  s.processes.push_back(Proc(102, 101, 100, 100, kLeaderAlive + 400));
  s.processes.push_back(Proc(103, 101, 103, 100, kLeaderAlive + 401));
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by[102].source, MatchSource::kPgid);
  EXPECT_EQ(by[103].source, MatchSource::kSid);

  // A descendant in the session vouches as well.
  s.processes[3] = Proc(101, 1, 100, 100, kLeaderAlive + 300);
  RunSpec run = TheRun();
  run.descendants[{101, kLeaderAlive + 300}] = {100};
  by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  EXPECT_EQ(by.size(), 3u);
  // Without it, none of them is the run's.
  EXPECT_TRUE(FindMembers(s, TheObserver(), {TheRun()}, ev).members.empty());
}

// A leader that led its group but not its session (the runner's, 90): an
// old member of the group vouches for nothing, since a process of the
// runner's session may join a new group with that number by setpgid.
TEST(MembershipReuseTest, AGroupMemberDoesNotVouch) {
  Snapshot s = Base();
  s.processes.push_back(Proc(90, 1, 90, 90, 500));
  s.processes.push_back(Proc(101, 1, 100, 90, kLeaderStart + 1));
  s.processes.push_back(Proc(102, 90, 100, 90, kLeaderAlive + 400));
  RunSpec run = TheRun();
  run.leader.sid = 90;
  FakeEvidence ev;
  auto by = ByPid(FindMembers(s, TheObserver(), {run}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_EQ(by[101].source, MatchSource::kPgid);
}

TEST(MembershipReuseTest, ReusedGroupNumberIsNotTheRuns) {
  Snapshot s = Base();
  // A new process holds pid 100 (started later): group 100 is its now.
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart + 50));
  s.processes.push_back(Proc(101, 100, 100, 100, kLeaderStart + 60));
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {TheRun()}, ev);
  EXPECT_TRUE(m.members.empty());
  EXPECT_GE(m.notes.size(), 2u);  // pgid and sid both reused

  // The cookie still identifies the run's own processes.
  ev.environ[101].run_id = "r1";
  auto by = ByPid(FindMembers(s, TheObserver(), {TheRun()}, ev));
  ASSERT_EQ(by.size(), 1u);
  EXPECT_EQ(by[101].source, MatchSource::kCookie);
}

// Two finished runs whose leaders had pid 100 at different times: each owns
// what started in group 100 while its own leader lived, and nothing else.
TEST(MembershipReuseTest, ReusedPgidNumberAcrossRuns) {
  RunSpec old_run = TheRun();
  RunSpec new_run = TheRun();
  new_run.run_id = "r2";
  new_run.leader.start_time = kLeaderStart + 500;
  new_run.leader_alive_ticks = kLeaderStart + 700;
  FakeEvidence ev;

  Snapshot s = Base();
  s.processes.push_back(Proc(101, 1, 100, 100, kLeaderStart + 1));
  Membership m = FindMembers(s, TheObserver(), {old_run, new_run}, ev);
  ASSERT_EQ(m.members.size(), 1u);
  EXPECT_EQ(m.members[0].run_index, 0);

  s = Base();
  s.processes.push_back(Proc(102, 1, 100, 100, kLeaderStart + 600));
  m = FindMembers(s, TheObserver(), {old_run, new_run}, ev);
  ASSERT_EQ(m.members.size(), 1u);
  EXPECT_EQ(m.members[0].run_index, 1);

  // The newer leader is alive: the number is its group, not the old run's.
  s.processes.push_back(Proc(100, 1, 100, 100, kLeaderStart + 500));
  m = FindMembers(s, TheObserver(), {old_run, new_run}, ev);
  for (const Member& x : m.members) EXPECT_EQ(x.run_index, 1);
  EXPECT_EQ(m.members.size(), 2u);  // 100 itself and 102
}

// ---- runs from child PID namespaces: the same rule in that namespace's
// numbers ----

TEST(ChildNamespaceReuseTest, NewInnerSessionUnderAFreedNumberIsNotTheRuns) {
  Snapshot s = Base();
  s.processes.push_back(InNs(801, 1, 801, 801, 500, kNsA, 1, 1, 1));
  // Inner pid 5 was handed out again (ns_last_pid is the container root's),
  // its holder called setsid(), forked inner 9 and exited.
  s.processes.push_back(InNs(809, 801, 815, 815, kLeaderAlive + 400, kNsA, 9, 5, 5));
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {ChildNsRun()}, ev);
  EXPECT_TRUE(m.members.empty());
  EXPECT_TRUE(AnyNoteHas(m, "run c1: 1 process(es) in group or session 5 started after"));

  // The container's own leftovers, started while the leader lived, are the
  // run's; and they vouch for the number.
  s = TwoContainers();
  s.processes.push_back(InNs(809, 806, 805, 805, kLeaderAlive + 400, kNsA, 9, 5, 5));
  auto by = ByPid(FindMembers(s, TheObserver(), {ChildNsRun()}, ev));
  EXPECT_EQ(by.count(806), 1u);
  EXPECT_EQ(by.count(808), 1u);
  EXPECT_EQ(by.count(809), 1u);
  EXPECT_EQ(by.count(905), 0u);  // namespace B's group 5
}

TEST(ChildNamespaceReuseTest, ReusedInnerGroupNumberIsNotTheRuns) {
  Snapshot s = TwoContainers();
  // Pid 5 of namespace A is now another process: group 5 there is not c1's.
  s.processes.push_back(InNs(815, 801, 815, 815, kLeaderStart + 9, kNsA, 5, 5, 5));
  FakeEvidence ev;
  Membership m = FindMembers(s, TheObserver(), {ChildNsRun()}, ev);
  EXPECT_TRUE(m.members.empty());
  ASSERT_EQ(m.notes.size(), 2u);
  EXPECT_NE(m.notes[0].find("pgid 5 now names another process"), std::string::npos) << m.notes[0];
}

}  // namespace
}  // namespace runreaper::scanner
